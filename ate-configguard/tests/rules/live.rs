//! Live objects: dormant and serving workloads, service accounts, the root CA ConfigMap.

use super::*;

/// A live object as `kubectl get -o yaml` prints it: `kind`, `apiVersion`,
/// extra `metadata` and `spec` lines, a pod template with `KEYREF`, and a
/// `status` block.
fn live(kind: &str, api: &str, metadata: &str, spec: &str, status: &str) -> String {
    let template = KEYREF
        .replace("\n      ", "\n        ")
        .replacen("      ", "        ", 1);
    let pod_spec = if kind == "Pod" {
        KEYREF
            .replace("\n      ", "\n  ")
            .replacen("      ", "  ", 1)
    } else {
        format!("  template:\n    spec:\n{template}")
    };
    format!(
        "apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: w\n{metadata}spec:\n{spec}{pod_spec}status:\n{status}"
    )
}

#[test]
fn dormant_workloads_are_warned_about_and_serving_ones_fail() {
    const OWNED: &str = "  ownerReferences:\n    - { apiVersion: apps/v1, kind: Deployment, name: web, uid: u1, controller: true }\n";
    const NO_STATUS: &str = "  {}\n";
    let cases = [
        // A Deployment's old revision at 0 replicas: only a rollback starts it.
        (
            "ReplicaSet",
            "apps/v1",
            OWNED,
            "  replicas: 0\n",
            NO_STATUS,
            true,
        ),
        // The same revision while it still runs pods serves.
        (
            "ReplicaSet",
            "apps/v1",
            OWNED,
            "  replicas: 1\n",
            NO_STATUS,
            false,
        ),
        // A ReplicaSet at 0 that no Deployment controls can be scaled up.
        (
            "ReplicaSet",
            "apps/v1",
            "",
            "  replicas: 0\n",
            NO_STATUS,
            false,
        ),
        // An autoscaler (KEDA) may scale a Deployment up from 0 at any time.
        (
            "Deployment",
            "apps/v1",
            "",
            "  replicas: 0\n",
            NO_STATUS,
            false,
        ),
        ("Pod", "v1", "", "", "  phase: Succeeded\n", true),
        ("Pod", "v1", "", "", "  phase: Failed\n", true),
        ("Pod", "v1", "", "", "  phase: Running\n", false),
        ("Pod", "v1", "", "", "  phase: Pending\n", false),
        (
            "Job",
            "batch/v1",
            "",
            "",
            "  conditions:\n    - { type: Complete, status: \"True\" }\n",
            true,
        ),
        (
            "Job",
            "batch/v1",
            "",
            "",
            "  conditions:\n    - { type: Failed, status: \"True\" }\n",
            true,
        ),
        (
            "Job",
            "batch/v1",
            "",
            "",
            "  conditions:\n    - { type: Suspended, status: \"True\" }\n",
            false,
        ),
        // A condition that is there but not true says nothing has ended.
        (
            "Job",
            "batch/v1",
            "",
            "",
            "  conditions:\n    - { type: Complete, status: \"False\" }\n",
            false,
        ),
        // Owned by a Deployment that does not control it: nothing keeps
        // it at 0, so it may be scaled up.
        (
            "ReplicaSet",
            "apps/v1",
            "  ownerReferences:\n    - { apiVersion: apps/v1, kind: Deployment, name: web, uid: u1, controller: false }\n",
            "  replicas: 0\n",
            NO_STATUS,
            false,
        ),
        ("Job", "batch/v1", "", "", "  active: 1\n", false),
    ];
    for (kind, api, metadata, spec, status, dormant) in cases {
        let workload = live(kind, api, metadata, spec, status);
        let current = format!("{}\n---\n{workload}", cm("cfg", &["DB_HOST"]));
        let report = run(&current, &cm("cfg", &["OTHER"]));
        let case = format!("{kind} {metadata}{spec}{status}");
        let findings: Vec<_> = report.failures.iter().chain(&report.warnings).collect();
        assert_eq!(findings.len(), 1, "{case}: {}", report.to_text());
        assert_eq!(findings[0].code, "missing-key", "{case}");
        if dormant {
            assert!(report.is_safe(), "{case}: {}", report.to_text());
            assert_eq!(findings[0].severity, Severity::Warning);
            assert!(
                findings[0].message.contains("not serving"),
                "{case}: {}",
                findings[0].message
            );
        } else {
            assert!(!report.is_safe(), "{case}: {}", report.to_text());
        }
    }
}

#[test]
fn a_service_accounts_pull_secrets_are_references_of_every_pod_that_runs_as_it() {
    // Kubernetes adds the account's imagePullSecrets to each pod it admits,
    // so deleting one breaks image pulls of pods no manifest names it in.
    let account = |name: &str, secrets: &str| {
        format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\nimagePullSecrets: {secrets}\n"
        )
    };
    let containers =
        "      containers:\n        - name: app\n          image: registry.example/app:1\n";
    let runs_as = |sa: &str| {
        deployment(
            "web",
            &format!("      serviceAccountName: {sa}\n{containers}"),
        )
    };
    let regcred = secret("regcred", &[".dockerconfigjson"]);
    let delete = ["Secret/default/regcred"];
    for (what, workload, accounts, breaks) in [
        (
            "its named account",
            runs_as("builder"),
            account("builder", "[{name: regcred}]"),
            true,
        ),
        // No serviceAccountName: the namespace's `default` account.
        (
            "the default account",
            deployment("web", containers),
            account("default", "[{name: regcred}]"),
            true,
        ),
        (
            "another account",
            runs_as("other"),
            account("builder", "[{name: regcred}]"),
            false,
        ),
        (
            "an account without pull secrets",
            runs_as("builder"),
            account("builder", "[]"),
            false,
        ),
    ] {
        let current = [regcred.as_str(), &accounts, &workload].join("\n---\n");
        let report = run_with(&current, &accounts, Deletion::Listed, &delete);
        // The pull secret the account adds is the pod's one reference.
        assert_eq!(report.references_checked, usize::from(breaks), "{what}");
        if breaks {
            assert_eq!(
                codes(&report),
                vec![("missing-object".into(), None)],
                "{what}"
            );
            let f = &report.failures[0];
            assert!(
                f.site.as_deref().unwrap().contains("imagePullSecrets"),
                "{what}: {f}"
            );
            assert_eq!(
                f.object.as_ref().unwrap().to_string(),
                "Secret/default/regcred"
            );
        } else {
            assert!(report.is_safe(), "{what}: {}", report.to_text());
        }
    }
    // A proposed workload runs as the proposed account: one that drops
    // the secret no longer needs it (the current pods still do).
    let current = [regcred.as_str(), &account("builder", "[{name: regcred}]")].join("\n---\n");
    let proposed = [account("builder", "[]"), runs_as("builder")].join("\n---\n");
    let report = run_with(&current, &proposed, Deletion::Listed, &delete);
    assert!(report.is_safe(), "{}", report.to_text());
    // One that the proposed input leaves as it is runs as the current
    // account: deleting that account's pull secret breaks the new pods.
    let report = run_with(&current, &runs_as("builder"), Deletion::Listed, &delete);
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{}",
        report.to_text()
    );
    assert_eq!(report.failures[0].side, Some(Side::Proposed));
    assert!(
        report.failures[0]
            .site
            .as_deref()
            .unwrap()
            .contains("imagePullSecrets"),
        "{}",
        report.failures[0]
    );
    // Two accounts of one name in one state are an input error.
    let twice = [account("a", "[]"), account("a", "[]")].join("\n---\n");
    let input = CheckInput {
        current: load(&twice),
        ..Default::default()
    };
    let err = check(&input).unwrap_err().to_string();
    assert!(
        err.contains("ServiceAccount") && err.contains("/a"),
        "{err}"
    );
}

#[test]
fn a_service_account_token_secret_holds_the_keys_the_control_plane_writes() {
    // Declared with no data, as the Kubernetes docs show it; the token
    // controller writes token, ca.crt and namespace into it.
    let token_secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: robot-token\n  annotations: { kubernetes.io/service-account.name: robot }\ntype: kubernetes.io/service-account-token\n";
    let reads = |key: &str| {
        deployment(
            "robot",
            &format!(
                "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: V\n              valueFrom: {{ secretKeyRef: {{ name: robot-token, key: {key} }} }}\n"
            ),
        )
    };
    for key in ["token", "ca.crt", "namespace"] {
        let state = [token_secret.to_owned(), reads(key)].join("\n---\n");
        let report = run(&state, &state);
        assert!(report.is_safe(), "{key}: {}", report.to_text());
    }
    // Any other key is not written by anyone.
    let state = [token_secret.to_owned(), reads("password")].join("\n---\n");
    assert_eq!(
        codes(&run(&state, &state)),
        vec![("missing-key".into(), Some("password".into()))]
    );
    // An Opaque Secret with no data holds no key.
    let opaque = token_secret.replace("kubernetes.io/service-account-token", "Opaque");
    let state = [opaque, reads("token")].join("\n---\n");
    assert!(!run(&state, &state).is_safe());
}

/// A live pod, with the service-account volume admission adds to every pod.
const ROOT_CA_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-1\nspec:\n  containers:\n    - name: app\n      image: app:1\n      volumeMounts:\n        - { name: kube-api-access-x, mountPath: /var/run/secrets/kubernetes.io/serviceaccount }\n  volumes:\n    - name: kube-api-access-x\n      projected:\n        sources:\n          - serviceAccountToken: { path: token }\n          - configMap:\n              name: kube-root-ca.crt\n              items: [ { key: ca.crt, path: ca.crt } ]\n";

#[test]
fn a_live_pods_root_ca_resolves_without_the_configmap_in_the_input() {
    // `kubectl get pods -o yaml` lists no ConfigMaps; the control plane
    // keeps kube-root-ca.crt (with ca.crt) in every namespace.
    let report = run_with(ROOT_CA_POD, &cm("app", &["A"]), Deletion::Listed, &[]);
    assert!(report.is_safe(), "{}", report.to_text());
    // Another key of it is not kept by anyone: the key of an object that
    // is there is missing.
    let other = ROOT_CA_POD.replace("key: ca.crt", "key: other.crt");
    let report = run_with(&other, &cm("app", &["A"]), Deletion::Listed, &[]);
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("other.crt".into()))]
    );
}

#[test]
fn prune_never_deletes_the_root_ca_configmap_the_control_plane_keeps() {
    // Every live pod mounts kube-root-ca.crt through its service-account
    // token volume, and `kubectl get` lists it in every namespace; rendered
    // manifests never hold it, and no deploy removes it.
    let pod = ROOT_CA_POD;
    let current = [
        cm("kube-root-ca.crt", &["ca.crt"]),
        cm("app", &["A"]),
        pod.into(),
    ]
    .join("\n---\n");
    let report = run_with(&current, &cm("app", &["A"]), Deletion::Prune, &[]);
    assert!(report.is_safe(), "{}", report.to_text());
    // Deleting it by name is still checked.
    let report = run_with(
        &current,
        &cm("app", &["A"]),
        Deletion::Listed,
        &["ConfigMap/default/kube-root-ca.crt"],
    );
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("ca.crt".into()))]
    );
    // Any other object absent from the proposed input is pruned.
    let with_app = [
        current.clone(),
        cm("app-config", &["A"]),
        deployment("web", ENVFROM_APP),
    ]
    .join("\n---\n");
    let report = run_with(&with_app, &cm("app", &["A"]), Deletion::Prune, &[]);
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{}",
        report.to_text()
    );
}
