//! Secret types: pull secrets and the type changes the API server refuses.

use super::*;

#[test]
fn a_pull_secret_must_keep_the_key_the_kubelet_reads() {
    // The kubelet reads `.dockerconfigjson` (or the legacy `.dockercfg`)
    // from an image pull secret and skips one without it, without a word:
    // the image is then pulled without credentials. Before, a pull secret
    // rewritten without the key (an ExternalSecret missing its
    // dockerconfigjson template, say) passed, as its name was still there.
    let pulls = "      imagePullSecrets: [ {name: regcred} ]\n      containers:\n        - name: app\n          image: registry.example/app:1\n";
    let web = deployment("web", pulls);
    for key in [".dockerconfigjson", ".dockercfg"] {
        let current = docs(&[&secret("regcred", &[key]), &web]);
        let report = run(&current, &secret("regcred", &["token"]));
        assert_eq!(
            codes(&report),
            vec![("missing-key".into(), Some(key.into()))],
            "{key}: {}",
            report.to_text()
        );
        assert!(
            report.failures[0]
                .message
                .contains("pull without credentials"),
            "{}",
            report.to_text()
        );
        // Keeping it (or moving to the other) is fine.
        assert!(run(&current, &secret("regcred", &[key, "token"])).is_safe());
        assert!(run(&current, &secret("regcred", &[".dockerconfigjson"])).is_safe());
    }
    // Through the ServiceAccount as well.
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata: { name: default }\nimagePullSecrets: [ {name: regcred} ]\n";
    let plain = deployment(
        "web",
        "      containers:\n        - name: app\n          image: registry.example/app:1\n",
    );
    let current = docs(&[&secret("regcred", &[".dockerconfigjson"]), account, &plain]);
    let report = run(&current, &secret("regcred", &["token"]));
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some(".dockerconfigjson".into()))],
        "{}",
        report.to_text()
    );
    // A pull secret that never had the key is as it was: not this change's.
    let current = docs(&[&secret("regcred", &["token"]), &web]);
    assert!(run(&current, &secret("regcred", &["other"])).is_safe());
}

/// `secret` with a `type`.
fn typed_secret(name: &str, secret_type: &str, keys: &[&str]) -> String {
    format!("{}type: {secret_type}\n", secret(name, keys))
}

#[test]
fn changing_a_secrets_type_fails_as_the_api_server_refuses_it() {
    // The API server refuses to change a Secret's type in place: the apply
    // fails for it, the Secret keeps its old keys, and a workload that
    // reads the key the change meant to add finds none. Before, the key
    // counted as there.
    let reads_new = "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: CERT\n              valueFrom:\n                secretKeyRef: {name: tls, key: tls.crt}\n";
    let current = docs(&[&typed_secret("tls", "Opaque", &["cert"])]);
    let proposed = docs(&[
        &typed_secret("tls", "kubernetes.io/tls", &["cert", "tls.crt", "tls.key"]),
        &deployment("web", reads_new),
    ]);
    let report = run(&current, &proposed);
    assert_eq!(
        codes(&report),
        vec![("immutable-changed".into(), None)],
        "{}",
        report.to_text()
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains("from Opaque to kubernetes.io/tls") && message.contains("refuses"),
        "{message}"
    );
    // A manifest that leaves the type out keeps the Secret's, as `kubectl
    // apply` and the External Secrets Operator do; so does the same type.
    let keeps = docs(&[
        &secret("tls", &["cert", "tls.crt", "tls.key"]),
        &deployment("web", reads_new),
    ]);
    assert!(run(&current, &keeps).is_safe());
    let same = proposed.replace("kubernetes.io/tls", "Opaque");
    assert!(run(&current, &same).is_safe());
    // A current Secret that spells no type was made without one, so the
    // API server stored it as Opaque: setting another type is refused as
    // well (before: safe, as types were compared only when both states
    // spelled one).
    let untold = docs(&[&secret("tls", &["cert"])]);
    let report = run(&untold, &proposed);
    assert_eq!(
        codes(&report),
        vec![("immutable-changed".into(), None)],
        "{}",
        report.to_text()
    );
    assert!(
        report.failures[0]
            .message
            .contains("from Opaque to kubernetes.io/tls"),
        "{}",
        report.to_text()
    );
    // Spelling Opaque for it, or leaving it out again, is no change.
    assert!(run(&untold, &same).is_safe());
    assert!(run(&untold, &keeps).is_safe());
}

#[test]
fn a_pull_secret_an_external_secret_makes_opaque_fails() {
    // Moving a pull secret to an ExternalSecret whose template says
    // `type: Opaque`: the operator's update is refused (and a Secret made
    // again that way is one the kubelet skips, pulling without
    // credentials).
    let pulls = "      imagePullSecrets: [ {name: regcred} ]\n      containers:\n        - name: app\n          image: registry.example/app:1\n";
    let current = docs(&[
        &typed_secret(
            "regcred",
            "kubernetes.io/dockerconfigjson",
            &[".dockerconfigjson"],
        ),
        &deployment("web", pulls),
    ]);
    let external = |template: &str| {
        format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: regcred}}\nspec:\n  secretStoreRef: {{name: vault, kind: ClusterSecretStore}}\n  target:\n    template: {{{template}}}\n  data:\n  - secretKey: .dockerconfigjson\n    remoteRef: {{key: registry}}\n"
        )
    };
    let report = run(&current, &external("type: Opaque"));
    assert_eq!(
        codes(&report),
        vec![("immutable-changed".into(), None)],
        "{}",
        report.to_text()
    );
    assert!(run(&current, &external("type: kubernetes.io/dockerconfigjson")).is_safe());
    // Without a type, the operator keeps the Secret's.
    assert!(run(&current, &external("engineVersion: v2")).is_safe());
}

#[test]
fn a_hook_secret_may_change_its_type_or_its_immutable_keys() {
    // Helm and Argo CD delete a hook and make it again (their default
    // delete policy, before-hook-creation), so what the API server
    // refuses to change in place is no failure for one.
    let hook = "metadata:\n  annotations: {helm.sh/hook: pre-upgrade}\n";
    let as_hook = |doc: String| doc.replacen("metadata:\n", hook, 1);
    let reads = "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: T\n              valueFrom:\n                secretKeyRef: {name: s, key: t}\n";
    let current = docs(&[
        &as_hook(typed_secret("s", "Opaque", &["t"])),
        &deployment("web", reads),
    ]);
    let proposed = as_hook(typed_secret(
        "s",
        "kubernetes.io/basic-auth",
        &["t", "username"],
    ));
    assert!(run(&current, &proposed).is_safe());
    let immutable = |keys: &[&str]| format!("{}immutable: true\n", secret("s", keys));
    let current = docs(&[&as_hook(immutable(&["t"])), &deployment("web", reads)]);
    assert!(run(&current, &as_hook(immutable(&["t", "u"]))).is_safe());
    // Not a hook: both fail.
    let current = docs(&[&immutable(&["t"]), &deployment("web", reads)]);
    assert_eq!(
        codes(&run(&current, &immutable(&["t", "u"]))),
        vec![("immutable-changed".into(), None)]
    );
}

#[test]
fn a_secrets_type_must_be_a_string() {
    let bad = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: [Opaque]\n";
    let err = load_err(bad).to_string();
    assert!(err.contains("type is not a string"), "{err}");
    // A ConfigMap has no type: one given is dropped, as the API server
    // drops it.
    let cm_typed = format!("{}type: Opaque\n", cm("c", &["k"]));
    assert_eq!(load(&cm_typed).objects[0].secret_type, None);
}

#[test]
fn a_new_pull_secret_must_be_one_the_kubelet_reads() {
    // A workload moved to a new pull secret: the kubelet reads
    // `.dockerconfigjson` only from a Secret of type
    // `kubernetes.io/dockerconfigjson` (`.dockercfg` from
    // `kubernetes.io/dockercfg`), skips any other without a word, and pulls
    // without credentials. A manifest without its type, or an
    // ExternalSecret without a dockerconfigjson template, makes an `Opaque`
    // one. Before, any new pull secret passed.
    let pulls = |name: &str| {
        format!(
            "      imagePullSecrets: [ {{name: {name}}} ]\n      containers:\n        - name: app\n          image: registry.example/app:1\n"
        )
    };
    let current = docs(&[
        &typed_secret(
            "regcred",
            "kubernetes.io/dockerconfigjson",
            &[".dockerconfigjson"],
        ),
        &deployment("web", &pulls("regcred")),
    ]);
    let moved = |secret: &str| docs(&[secret, &deployment("web", &pulls("regcred-v2"))]);
    let fails = |secret: &str, needle: &str| {
        let report = run(&current, &moved(secret));
        assert_eq!(
            codes(&report),
            vec![("missing-key".into(), Some(".dockerconfigjson".into()))],
            "{}",
            report.to_text()
        );
        let message = &report.failures[0].message;
        assert!(
            message.contains(needle) && message.contains("pull without credentials"),
            "{message}"
        );
    };
    fails(
        &secret("regcred-v2", &[".dockerconfigjson"]),
        "only from a Secret of type kubernetes.io/dockerconfigjson, and this new image pull secret is Opaque",
    );
    fails(
        &typed_secret(
            "regcred-v2",
            "kubernetes.io/basic-auth",
            &[".dockerconfigjson", "username"],
        ),
        "is kubernetes.io/basic-auth",
    );
    fails(
        &secret("regcred-v2", &["token"]),
        "has neither .dockerconfigjson nor .dockercfg",
    );
    // A dockerconfigjson or dockercfg Secret without its key is refused by
    // the API server: unusable input.
    for (t, key) in [
        ("kubernetes.io/dockerconfigjson", ".dockerconfigjson"),
        ("kubernetes.io/dockercfg", ".dockercfg"),
    ] {
        let err = load_err(&moved(&typed_secret("regcred-v2", t, &["token"]))).to_string();
        assert!(err.contains(&format!("of type {t} without {key}")), "{err}");
    }
    for (key, t) in [
        (".dockerconfigjson", "kubernetes.io/dockerconfigjson"),
        (".dockercfg", "kubernetes.io/dockercfg"),
    ] {
        let report = run(&current, &moved(&typed_secret("regcred-v2", t, &[key])));
        assert!(report.is_safe(), "{key}: {}", report.to_text());
    }
    // An ExternalSecret makes it Opaque unless its template says otherwise.
    let external = |template: &str| {
        format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: regcred-v2}}\nspec:\n  secretStoreRef: {{name: vault, kind: ClusterSecretStore}}\n  target:\n    template: {{{template}}}\n  data:\n  - secretKey: .dockerconfigjson\n    remoteRef: {{key: registry}}\n"
        )
    };
    fails(&external("engineVersion: v2"), "is Opaque");
    assert!(
        run(
            &current,
            &moved(&external("type: kubernetes.io/dockerconfigjson"))
        )
        .is_safe()
    );
    // An old one that the kubelet already skipped is as it was.
    let skipped = docs(&[
        &secret("regcred", &[".dockerconfigjson"]),
        &deployment("web", &pulls("regcred")),
    ]);
    assert!(run(&skipped, &secret("regcred", &[".dockerconfigjson"])).is_safe());
}

#[test]
fn a_sealed_secret_or_a_secret_provider_class_gives_the_type_it_sets() {
    // `kubeseal` keeps a docker-registry Secret's type in the template; the
    // controller sets it (Opaque when the template gives none) on the Secret
    // it makes or updates. A SecretProviderClass names its Secrets' type.
    let pulls = "      imagePullSecrets: [ {name: regcred} ]\n      containers:\n        - name: app\n          image: registry.example/app:1\n";
    let sealed = |template: &str| {
        format!(
            "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {{name: regcred}}\nspec:\n  encryptedData: {{.dockerconfigjson: AgB}}\n  template: {{{template}}}\n"
        )
    };
    let web = deployment("web", pulls);
    let new = |secret: &str| run(NOTHING, &docs(&[secret, &web]));
    assert!(
        new(&sealed("type: kubernetes.io/dockerconfigjson")).is_safe(),
        "{}",
        new(&sealed("type: kubernetes.io/dockerconfigjson")).to_text()
    );
    assert!(!new(&sealed("metadata: {}")).is_safe());
    // Over a live pull secret, a template without the type makes it Opaque:
    // refused.
    let live = docs(&[
        &typed_secret(
            "regcred",
            "kubernetes.io/dockerconfigjson",
            &[".dockerconfigjson"],
        ),
        &web,
    ]);
    assert_eq!(
        codes(&run(&live, &sealed("metadata: {}"))),
        vec![("immutable-changed".into(), None)]
    );
    let provider = |secret_type: &str| {
        format!(
            "apiVersion: secrets-store.csi.x-k8s.io/v1\nkind: SecretProviderClass\nmetadata: {{name: registry}}\nspec:\n  provider: vault\n  secretObjects:\n  - secretName: regcred\n    type: {secret_type}\n    data: [{{objectName: cfg, key: .dockerconfigjson}}]\n"
        )
    };
    assert!(new(&provider("kubernetes.io/dockerconfigjson")).is_safe());
    assert!(!new(&provider("Opaque")).is_safe());
    // The driver sets that type only on a Secret it creates: over a live
    // one, another type is no refused change (it is not made at all).
    assert!(run(&live, &provider("Opaque")).is_safe());
}

#[test]
fn a_service_accounts_pull_secret_is_judged_as_the_pods_own_is() {
    // Kubernetes adds the account's imagePullSecrets to the pod: a Secret
    // that comes only in a later sync wave, or only with the change for a
    // hook that runs before it, is missing when the pod pulls its image,
    // whichever of the two names it. Before, one named by the account was
    // judged only in the state after the change, so these passed.
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata: { name: default }\nimagePullSecrets: [ {name: regcred} ]\n";
    let pulls = |own: bool| {
        format!(
            "{}      containers:\n        - name: app\n          image: registry.example/app:1\n",
            if own {
                "      imagePullSecrets: [ {name: regcred} ]\n"
            } else {
                ""
            }
        )
    };
    let annotate = |doc: String, name: &str, annotations: &str| {
        doc.replacen(
            &format!("  name: {name}\n"),
            &format!("  name: {name}\n  annotations: {annotations}\n"),
            1,
        )
    };
    let regcred = |annotations: &str| {
        let doc = typed_secret(
            "regcred",
            "kubernetes.io/dockerconfigjson",
            &[".dockerconfigjson"],
        );
        annotate(doc, "regcred", annotations)
    };
    let job = |own: bool, annotations: &str| {
        let doc = format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n{}",
            pulls(own)
        );
        annotate(doc, "migrate", annotations)
    };
    let web = |own: bool| deployment("web", &pulls(own));
    let pre_install = |own: bool| job(own, "{helm.sh/hook: pre-install}");
    // The workload, given whether its pod names the Secret itself.
    type Workload<'a> = &'a dyn Fn(bool) -> String;
    let cases: [(&str, String, Workload<'_>, &str); 3] = [
        // The Deployment (wave 0) rolls out before the Secret (wave 1).
        (
            "a later sync wave",
            regcred("{argocd.argoproj.io/sync-wave: '1'}"),
            &web,
            "later-sync-wave",
        ),
        // Made only by a hook that runs after the change.
        (
            "a post-upgrade hook",
            regcred("{helm.sh/hook: post-install}"),
            &web,
            "created-by-post-hook",
        ),
        // A pre-install Job runs before the Secret is applied.
        (
            "a hook that runs before the change",
            regcred("{}"),
            &pre_install,
            "applied-after-hook",
        ),
    ];
    for (what, secret, workload, code) in cases {
        for own in [true, false] {
            let proposed = if own {
                docs(&[&secret, &workload(own)])
            } else {
                docs(&[&secret, account, &workload(own)])
            };
            let report = run(NOTHING, &proposed);
            let named = if own { "the pod" } else { "its account" };
            assert_eq!(
                codes(&report),
                vec![(code.into(), None)],
                "{what}, named by {named}: {}",
                report.to_text()
            );
            assert!(
                report.failures[0]
                    .site
                    .as_deref()
                    .unwrap()
                    .contains("imagePullSecrets"),
                "{what}, named by {named}: {}",
                report.failures[0]
            );
        }
    }
}
