//! Secrets other objects make: SealedSecret, ExternalSecret, cert-manager, SecretProviderClass.

use super::*;

#[test]
fn custom_resources_with_a_data_list_load_and_a_configmap_with_one_does_not() {
    // An ExternalSecret (external-secrets.io) beside the Deployment reading
    // its Secret: the input was unusable (exit 2) for its `spec.data` list.
    let external = "apiVersion: external-secrets.io/v1beta1\nkind: ExternalSecret\nmetadata:\n  name: db\nspec:\n  secretStoreRef: {name: vault, kind: ClusterSecretStore}\n  data:\n    - secretKey: password\n      remoteRef: {key: prod/db, property: password}\n";
    let live = docs(&[external, &secret("db", &["password"])]);
    assert!(run(&live, &live).is_safe());
    let err = load_err("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: [a, b]\n");
    assert!(err.to_string().contains("data is not a map"), "{err}");
}

/// A SealedSecret `name` whose Secret holds `keys`.
fn sealed(name: &str, keys: &[&str]) -> String {
    let data: String = keys
        .iter()
        .map(|k| format!("    {k}: AgBy3i4OJSWK\n"))
        .collect();
    format!(
        "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: {name}\nspec:\n  encryptedData:\n{data}"
    )
}

/// An ExternalSecret `name` with `spec` (YAML, indented two spaces).
fn external(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1beta1\nkind: ExternalSecret\nmetadata:\n  name: {name}\nspec:\n  secretStoreRef: {{name: vault, kind: ClusterSecretStore}}\n{spec}"
    )
}

const READS_TOKEN: &str = "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: api\n                  key: token\n";

#[test]
fn the_secret_a_sealed_secret_makes_holds_its_key_names() {
    let web = deployment("web", READS_TOKEN);
    // A GitOps repo holds the SealedSecret, never the Secret.
    assert!(run(NOTHING, &docs(&[&sealed("api", &["token"]), &web])).is_safe());
    // Sealing the Secret again without the key breaks the pods that read it.
    let current = docs(&[&sealed("api", &["token"]), &web]);
    let report = run(&current, &docs(&[&sealed("api", &["other"]), &web]));
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("token".into()))]
    );
    // No ciphertext is kept.
    let read = load(&sealed("api", &["token"]));
    assert!(!format!("{read:?}").contains("AgBy3i4"));
    assert_eq!(
        read.objects[0].made_by.as_deref(),
        Some("SealedSecret/default/api")
    );
}

#[test]
fn the_secret_an_external_secret_makes_holds_the_keys_its_manifest_names() {
    let web = deployment("web", READS_TOKEN);
    let data =
        "  data:\n    - secretKey: token\n      remoteRef: {key: prod/api, property: token}\n";
    assert!(run(NOTHING, &docs(&[&external("api", data), &web])).is_safe());
    // Another target name, a template's keys (with or without merging).
    let named = format!("  target: {{name: api}}\n{data}");
    assert!(run(NOTHING, &docs(&[&external("api-source", &named), &web])).is_safe());
    // An empty target name is none: the operator names the Secret after
    // the ExternalSecret.
    let unnamed = format!("  target: {{name: \"\"}}\n{data}");
    assert!(run(NOTHING, &docs(&[&external("api", &unnamed), &web])).is_safe());
    let templated = format!("  target:\n    template:\n      data: {{other: x}}\n{data}");
    assert!(!run(NOTHING, &docs(&[&external("api", &templated), &web])).is_safe());
    let merged = templated.replace(
        "data: {other: x}",
        "mergePolicy: Merge\n      data: {other: x}",
    );
    assert!(run(NOTHING, &docs(&[&external("api", &merged), &web])).is_safe());
    // Keys only the provider knows (dataFrom), or no Secret of its own
    // (creationPolicy None or Merge): not made; the live Secret must be given.
    for spec in [
        format!("  dataFrom:\n    - extract: {{key: prod/api}}\n{data}"),
        format!("  target: {{creationPolicy: None}}\n{data}"),
        format!("  target: {{creationPolicy: Merge}}\n{data}"),
    ] {
        let report = run(NOTHING, &docs(&[&external("api", &spec), &web]));
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), Some("token".into()))],
            "{spec}"
        );
        let live = docs(&[&external("api", &spec), &secret("api", &["token"]), &web]);
        assert!(run(&live, &live).is_safe(), "{spec}");
    }
}

#[test]
fn a_kind_named_like_a_secret_makers_of_another_group_makes_no_secret() {
    // Only the controllers' own groups make Secrets: an ExternalSecret of
    // the retired kubernetes-client.io project, or a custom `Certificate`,
    // is some other kind, and the Secret the pods read must be given.
    let web = deployment("web", READS_TOKEN);
    let regroup = |doc: String, from: &str| doc.replacen(from, "apiVersion: example.com/v1", 1);
    let token = "  data:\n    - secretKey: token\n      remoteRef: {key: prod/api}\n";
    let makers = [
        regroup(
            sealed("api", &["token"]),
            "apiVersion: bitnami.com/v1alpha1",
        ),
        regroup(
            external("api", token),
            "apiVersion: external-secrets.io/v1beta1",
        ),
        external("api", token).replacen(
            "apiVersion: external-secrets.io/v1beta1",
            "apiVersion: kubernetes-client.io/v1",
            1,
        ),
        "apiVersion: example.com/v1\nkind: Certificate\nmetadata:\n  name: api\nspec:\n  \
         secretName: api\n"
            .to_owned(),
        "apiVersion: example.com/v1\nkind: SecretProviderClass\nmetadata:\n  name: api\n\
         spec:\n  secretObjects:\n    - secretName: api\n      data:\n        - key: token\n"
            .to_owned(),
        "apiVersion: example.com/v1\nkind: ClusterExternalSecret\nmetadata:\n  name: api\n\
         spec:\n  namespaces: [default]\n  externalSecretName: api\n  externalSecretSpec:\n    \
         data:\n      - secretKey: token\n        remoteRef: {key: prod/api}\n"
            .to_owned(),
    ];
    for maker in makers {
        // One that names a Secret (`secretName`, `secretObjects[].secretName`,
        // `externalSecretName`) is a kind the guard cannot read: refused,
        // fail closed, unless allow-listed.
        if let Err(e) = load_str(&maker, "test.yaml", &LoadOptions::default()) {
            let e = e.to_string();
            assert!(
                e.contains("names a Secret or ConfigMap") && e.contains("--allow-kind"),
                "{maker}: {e}"
            );
            assert!(
                [
                    "kind: Certificate",
                    "kind: SecretProviderClass",
                    "kind: ClusterExternalSecret"
                ]
                .iter()
                .any(|k| maker.contains(k)),
                "{maker}: refused, yet it names no Secret: {e}"
            );
            continue;
        }
        assert!(load(&maker).objects.is_empty(), "{maker}");
        let report = run(NOTHING, &docs(&[&maker, &web]));
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), Some("token".into()))],
            "{maker}"
        );
    }
}

#[test]
fn a_cluster_external_secret_stands_for_the_secret_in_each_namespace_it_lists() {
    // One ClusterExternalSecret makes an ExternalSecret, and so a Secret,
    // in each namespace. A repo holding it was missing-object for every
    // Deployment reading that Secret.
    let ces = |namespaces: &str| {
        format!(
            "apiVersion: external-secrets.io/v1beta1\nkind: ClusterExternalSecret\nmetadata:\n  \
             name: api-everywhere\nspec:\n  externalSecretName: api\n{namespaces}  \
             externalSecretSpec:\n    secretStoreRef: {{name: vault, kind: ClusterSecretStore}}\n    \
             data:\n      - secretKey: token\n        remoteRef: {{key: prod/api, property: token}}\n"
        )
    };
    let listed = ces("  namespaces: [shop, billing]\n");
    let web_in = |ns: &str| {
        deployment("web", READS_TOKEN).replacen(
            "metadata:\n",
            &format!("metadata:\n  namespace: {ns}\n"),
            1,
        )
    };
    for ns in ["shop", "billing"] {
        let report = run(NOTHING, &docs(&[&listed, &web_in(ns)]));
        assert!(report.is_safe(), "{ns}: {}", report.to_text());
    }
    let read = load(&listed);
    assert_eq!(
        read.objects
            .iter()
            .map(|o| (o.id.to_string(), o.made_by.clone().unwrap()))
            .collect::<Vec<_>>(),
        vec![
            (
                "Secret/shop/api".into(),
                "ClusterExternalSecret/shop/api".into()
            ),
            (
                "Secret/billing/api".into(),
                "ClusterExternalSecret/billing/api".into()
            ),
        ]
    );
    assert!(!format!("{read:?}").contains("prod/api"));
    // An empty externalSecretName is none: the ExternalSecrets, and so
    // their Secrets, take the ClusterExternalSecret's name.
    let unnamed = load(&listed.replace("externalSecretName: api", "externalSecretName: \"\""));
    assert_eq!(
        unnamed
            .objects
            .iter()
            .map(|o| o.id.to_string())
            .collect::<Vec<_>>(),
        [
            "Secret/shop/api-everywhere",
            "Secret/billing/api-everywhere"
        ]
    );
    // A namespace it does not list, or one only a selector picks (the
    // namespaces' labels are not in the input): not made.
    let report = run(NOTHING, &docs(&[&listed, &web_in("other")]));
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("token".into()))]
    );
    let selected = ces("  namespaceSelector: {matchLabels: {team: shop}}\n");
    let report = run(NOTHING, &docs(&[&selected, &web_in("shop")]));
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("token".into()))]
    );
    // Two makers of one Secret: which keys it ends with is not known, and
    // the error names both.
    let own = external(
        "api",
        "  data:\n    - secretKey: other\n      remoteRef: {key: x}\n",
    )
    .replacen("  name: api\n", "  name: api\n  namespace: shop\n", 1);
    let input = CheckInput {
        current: load(NOTHING),
        proposed: load(&docs(&[&listed, &own])),
        inventory: None,
        deletion: Deletion::Listed,
        delete: Vec::new(),
        retired: Vec::new(),
    };
    let err = check(&input).unwrap_err().to_string();
    assert!(
        err.contains(
            "Secret/shop/api (made by ClusterExternalSecret/shop/api and by \
             ExternalSecret/shop/api) appears twice"
        ),
        "{err}"
    );
}

#[test]
fn a_live_secret_beside_its_sealed_or_external_secret_is_the_one_read() {
    // `kubectl get sealedsecret,externalsecret,secret -o yaml` lists both:
    // not "appears twice", and the cluster's keys win.
    let web = deployment("web", READS_TOKEN);
    let data = "  data:\n    - secretKey: other\n      remoteRef: {key: prod/api}\n";
    for maker in [sealed("api", &["other"]), external("api", data)] {
        let live = docs(&[&maker, &secret("api", &["token"]), &web]);
        assert!(run(&live, &live).is_safe(), "{maker}");
        let objects = load(&live).objects;
        assert_eq!(objects.len(), 1, "{objects:?}");
        assert_eq!(objects[0].made_by, None);
    }
}

#[test]
fn the_secret_a_cert_manager_certificate_makes_holds_the_tls_keys() {
    let certificate = |extra: &str| {
        format!(
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: web\nspec:\n  secretName: web-tls\n  issuerRef: {{name: letsencrypt, kind: ClusterIssuer}}\n  dnsNames: [web.example.com]\n{extra}"
        )
    };
    let mounts = |items: &str| {
        format!(
            "      containers:\n        - name: app\n          image: app:1\n      volumes:\n        - name: tls\n          secret:\n            secretName: web-tls\n            items: {items}\n"
        )
    };
    let web = |items| deployment("web", &mounts(items));
    let tls = "[{key: tls.crt, path: c}, {key: tls.key, path: k}]";
    assert!(run(NOTHING, &docs(&[&certificate(""), &web(tls)])).is_safe());
    // ca.crt is written only when the issuer knows the CA: not counted on.
    let ca = run(
        NOTHING,
        &docs(&[&certificate(""), &web("[{key: ca.crt, path: ca}]")]),
    );
    assert_eq!(
        codes(&ca),
        vec![("missing-key".into(), Some("ca.crt".into()))]
    );
    // Keystores, when asked for.
    let jks = "  keystores:\n    jks:\n      create: true\n      passwordSecretRef: {name: jks-pass, key: password}\n";
    let store = web("[{key: keystore.jks, path: ks}]");
    assert!(run(NOTHING, &docs(&[&certificate(jks), &store])).is_safe());
    assert!(!run(NOTHING, &docs(&[&certificate(""), &store])).is_safe());
    // An Ingress's TLS Secret that a Certificate makes resolves: no warning.
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  tls:\n    - secretName: web-tls\n";
    assert!(
        run(NOTHING, &docs(&[&certificate(""), ingress]))
            .warnings
            .is_empty()
    );
}

#[test]
fn the_secret_a_secret_provider_class_syncs_holds_the_keys_its_data_names() {
    // The Secrets Store CSI driver syncs `spec.secretObjects` into Secrets.
    // Before, a SecretProviderClass was passed over: a new one was
    // missing-object for the Deployment reading its Secret, and one that
    // dropped a key from `data` passed, the live Secret still having it.
    let spc = |items: &str| {
        format!(
            "apiVersion: secrets-store.csi.x-k8s.io/v1\nkind: SecretProviderClass\nmetadata:\n  \
             name: vault-api\nspec:\n  provider: vault\n  parameters:\n    objects: |\n      \
             - objectName: api-token\n        secretPath: secret/data/api\n  secretObjects:\n    \
             - secretName: api\n      type: Opaque\n      data:\n{items}"
        )
    };
    let both = "        - objectName: api-token\n          key: token\n        \
                - objectName: api-url\n          key: url\n";
    let url_only = "        - objectName: api-url\n          key: url\n";
    let web = deployment("web", READS_TOKEN);
    assert!(run(NOTHING, &docs(&[&spc(both), &web])).is_safe());
    let live = docs(&[&spc(both), &secret("api", &["token", "url"]), &web]);
    let report = run(&live, &spc(url_only));
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("token".into()))],
        "{}",
        report.to_text()
    );
    assert!(
        report.to_text().contains("Secret/default/api"),
        "{}",
        report.to_text()
    );
    // An item without a key, or data that is no list: unusable input.
    for bad in [
        "        - objectName: api-token\n",
        "        api-token: token\n",
    ] {
        let text = spc(bad);
        let err = load_str(&text, "spc.yaml", &LoadOptions::default()).unwrap_err();
        assert!(
            err.to_string().contains("spec.secretObjects[0].data"),
            "{err}"
        );
    }
    // Data left empty, or out: a Secret without keys.
    for empty in ["      data: []\n", "      data: {}\n", ""] {
        let text = spc("").replace("      data:\n", empty);
        let m = load_str(&text, "spc.yaml", &LoadOptions::default()).unwrap();
        assert_eq!(m.objects.len(), 1, "{text}");
        assert!(m.objects[0].keys.is_empty(), "{text}");
    }
    // The provider's parameters and object names are never kept: names
    // of the Secret's keys are all that is read.
    let m = load(&spc(both));
    let debug = format!("{m:?}");
    assert!(
        !debug.contains("secret/data/api") && !debug.contains("api-token"),
        "{debug}"
    );
}
