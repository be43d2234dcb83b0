//! The transition rule, one behaviour per test.

mod common;

use ate_configguard::{
    CheckInput, Deletion, LoadOptions, Severity, Side, check, load_str,
    manifest::{Inventory, inventory, parse_object_id, unplaced_namespace},
};
use common::*;

const ENVFROM_APP: &str = "      containers:\n        - name: app\n          image: app:1\n          envFrom:\n            - configMapRef:\n                name: app-config\n";

#[test]
fn historical_incident_key_removed_from_bulk_loaded_configmap_fails() {
    // No env entry names REDIS_DB_HOST: only envFrom loads it.
    let current = format!(
        "{}\n---\n{}",
        cm("app-config", &["REDIS_DB_HOST", "LOG_LEVEL"]),
        deployment("pusher", ENVFROM_APP)
    );
    let proposed = cm("app-config", &["LOG_LEVEL"]);
    let report = run(&current, &proposed);
    assert!(!report.is_safe());
    assert_eq!(
        codes(&report),
        vec![("bulk-key-removed".into(), Some("REDIS_DB_HOST".into()))]
    );
    let f = &report.failures[0];
    assert_eq!(
        f.workload.as_ref().unwrap().to_string(),
        "Deployment/default/pusher"
    );
    assert_eq!(f.container.as_deref(), Some("app"));
    assert!(
        f.site
            .as_deref()
            .unwrap()
            .starts_with("envFrom[0].configMapRef")
    );
    assert_eq!(report.exit_code(), 1);
}

#[test]
fn unchanged_state_is_safe() {
    let current = format!(
        "{}\n---\n{}",
        cm("app-config", &["A"]),
        deployment("web", ENVFROM_APP)
    );
    let report = run(&current, &cm("app-config", &["A", "B"]));
    assert!(report.is_safe(), "{}", report.to_text());
    assert_eq!(report.exit_code(), 0);
}

const KEYREF: &str = "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: DB_HOST\n              valueFrom:\n                configMapKeyRef:\n                  name: cfg\n                  key: DB_HOST\n";

#[test]
fn removing_a_referenced_key_fails() {
    let current = format!(
        "{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", KEYREF)
    );
    let report = run(&current, &cm("cfg", &["OTHER"]));
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("DB_HOST".into()))]
    );
    assert!(report.failures[0].message.contains("removes"));
}

#[test]
fn deleting_a_referenced_object_fails_only_when_the_input_says_so() {
    let current = format!(
        "{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", KEYREF)
    );
    // Absent from the proposed input, no prune: left as it is.
    assert!(run(&current, &cm("unrelated", &["X"])).is_safe());
    let pruned = run_with(&current, &cm("unrelated", &["X"]), Deletion::Prune, &[]);
    assert_eq!(
        codes(&pruned),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
    let listed = run_with(
        &current,
        &cm("unrelated", &["X"]),
        Deletion::Listed,
        &["ConfigMap/default/cfg"],
    );
    assert_eq!(
        codes(&listed),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
}

#[test]
fn an_object_both_deleted_and_in_the_proposed_manifests_is_an_input_error() {
    // Which of the two is meant cannot be told: checking either would
    // judge another change than the one applied.
    let current = docs(&[&cm("cfg", &["DB_HOST"]), &deployment("web", KEYREF)]);
    let input = CheckInput {
        current: load(&current),
        proposed: load(&cm("cfg", &["DB_HOST"])),
        delete: vec![parse_object_id("ConfigMap/default/cfg").unwrap()],
        ..Default::default()
    };
    let err = check(&input).unwrap_err().to_string();
    assert!(
        err.contains("ConfigMap/default/cfg is both deleted and in the proposed manifests"),
        "{err}"
    );
}

#[test]
fn a_workload_pruned_with_its_config_still_serves_until_deleted_and_the_finding_says_so() {
    // Decommissioning web: the proposed input keeps only "unrelated", so
    // --prune deletes both web and cfg. Until web is deleted its pods serve
    // (and a restart would fail without cfg): unsafe, with the way out.
    let current = format!(
        "{}\n---\n{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", KEYREF),
        deployment("kept", KEYREF)
    );
    let plain = "      containers:\n        - name: app\n          image: app:2\n";
    let proposed = format!(
        "{}\n---\n{}",
        cm("unrelated", &["X"]),
        deployment("kept", plain)
    );
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    let about = |name: &str| {
        report
            .failures
            .iter()
            .find(|f| f.workload.as_ref().is_some_and(|w| w.name == name))
            .unwrap_or_else(|| panic!("no finding for {name}: {}", report.to_text()))
            .message
            .clone()
    };
    assert!(
        about("web").contains("the same change prunes this workload"),
        "{}",
        about("web")
    );
    // A workload the proposed input keeps is not pruned: no such note.
    assert!(!about("kept").contains("prunes"), "{}", about("kept"));
    // Without --prune nothing is deleted and all is safe.
    assert!(run(&current, &proposed).is_safe());
    // An empty proposed input (an empty List, as an empty file is refused)
    // touches no namespace, so nothing scopes the prune: every workload
    // goes too, and each finding says so.
    let empty = r#"{"apiVersion": "v1", "kind": "List", "items": []}"#;
    let report = run_with(&current, empty, Deletion::Prune, &[]);
    assert_eq!(report.failures.len(), 2, "{}", report.to_text());
    for f in &report.failures {
        assert!(
            f.message.contains("the same change prunes this workload"),
            "{f}"
        );
    }
}

#[test]
fn moving_a_key_from_a_configmap_to_a_secret_is_refused_while_referenced() {
    let current = format!(
        "{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", KEYREF)
    );
    let proposed = format!(
        "{}\n---\n{}",
        secret("cfg", &["DB_HOST"]),
        cm("cfg", &["X"])
    );
    let report = run(&current, &proposed);
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("DB_HOST".into()))]
    );
    assert!(
        report.failures[0].message.contains("Secret/default/cfg"),
        "{}",
        report.failures[0].message
    );
    // Deleting the ConfigMap outright: reported as reclassified.
    let report = run_with(&current, &secret("cfg", &["DB_HOST"]), Deletion::Prune, &[]);
    assert_eq!(
        codes(&report),
        vec![("reclassified".into(), Some("DB_HOST".into()))]
    );
}

#[test]
fn a_key_moving_between_objects_is_allowed_once_no_stale_reference_remains() {
    let new_ref = KEYREF.replace("name: cfg", "name: cfg-v2");
    // Step 1: the workload still reads cfg; removing the key there fails.
    let current = format!(
        "{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", KEYREF)
    );
    let proposed = format!(
        "{}\n---\n{}\n---\n{}",
        cm("cfg", &[]),
        cm("cfg-v2", &["DB_HOST"]),
        deployment("web", &new_ref)
    );
    let report = run(&current, &proposed);
    assert!(
        !report.is_safe(),
        "the old pods still read cfg/DB_HOST during the rollout"
    );
    assert_eq!(
        report.failures[0].side,
        Some(ate_configguard::Side::Current)
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains(
            "it is now in ConfigMap/default/cfg-v2 (a stale reference to the old source remains)"
        ) && message.ends_with("in an earlier step of its own, then remove it"),
        "{}",
        report.failures[0].message
    );
    // Step 1 done right: add the new source and move the reference, keep the old key.
    let proposed = format!(
        "{}\n---\n{}",
        cm("cfg-v2", &["DB_HOST"]),
        deployment("web", &new_ref)
    );
    assert!(run(&current, &proposed).is_safe());
    // Step 2: nothing reads cfg/DB_HOST any more: now it may go.
    let current = format!(
        "{}\n---\n{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        cm("cfg-v2", &["DB_HOST"]),
        deployment("web", &new_ref)
    );
    assert!(run_with(&current, &cm("cfg-v2", &["DB_HOST"]), Deletion::Prune, &[]).is_safe());
}

#[test]
fn proposed_workloads_must_resolve_too() {
    let report = run(&cm("cfg", &["A"]), &deployment("web", KEYREF));
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("DB_HOST".into()))]
    );
    assert_eq!(
        report.failures[0].side,
        Some(ate_configguard::Side::Proposed)
    );
    let text = report.to_text();
    assert!(
        text.starts_with("FAIL [missing-key] Deployment/default/web (proposed) container app"),
        "{text}"
    );
    assert!(
        text.ends_with(
            "\nUNSAFE: 1 failure(s), 0 warning(s); 0 workload(s) current and 1 proposed, 1 reference(s) checked\n"
        ),
        "{text}"
    );
    assert!(
        !report.failures[0].message.contains("a key of this name"),
        "{}",
        report.failures[0].message
    );
}

#[test]
fn an_object_in_neither_state_fails_and_says_where_one_written_by_a_job_belongs() {
    // ingress-nginx's controller mounts a Secret that its certgen Job
    // writes: the manifests never hold it. Unknown is a failure, and the
    // finding says how to give the live object.
    let mounts = "      containers:\n        - name: controller\n          image: c:1\n      volumes:\n        - name: cert\n          secret:\n            secretName: admission\n";
    let report = run(NOTHING, &deployment("controller", mounts));
    assert_eq!(codes(&report), vec![("missing-object".into(), None)]);
    assert_eq!(
        report.failures[0].message,
        "the object exists in neither the current nor the proposed state (one that a Job \
         or a controller writes belongs in the current state: `kubectl get secret admission \
         -n default -o yaml`, read for its key names only)"
    );
    let live = secret("admission", &["cert", "key"]);
    assert!(run(&live, &deployment("controller", mounts)).is_safe());
}

#[test]
fn a_reference_to_an_object_without_the_key_names_the_object_that_has_it() {
    // A generator's key renamed, its user not updated: the new object lacks
    // the key the current one has. Nothing moved; the reference is wrong.
    let current = docs(&[&cm("cfg", &["DB_HOST"]), &deployment("web", KEYREF)]);
    let renamed = KEYREF.replace("name: cfg", "name: cfg-v2");
    let proposed = docs(&[
        &cm("cfg-v2", &["DATABASE_HOST"]),
        &deployment("web", &renamed),
    ]);
    let report = run(&current, &proposed);
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("DB_HOST".into()))]
    );
    assert_eq!(
        report.failures[0].message,
        "the key exists in neither the current nor the proposed object; a key of this \
         name is in ConfigMap/default/cfg, which this reference does not name"
    );
    // The object is in both states and never had the key, which four
    // others hold: named in order.
    let mut both = vec![cm("cfg", &["OTHER"]), deployment("web", KEYREF)];
    both.extend(["d", "b", "c", "a"].map(|n| cm(&format!("cfg-{n}"), &["DB_HOST"])));
    let both = both.join("\n---\n");
    let report = run(&both, &both);
    // One finding for the reference, for both states' workloads.
    assert_eq!(report.failures.len(), 1, "{}", report.to_text());
    assert_eq!(report.failures[0].side, Some(Side::Both));
    for f in &report.failures {
        assert_eq!(
            f.message,
            "the key exists in neither the current nor the proposed object; a key of this \
             name is in ConfigMap/default/cfg-a, ConfigMap/default/cfg-b, \
             ConfigMap/default/cfg-c, ConfigMap/default/cfg-d, which this reference does not \
             name"
        );
    }
}

#[test]
fn optional_references_are_warnings_not_failures() {
    let optional = KEYREF.replace(
        "key: DB_HOST\n",
        "key: DB_HOST\n                  optional: true\n",
    );
    let current = format!(
        "{}\n---\n{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", &optional)
    );
    let report = run(&current, &cm("cfg", &[]));
    assert!(report.is_safe());
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].severity, Severity::Warning);
    // The same for optional volume sources: the volume's items, and a
    // projected volume's secret.
    let volumes = "      containers:\n        - name: app\n          image: app:1\n      volumes:\n        - name: files\n          configMap:\n            name: cfg\n            optional: true\n            items: [ { key: DB_HOST, path: db } ]\n        - name: creds\n          projected:\n            sources:\n              - secret: { name: creds, optional: true, items: [ { key: token, path: token } ] }\n";
    let current = docs(&[
        &cm("cfg", &["DB_HOST"]),
        &secret("creds", &["token"]),
        &deployment("web", volumes),
    ]);
    let report = run_with(
        &current,
        &cm("cfg", &[]),
        Deletion::Listed,
        &["Secret/default/creds"],
    );
    assert!(report.is_safe(), "{}", report.to_text());
    assert_eq!(report.warnings.len(), 2, "{}", report.to_text());
}

#[test]
fn references_resolve_in_the_workloads_namespace() {
    let in_ns =
        deployment("web", KEYREF).replace("  name: web\n", "  name: web\n  namespace: prod\n");
    let current = format!("{}\n---\n{}", cm("cfg", &["DB_HOST"]), in_ns);
    let report = run(&current, NOTHING);
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
    assert_eq!(
        report.failures[0].object.as_ref().unwrap().to_string(),
        "ConfigMap/prod/cfg"
    );
}

#[test]
fn bulk_load_checks_keys_from_a_previous_inventory() {
    let current = deployment("web", ENVFROM_APP);
    let opts = LoadOptions::default();
    let inv: Inventory =
        inventory(&load_str(&cm("app-config", &["A", "B"]), "inv.yaml", &opts).unwrap());
    let input = CheckInput {
        current: load(&format!("{}\n---\n{}", current, cm("app-config", &["A"]))),
        proposed: load(&cm("app-config", &["A"])),
        inventory: Some(inv),
        deletion: Deletion::Listed,
        delete: vec![],
        retired: Vec::new(),
    };
    let report = check(&input).unwrap();
    assert_eq!(
        codes(&report),
        vec![("bulk-key-removed".into(), Some("B".into()))]
    );
}

#[test]
fn a_previous_inventory_of_another_version_or_with_an_object_twice_is_unusable_input() {
    let current = deployment("web", ENVFROM_APP);
    let opts = LoadOptions::default();
    let inv = inventory(&load_str(&cm("app-config", &["A", "B"]), "inv.yaml", &opts).unwrap());
    let run = |inv: Inventory| {
        check(&CheckInput {
            current: load(&format!("{}\n---\n{}", current, cm("app-config", &["A"]))),
            proposed: load(&cm("app-config", &["A"])),
            inventory: Some(inv),
            ..Default::default()
        })
    };
    // Read with another format's rules, its key lists could mean anything.
    let newer = Inventory {
        version: Inventory::VERSION + 1,
        ..inv.clone()
    };
    let err = run(newer).unwrap_err().to_string();
    assert!(err.contains("format version 2"), "{err}");
    // Which of two key lists held? (Read as the second, B's removal passed.)
    let mut twice = inv.clone();
    let mut fewer = inv.objects[0].clone();
    fewer.keys.remove("B");
    twice.objects.push(fewer);
    let err = run(twice).unwrap_err().to_string();
    assert!(
        err.contains("ConfigMap/default/app-config appears twice"),
        "{err}"
    );
    assert!(run(inv).is_ok());
}

#[test]
fn an_inventory_round_trips_every_field_and_refuses_a_field_it_does_not_have() {
    use ate_configguard::manifest::{ConfigKind, ConfigObject, Hook, HookPhase, ObjectId};
    let object = ConfigObject {
        id: ObjectId {
            kind: ConfigKind::Secret,
            namespace: "prod".into(),
            name: "db".into(),
        },
        binary_keys: std::collections::BTreeSet::new(),
        keys: ["PASSWORD".to_string(), "USER".to_string()].into(),
        immutable: true,
        secret_type: Some("Opaque".into()),
        hook: Some(Hook {
            annotation: "helm.sh/hook=pre-upgrade".into(),
            phase: HookPhase::BeforeChange,
            weight: -5,
            helm: true,
            deleted_after: Some("helm.sh/hook-delete-policy=hook-succeeded".into()),
        }),
        sync_wave: Some(3),
        made_by: Some("SealedSecret/prod/db".into()),
        kept_on_prune: Some("helm.sh/resource-policy=keep".into()),
    };
    let inv = Inventory {
        version: Inventory::VERSION,
        objects: vec![object],
    };
    let text = serde_json::to_string_pretty(&inv).unwrap();
    assert_eq!(Inventory::from_json(&text, "inv.json").unwrap(), inv);

    // A hand-edited inventory with a misspelt field is refused, naming it,
    // at the object and inside its hook: read as before, `secret_typ` was
    // dropped and the Secret's type went unchecked.
    for (from, to, unknown) in [
        ("\"secret_type\"", "\"secret_typ\"", "secret_typ"),
        ("\"immutable\"", "\"immutible\"", "immutible"),
        ("\"deleted_after\"", "\"delete_after\"", "delete_after"),
    ] {
        assert!(text.contains(from), "{text}");
        let err = Inventory::from_json(&text.replacen(from, to, 1), "inv.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("inv.json"), "{err}");
        assert!(err.contains(&format!("unknown field `{unknown}`")), "{err}");
        assert!(!err.contains("PASSWORD"), "{err}");
    }
    // A missing identity field is named too.
    let err = Inventory::from_json(&text.replacen("\"namespace\"", "\"ns\"", 1), "inv.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `ns`"), "{err}");
    let nameless =
        r#"{"version": 1, "objects": [{"kind": "Secret", "namespace": "prod", "keys": []}]}"#;
    let err = Inventory::from_json(nameless, "inv.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing field `name`"), "{err}");
}

#[test]
fn bulk_loaded_object_must_still_exist() {
    let current = format!(
        "{}\n---\n{}",
        cm("app-config", &["A"]),
        deployment("web", ENVFROM_APP)
    );
    let report = run_with(&current, NOTHING, Deletion::Prune, &[]);
    assert_eq!(codes(&report), vec![("missing-object".into(), None)]);
}

#[test]
fn changing_the_keys_of_an_immutable_object_fails() {
    // A key added, a key removed, and one renamed (as many keys as before).
    for (now, then) in [
        (&["DB_HOST"][..], &["DB_HOST", "NEW"][..]),
        (&["DB_HOST", "OLD"][..], &["DB_HOST"][..]),
        (&["DB_HOST", "OLD"][..], &["DB_HOST", "NEW"][..]),
    ] {
        let imm = format!("{}immutable: true\n", cm("cfg", now));
        let current = format!("{imm}\n---\n{}", deployment("web", KEYREF));
        let proposed = format!("{}immutable: true\n", cm("cfg", then));
        let report = run(&current, &proposed);
        assert_eq!(
            codes(&report),
            vec![("immutable-changed".into(), None)],
            "{now:?} -> {then:?}"
        );
    }
}

#[test]
fn ingress_tls_secrets_are_reported_not_checked() {
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  tls:\n    - secretName: web-tls\n";
    let report = run(ingress, NOTHING);
    assert!(report.is_safe());
    assert_eq!(report.warnings[0].code, "outside-pod-spec");
}

#[test]
fn a_tls_secret_named_outside_a_pod_spec_warns_only_when_deleted_or_unknown() {
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  tls:\n    - secretName: web-tls\n";
    let with_secret = format!(
        "{ingress}---\n{}",
        secret("web-tls", &["tls.crt", "tls.key"])
    );
    warns_only_when_deleted(&with_secret, ingress, "Secret/default/web-tls");
}

/// `with_secret` (a referrer and the Secret it names outside a pod spec)
/// kept says nothing; deleting the Secret (`id`), leaving `referrer`, is a
/// warning that says so, not a failure.
fn warns_only_when_deleted(with_secret: &str, referrer: &str, id: &str) {
    let kept = run(with_secret, with_secret);
    assert!(
        kept.is_safe() && kept.warnings.is_empty(),
        "{:?}",
        kept.warnings
    );
    let deleted = run_with(with_secret, referrer, Deletion::Listed, &[id]);
    assert!(deleted.is_safe());
    assert_eq!(deleted.warnings.len(), 1, "{:?}", deleted.warnings);
    assert_eq!(deleted.warnings[0].code, "outside-pod-spec");
    assert!(
        deleted.warnings[0].message.contains("deletes this Secret"),
        "{}",
        deleted.warnings[0].message
    );
}

#[test]
fn traefik_and_contour_secrets_are_reported_not_checked() {
    // They were read as unknown kinds without pod templates: nothing said,
    // even when the change deleted the certificate a route serves.
    let proxies = "apiVersion: traefik.io/v1alpha1\nkind: IngressRoute\nmetadata: { name: web, namespace: edge }\nspec:\n  routes: [ { match: Host(`a.example.com`), kind: Rule, services: [ { name: web, port: 80 } ] } ]\n  tls: { secretName: web-tls }\n---\napiVersion: traefik.containo.us/v1alpha1\nkind: Middleware\nmetadata: { name: auth, namespace: edge }\nspec:\n  basicAuth: { secret: users }\n---\napiVersion: traefik.io/v1alpha1\nkind: TLSStore\nmetadata: { name: default, namespace: edge }\nspec:\n  defaultCertificate: { secretName: fallback-tls }\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: { name: api, namespace: edge }\nspec:\n  virtualhost:\n    fqdn: api.example.com\n    tls:\n      secretName: certs/wildcard\n      clientValidation: { caSecret: client-ca }\n  routes: [ { services: [ { name: api, port: 80 } ] } ]\n";
    let report = run(proxies, NOTHING);
    assert!(report.is_safe());
    let mut named: Vec<(String, String)> = report
        .warnings
        .iter()
        .map(|w| {
            assert_eq!(w.code, "outside-pod-spec");
            (
                w.object.as_ref().expect("the object named").to_string(),
                w.site.clone().unwrap_or_default(),
            )
        })
        .collect();
    named.sort();
    assert_eq!(
        named,
        [
            ("Secret/certs/wildcard", "spec.virtualhost.tls.secretName"),
            (
                "Secret/edge/client-ca",
                "spec.virtualhost.tls.clientValidation.caSecret"
            ),
            (
                "Secret/edge/fallback-tls",
                "spec.defaultCertificate.secretName"
            ),
            ("Secret/edge/users", "spec.basicAuth.secret"),
            ("Secret/edge/web-tls", "spec.tls.secretName"),
        ]
        .map(|(o, s)| (o.to_owned(), s.to_owned()))
    );
    // Deleting one the route serves says so; keeping it says nothing.
    let tls = secret("web-tls", &["tls.crt", "tls.key"])
        .replace("name: web-tls", "name: web-tls\n  namespace: edge");
    let route = proxies.split("---").next().unwrap();
    let with_secret = format!("{route}---\n{tls}");
    warns_only_when_deleted(&with_secret, route, "Secret/edge/web-tls");
}

#[test]
fn gateway_api_certificate_refs_are_reported_not_checked() {
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: { name: gw, namespace: edge }\nspec:\n  gatewayClassName: istio\n  listeners:\n    - name: https\n      port: 443\n      protocol: HTTPS\n      tls:\n        certificateRefs:\n          - name: web-tls\n          - { kind: Secret, name: api-tls, namespace: certs }\n          - { group: example.com, kind: Vault, name: not-a-secret }\n  tls:\n    backend:\n      clientCertificateRef: { name: mesh-client }\n---\napiVersion: gateway.networking.k8s.io/v1alpha3\nkind: BackendTLSPolicy\nmetadata: { name: backend, namespace: edge }\nspec:\n  validation:\n    caCertificateRefs: [ { group: \"\", kind: ConfigMap, name: ca } ]\n    hostname: api.internal\n";
    let report = run(gateway, NOTHING);
    assert!(report.is_safe());
    let named: Vec<(String, String, String)> = report
        .warnings
        .iter()
        .map(|w| {
            assert_eq!(w.code, "outside-pod-spec");
            let o = w.object.as_ref().expect("the object named");
            (
                o.to_string(),
                w.site.clone().unwrap_or_default(),
                w.workload.as_ref().expect("the naming object").to_string(),
            )
        })
        .collect();
    assert_eq!(
        named,
        vec![
            (
                "ConfigMap/edge/ca".into(),
                "spec.validation.caCertificateRefs[0]".into(),
                "BackendTLSPolicy/edge/backend".into()
            ),
            (
                "Secret/edge/web-tls".into(),
                "spec.listeners[0].tls.certificateRefs[0]".into(),
                "Gateway/edge/gw".into()
            ),
            (
                "Secret/certs/api-tls".into(),
                "spec.listeners[0].tls.certificateRefs[1]".into(),
                "Gateway/edge/gw".into()
            ),
            (
                "Secret/edge/mesh-client".into(),
                "spec.tls.backend.clientCertificateRef".into(),
                "Gateway/edge/gw".into()
            ),
        ]
    );
}

#[test]
fn duplicate_objects_in_one_state_are_input_errors() {
    let twice = format!("{}\n---\n{}", cm("a", &["X"]), cm("a", &["Y"]));
    let input = CheckInput {
        current: load(&twice),
        ..Default::default()
    };
    let err = check(&input).unwrap_err().to_string();
    assert!(err.contains("ConfigMap") && err.contains("/a"), "{err}");
}

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

#[test]
fn manifests_without_a_namespace_must_meet_the_other_state_whichever_side_they_are() {
    let in_prod = |yaml: String| yaml.replacen("metadata:\n", "metadata:\n  namespace: prod\n", 1);
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\n";
    let root_ca = "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: kube-root-ca.crt, namespace: default }\ndata: { ca.crt: x }\n";
    let err = |current: &str, proposed: &str| {
        unplaced_namespace(&load(current), &load(proposed), "default")
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    // The current state is the render (an older chart's), the proposed one
    // is read from the cluster.
    let found = err(&cm("cfg", &["A"]), &in_prod(cm("cfg", &["A"])));
    assert!(
        found.contains("current state") && found.contains("--namespace prod"),
        "{found:?}"
    );
    // The other state holds only a ServiceAccount, in prod.
    let found = err(&in_prod(account.to_owned()), &cm("cfg", &["A"]));
    assert!(found.contains("--namespace prod"), "{found:?}");
    // A workload the other state holds only in prod, while that state
    // reaches `default` too (`kubectl get -A`).
    let plain = "      containers:\n        - name: app\n          image: app:2\n";
    let live = docs(&[&in_prod(deployment("web", plain)), root_ca]);
    let found = err(&live, &deployment("web", plain));
    assert!(
        found.contains("Deployment web is there, but the current state holds it only in prod"),
        "{found:?}"
    );
    // A render big enough to be loaded in parallel chunks (over 512
    // documents) counts every manifest without a namespace.
    let many: Vec<String> = (0..600).map(|i| cm(&format!("cfg-{i}"), &["A"])).collect();
    let many = load(&many.join("\n---\n"));
    assert_eq!(many.unplaced, 600);
    let found = unplaced_namespace(&load(&in_prod(cm("cfg-0", &["A"]))), &many, "default")
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(found.contains("--namespace prod"), "{found:?}");
    // Both in one namespace: they meet.
    assert!(
        unplaced_namespace(
            &load(&cm("cfg", &["A"])),
            &load(&cm("cfg", &["B"])),
            "default"
        )
        .is_none()
    );
}

#[test]
fn an_empty_namespace_is_left_out_as_kubectl_and_helm_take_it() {
    // `namespace: ""` (a chart's `{{ .Values.namespace | quote }}` left
    // unset) is placed by kubectl and Helm in the namespace they are given,
    // as a manifest without one is: an input error before, and no longer
    // read as a namespace of its own.
    let empty = |yaml: String| yaml.replacen("metadata:\n", "metadata:\n  namespace: \"\"\n", 1);
    let in_prod = |yaml: String| yaml.replacen("metadata:\n", "metadata:\n  namespace: prod\n", 1);
    let prod = LoadOptions {
        default_namespace: "prod".into(),
        ..LoadOptions::default()
    };
    let proposed = docs(&[
        &empty(cm("app-config", &["A"])),
        &empty(deployment("web", ENVFROM_APP)),
    ]);
    let loaded = load_str(&proposed, "rendered.yaml", &prod).unwrap();
    assert_eq!(loaded.unplaced, 2, "both count as placed by --namespace");
    assert_eq!(
        loaded.objects[0].id.to_string(),
        "ConfigMap/prod/app-config"
    );
    assert_eq!(loaded.workloads[0].id.namespace, "prod");
    // So they meet the live state in prod: the key a bulk load loses fails.
    let current = load(&docs(&[
        &in_prod(cm("app-config", &["A", "B"])),
        &in_prod(deployment("web", ENVFROM_APP)),
    ]));
    assert!(unplaced_namespace(&current, &loaded, "prod").is_none());
    // Manifests that state their namespace are placed, whatever is given.
    assert_eq!(current.unplaced, 0);
    assert!(unplaced_namespace(&current, &current, "default").is_none());
    let report = check(&CheckInput {
        current: current.clone(),
        proposed: loaded,
        inventory: None,
        deletion: Deletion::Listed,
        delete: Vec::new(),
        retired: Vec::new(),
    })
    .unwrap();
    // Both for the pods serving now and for those the rollout starts: one
    // finding that says so.
    let lost = ("bulk-key-removed".to_owned(), Some("B".to_owned()));
    assert_eq!(codes(&report), vec![lost], "{}", report.to_text());
    assert_eq!(report.failures[0].side, Some(Side::Both));
    // Read in the default namespace, they would miss it: unusable input.
    let unplaced = load(&proposed);
    assert_eq!(unplaced.objects[0].id.namespace, "default");
    assert!(unplaced_namespace(&current, &unplaced, "default").is_some());
}

#[test]
fn prune_deletes_only_in_the_namespaces_the_proposed_input_touches() {
    // `kubectl apply --prune` prunes the namespaces of what it applied: a
    // live state read with `-A` holds kube-system, which a deploy of one
    // app's namespace never deletes.
    let in_ns = |yaml: String, ns: &str| {
        yaml.replacen("metadata:\n", &format!("metadata:\n  namespace: {ns}\n"), 1)
    };
    let coredns = "      containers:\n        - name: coredns\n          image: coredns:1\n          volumeMounts: [ { name: cfg, mountPath: /etc/coredns } ]\n      volumes:\n        - name: cfg\n          configMap: { name: coredns }\n";
    let current = [
        in_ns(cm("coredns", &["Corefile"]), "kube-system"),
        in_ns(deployment("coredns", coredns), "kube-system"),
        in_ns(cm("app-config", &["A"]), "prod"),
        in_ns(deployment("web", ENVFROM_APP), "prod"),
    ]
    .join("\n---\n");
    let proposed = in_ns(cm("app-config", &["A"]), "prod");
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    assert!(report.is_safe(), "{}", report.to_text());
    // In a namespace it touches, an absent object is deleted.
    let proposed = in_ns(cm("other", &["B"]), "prod");
    let report = run_with(&current, &proposed, Deletion::Prune, &[]);
    assert_eq!(codes(&report), vec![("missing-object".into(), None)]);
    assert_eq!(
        report.failures[0].object.as_ref().unwrap().to_string(),
        "ConfigMap/prod/app-config"
    );
}

#[test]
fn prune_leaves_what_helm_or_argo_cd_is_told_to_keep_and_hooks() {
    // `helm.sh/resource-policy: keep` and Argo CD's `Prune=false` (or
    // `Prune=confirm`) leave an object the new release or sync no longer
    // holds. Before, `--prune` counted it as deleted: a failure for every
    // workload still reading it, though it stays.
    let annotated = |annotations: &str| {
        cm("app-config", &["REDIS_DB_HOST"]).replacen(
            "metadata:\n",
            &format!("metadata:\n  annotations: {annotations}\n"),
            1,
        )
    };
    let proposed = cm("other", &["B"]);
    for annotations in [
        "{helm.sh/resource-policy: keep}",
        "{helm.sh/resource-policy: \" Keep \"}",
        "{argocd.argoproj.io/sync-options: Prune=false}",
        "{argocd.argoproj.io/sync-options: \"ServerSideApply=true, Prune=confirm\"}",
    ] {
        let current = docs(&[&annotated(annotations), &deployment("pusher", ENVFROM_APP)]);
        let report = run_with(&current, &proposed, Deletion::Prune, &[]);
        assert!(report.is_safe(), "{annotations}: {}", report.to_text());
        // Deleting it by name still deletes it.
        let report = run_with(
            &current,
            &proposed,
            Deletion::Listed,
            &["ConfigMap/default/app-config"],
        );
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), None)],
            "{annotations}"
        );
    }
    // A hook is not pruned either: neither Helm nor Argo CD counts one as
    // a resource of the release or application (gitops-engine skips hooks
    // when it plans prune tasks); only its delete policy removes it.
    for annotations in [
        "{helm.sh/hook: pre-install}",
        "{argocd.argoproj.io/hook: PreSync}",
    ] {
        let current = docs(&[&annotated(annotations), &deployment("pusher", ENVFROM_APP)]);
        let report = run_with(&current, &proposed, Deletion::Prune, &[]);
        assert!(report.is_safe(), "{annotations}: {}", report.to_text());
    }
    // Any other value prunes it, as before.
    for annotations in [
        "{helm.sh/resource-policy: delete}",
        "{argocd.argoproj.io/sync-options: \"Prune=true,Replace=true\"}",
        "{other.example/keep: \"true\"}",
    ] {
        let current = docs(&[&annotated(annotations), &deployment("pusher", ENVFROM_APP)]);
        let report = run_with(&current, &proposed, Deletion::Prune, &[]);
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), None)],
            "{annotations}"
        );
    }
    // A kept workload is not pruned: its findings do not say it is.
    let kept_job = deployment("pusher", ENVFROM_APP).replacen(
        "metadata:\n",
        "metadata:\n  annotations: {helm.sh/resource-policy: keep}\n",
        1,
    );
    let current = docs(&[&cm("app-config", &["REDIS_DB_HOST"]), &kept_job]);
    let report = run_with(&current, &cm("app-config", &[]), Deletion::Prune, &[]);
    assert_eq!(
        codes(&report),
        vec![("bulk-key-removed".into(), Some("REDIS_DB_HOST".into()))]
    );
    assert!(
        !report.failures[0].message.contains("prunes this workload"),
        "{}",
        report.to_text()
    );
}

/// A Job reading `cfg`'s key `key`, with `annotations` (a flow map).
fn hook_job(name: &str, key: &str, optional: bool, annotations: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations: {annotations}\n\
         spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        \
         - name: migrate\n          image: app:2\n          env:\n            - name: {key}\n              \
         valueFrom:\n                configMapKeyRef: {{name: cfg, key: {key}, optional: {optional}}}\n"
    )
}

/// ConfigMap `name` with `keys`, and `annotations` (a flow map).
fn hook_cm(name: &str, keys: &[&str], annotations: &str) -> String {
    cm(name, keys).replace(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n  annotations: {annotations}\n"),
    )
}

#[test]
fn a_hook_that_runs_before_the_change_sees_the_state_before_it() {
    const PRE: &str = "{helm.sh/hook: 'pre-install,pre-upgrade'}";
    let current = cm("cfg", &["DB_HOST"]);
    // The chart adds MIGRATIONS to cfg and a pre-upgrade Job that reads it:
    // the Job runs before cfg is updated, so it cannot start.
    let adds = |job: &str| docs(&[&cm("cfg", &["DB_HOST", "MIGRATIONS"]), job]);
    let report = run(
        &current,
        &adds(&hook_job("migrate", "MIGRATIONS", false, PRE)),
    );
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), Some("MIGRATIONS".into()))]
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains("helm.sh/hook=pre-install,pre-upgrade")
            && message.contains("the key MIGRATIONS comes only with the change"),
        "{message}"
    );
    // A key the state before the change holds is there for it.
    assert!(run(&current, &adds(&hook_job("migrate", "DB_HOST", false, PRE))).is_safe());
    // Optional: reported, not a failure.
    let optional = run(
        &current,
        &adds(&hook_job("migrate", "MIGRATIONS", true, PRE)),
    );
    assert!(optional.is_safe());
    assert_eq!(optional.warnings[0].code, "applied-after-hook");
    // The same Job after the change (post-upgrade) finds the key.
    let post = "{helm.sh/hook: post-upgrade}";
    assert!(
        run(
            &current,
            &adds(&hook_job("migrate", "MIGRATIONS", false, post))
        )
        .is_safe()
    );
    // A key the change does not bring at all is missing, as for any workload.
    let missing = run(&current, &hook_job("migrate", "NOWHERE", false, PRE));
    assert_eq!(
        codes(&missing),
        vec![("missing-key".into(), Some("NOWHERE".into()))]
    );
}

#[test]
fn a_config_hook_counts_for_a_workload_hook_only_if_it_is_created_first() {
    let current = NOTHING;
    let job = |annotations| hook_job("migrate", "MIGRATIONS", false, annotations);
    let with_cm = |cm_name: &str, cm_annotations: &str, job: String| {
        let job = job.replace("name: cfg,", &format!("name: {cm_name},"));
        docs(&[&hook_cm(cm_name, &["MIGRATIONS"], cm_annotations), &job])
    };
    let safe = |proposed: String| run(current, &proposed).is_safe();
    // Helm: lower weight first.
    assert!(safe(with_cm(
        "cfg",
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '-1'}",
        job("{helm.sh/hook: pre-upgrade}")
    )));
    assert!(!safe(with_cm(
        "cfg",
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '5'}",
        job("{helm.sh/hook: pre-upgrade}")
    )));
    // Helm, one weight: by name alone. "migrate" runs before
    // "migrate-config", after "a-config".
    let same = "{helm.sh/hook: pre-upgrade}";
    assert!(!safe(with_cm("migrate-config", same, job(same))));
    assert!(safe(with_cm("a-config", same, job(same))));
    // One name (a chart's `{{ .Release.Name }}-migrate` for both): Helm
    // sorts a phase's hooks by kind first, then stably by weight and name,
    // so the ConfigMap is created first. This failed before.
    assert!(safe(with_cm("migrate", same, job(same))));
    // A ConfigMap that is no hook is applied after every pre-upgrade hook.
    assert!(!safe(with_cm("a-config", "{}", job(same))));
    // Argo CD: by wave, and a wave's ConfigMaps before its workloads.
    let presync = "{argocd.argoproj.io/hook: PreSync}";
    assert!(safe(with_cm("migrate-config", presync, job(presync))));
    assert!(!safe(with_cm(
        "a-config",
        "{argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/sync-wave: '2'}",
        job(presync)
    )));
    // One of the two ordered by Helm (either tool may run them): by name,
    // the stricter order.
    assert!(!safe(with_cm("migrate-config", same, job(presync))));
    assert!(!safe(with_cm("migrate-config", presync, job(same))));
    assert!(safe(with_cm("a-config", same, job(presync))));
}

#[test]
fn a_hook_weight_that_is_not_a_whole_number_is_unusable_input() {
    let job = hook_job(
        "migrate",
        "K",
        false,
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: 'first'}",
    );
    let err = load_err(&job).to_string();
    assert!(
        err.contains("annotation helm.sh/hook-weight \"first\" is not a whole number"),
        "{err}"
    );
}

#[test]
fn a_workload_synced_in_an_earlier_wave_than_its_config_sees_the_config_as_it_was() {
    const NEW_KEY: &str = "      containers:\n        - name: app\n          image: app:2\n          env:\n            - name: NEW\n              valueFrom:\n                configMapKeyRef:\n                  name: cfg\n                  key: NEW\n";
    let wave = |doc: String, name: &str, wave: i64| {
        doc.replace(
            &format!("  name: {name}\n"),
            &format!("  name: {name}\n  annotations: {{argocd.argoproj.io/sync-wave: '{wave}'}}\n"),
        )
    };
    let current = cm("cfg", &["DB_HOST"]);
    let cfg = |w| wave(cm("cfg", &["DB_HOST", "NEW"]), "cfg", w);
    let web = |w, containers| wave(deployment("web", containers), "web", w);
    // The Deployment (wave 0) rolls out before cfg gains NEW (wave 1).
    let report = run(&current, &docs(&[&cfg(1), &web(0, NEW_KEY)]));
    assert_eq!(
        codes(&report),
        vec![("later-sync-wave".into(), Some("NEW".into()))]
    );
    assert!(
        report.failures[0].message.contains(
            "is synced in wave 0, and the key NEW comes only with the ConfigMap's change in wave 1"
        ),
        "{}",
        report.failures[0].message
    );
    // One wave (ConfigMaps first), or the ConfigMap earlier: safe.
    assert!(run(&current, &docs(&[&cfg(1), &web(1, NEW_KEY)])).is_safe());
    assert!(run(&current, &docs(&[&cfg(-1), &web(0, NEW_KEY)])).is_safe());
    assert!(
        run(
            &current,
            &docs(&[&cm("cfg", &["DB_HOST", "NEW"]), &deployment("web", NEW_KEY)])
        )
        .is_safe()
    );
    // A ConfigMap the change creates in a later wave.
    let created = run(NOTHING, &docs(&[&cfg(1), &web(0, NEW_KEY)]));
    assert!(
        created.failures[0]
            .message
            .contains("is synced in wave 0, and the ConfigMap is created only in wave 1"),
        "{}",
        created.failures[0].message
    );
    // A key the ConfigMap holds already is there in any wave.
    assert!(run(&current, &docs(&[&cfg(1), &web(0, KEYREF)])).is_safe());
    // A wave that is not a whole number is unusable input.
    let err = load_err(&cfg(1).replace("'1'", "'later'")).to_string();
    assert!(
        err.contains("argocd.argoproj.io/sync-wave \"later\" is not a whole number"),
        "{err}"
    );
}

#[test]
fn a_config_hook_deleted_once_its_hooks_succeed_is_gone_after_the_change() {
    // A chart makes its config a pre-install hook (so that its migration
    // Job finds it) and lets Helm delete it once the hooks succeed: the
    // Deployment that reads it then never starts. This passed before.
    const DELETED: &str = "{helm.sh/hook: 'pre-install,pre-upgrade', helm.sh/hook-weight: '-1', \
         helm.sh/hook-delete-policy: 'before-hook-creation,hook-succeeded'}";
    let cfg = |annotations| hook_cm("cfg", &["DB_HOST"], annotations);
    let report = run(NOTHING, &docs(&[&cfg(DELETED), &deployment("web", KEYREF)]));
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains(
            "only as a hook deleted once its hooks succeed (helm.sh/hook-delete-policy=\
             before-hook-creation,hook-succeeded): it is not there after the change"
        ),
        "{message}"
    );
    // Kept (Helm's default policy, before-hook-creation): there after.
    let kept = "{helm.sh/hook: 'pre-install,pre-upgrade', helm.sh/hook-weight: '-1'}";
    assert!(run(NOTHING, &docs(&[&cfg(kept), &deployment("web", KEYREF)])).is_safe());
    // While the hooks of its phase run, it is there: a pre-upgrade Job
    // after it reads it; a post-upgrade one runs once it is gone.
    let job = |annotations| hook_job("migrate", "DB_HOST", false, annotations);
    let pre = job("{helm.sh/hook: pre-upgrade}");
    assert!(run(NOTHING, &docs(&[&cfg(DELETED), &pre])).is_safe());
    let post = job("{helm.sh/hook: post-upgrade}");
    assert_eq!(
        codes(&run(NOTHING, &docs(&[&cfg(DELETED), &post]))),
        vec![("missing-object".into(), Some("DB_HOST".into()))]
    );
    // A post-upgrade ConfigMap deleted after the post-upgrade hooks is
    // there for a post-upgrade Job created after it.
    let post_cm = "{helm.sh/hook: post-upgrade, helm.sh/hook-weight: '-1', \
         helm.sh/hook-delete-policy: hook-succeeded}";
    assert!(run(NOTHING, &docs(&[&cfg(post_cm), &post])).is_safe());
    // A serving Deployment reading a ConfigMap the change turns into such a
    // hook loses it (the release no longer applies it).
    let live = docs(&[&cm("cfg", &["DB_HOST"]), &deployment("web", KEYREF)]);
    let report = run(&live, &cfg(DELETED));
    assert_eq!(report.failures.len(), 1, "{}", report.to_text());
    assert_eq!(report.failures[0].code, "missing-object");
    // Argo CD reads its own policy, and Helm's.
    let argo =
        "{argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}";
    let report = run(NOTHING, &docs(&[&cfg(argo), &deployment("web", KEYREF)]));
    assert!(
        report.failures[0]
            .message
            .contains("(argocd.argoproj.io/hook-delete-policy=HookSucceeded)"),
        "{}",
        report.to_text()
    );
    // A live hook the change does not name stays as it is.
    let live_hook = docs(&[&cfg(DELETED), &deployment("web", KEYREF)]);
    assert!(run(&live_hook, NOTHING).is_safe());
}

#[test]
fn a_config_hook_that_no_install_upgrade_or_sync_creates_is_not_there() {
    let web = deployment("web", KEYREF);
    // Each with the annotation the message names.
    for (annotations, named) in [
        ("{helm.sh/hook: test}", "helm.sh/hook=test"),
        (
            "{helm.sh/hook: 'pre-delete,pre-rollback'}",
            "helm.sh/hook=pre-delete,pre-rollback",
        ),
        // A type Helm does not know: Helm skips the resource.
        (
            "{helm.sh/hook: 'pre-install,crd-install'}",
            "helm.sh/hook=pre-install,crd-install",
        ),
        (
            "{argocd.argoproj.io/hook: Skip}",
            "argocd.argoproj.io/hook=Skip",
        ),
        (
            "{argocd.argoproj.io/hook: PostDelete}",
            "argocd.argoproj.io/hook=PostDelete",
        ),
        (
            "{argocd.argoproj.io/hook: SyncFail}",
            "argocd.argoproj.io/hook=SyncFail",
        ),
        // Argo CD goes by Helm's types where its own names none it knows;
        // neither runs here, so Argo CD's is named.
        (
            "{argocd.argoproj.io/hook: Later, helm.sh/hook: test}",
            "argocd.argoproj.io/hook=Later",
        ),
    ] {
        let cfg = hook_cm("cfg", &["DB_HOST"], annotations);
        let report = run(NOTHING, &docs(&[&cfg, &web]));
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), Some("DB_HOST".into()))],
            "{annotations}"
        );
        assert!(
            report.failures[0].message.contains(&format!(
                "only as a hook that no install, upgrade or sync creates ({named})"
            )),
            "{}",
            report.to_text()
        );
    }
    // Helm reads its types in any case; Argo CD maps them to its phases.
    for annotations in [
        "{helm.sh/hook: Pre-Install}",
        "{argocd.argoproj.io/hook: Later, helm.sh/hook: pre-install}",
        "{argocd.argoproj.io/hook: Sync}",
    ] {
        let cfg = hook_cm("cfg", &["DB_HOST"], annotations);
        let report = run(NOTHING, &docs(&[&cfg, &web]));
        assert!(report.is_safe(), "{annotations}: {}", report.to_text());
    }
    // A test Pod reads a test hook created before it.
    let test_cm = hook_cm(
        "cfg",
        &["DB_HOST"],
        "{helm.sh/hook: test, helm.sh/hook-weight: '-1'}",
    );
    let test_job = hook_job("smoke", "DB_HOST", false, "{helm.sh/hook: test}");
    assert!(run(NOTHING, &docs(&[&test_cm, &test_job])).is_safe());
}

#[test]
fn a_workload_reading_what_only_a_post_upgrade_hook_brings_cannot_start() {
    // Argo CD (and `helm --wait`) waits for the Deployment to be ready
    // before it runs post hooks; its new pods wait for NEW. This passed.
    const NEW_KEY: &str = "      containers:\n        - name: app\n          image: app:2\n          env:\n            - name: NEW\n              valueFrom:\n                configMapKeyRef: {name: cfg, key: NEW}\n";
    let current = cm("cfg", &["DB_HOST"]);
    for (annotations, named) in [
        ("{helm.sh/hook: post-upgrade}", "helm.sh/hook=post-upgrade"),
        (
            "{argocd.argoproj.io/hook: PostSync}",
            "argocd.argoproj.io/hook=PostSync",
        ),
        // Argo CD's annotation names no type it knows: it goes by Helm's,
        // which is named.
        (
            "{argocd.argoproj.io/hook: Later, helm.sh/hook: post-upgrade}",
            "helm.sh/hook=post-upgrade",
        ),
    ] {
        let cfg = hook_cm("cfg", &["DB_HOST", "NEW"], annotations);
        let report = run(&current, &docs(&[&cfg, &deployment("web", NEW_KEY)]));
        assert_eq!(
            codes(&report),
            vec![("created-by-post-hook".into(), Some("NEW".into()))]
        );
        let message = &report.failures[0].message;
        assert!(
            message.contains(&format!(
                "the key NEW comes only with a hook that runs after the change is applied ({named})"
            )),
            "{message}"
        );
        // What the ConfigMap holds already is there for it.
        assert!(run(&current, &docs(&[&cfg, &deployment("web", KEYREF)])).is_safe());
        // A post-upgrade Job created after it reads it.
        let job = hook_job("migrate", "NEW", false, annotations);
        assert!(run(&current, &docs(&[&cfg, &job])).is_safe());
    }
    // A ConfigMap the change creates only as a post hook.
    let cfg = hook_cm("cfg", &["DB_HOST"], "{helm.sh/hook: post-install}");
    let report = run(NOTHING, &docs(&[&cfg, &deployment("web", KEYREF)]));
    assert!(
        report.failures[0]
            .message
            .starts_with("the ConfigMap comes only with a hook"),
        "{}",
        report.to_text()
    );
    // A post-upgrade Job before the ConfigMap of its phase.
    let late = hook_cm(
        "cfg",
        &["DB_HOST", "NEW"],
        "{helm.sh/hook: post-upgrade, helm.sh/hook-weight: '3'}",
    );
    let job = hook_job("migrate", "NEW", false, "{helm.sh/hook: post-upgrade}");
    let report = run(&current, &docs(&[&late, &job]));
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), Some("NEW".into()))]
    );
    assert!(
        report.failures[0]
            .message
            .contains("comes only with a hook of its phase created after it"),
        "{}",
        report.to_text()
    );
}

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
fn helm_dry_run_output_is_unusable_input_saying_what_to_give_instead() {
    // `helm upgrade --dry-run` wraps the manifests in a release summary:
    // not YAML at all after `helm upgrade`, a document without a kind
    // after `helm install`. Both were exit 2 without a word on why.
    let manifests = docs(&[&cm("cfg", &["DB_HOST"]), &deployment("web", KEYREF)]);
    let install = format!(
        "NAME: app\nLAST DEPLOYED: Mon Nov 30 09:10:00 2026\nNAMESPACE: default\n\
         STATUS: pending-install\nREVISION: 1\nTEST SUITE: None\nHOOKS:\nMANIFEST:\n---\n\
         {manifests}\nNOTES:\n1. Get the application URL by running these commands:\n"
    );
    let upgrade = format!("Release \"app\" has been upgraded. Happy Helming!\n{install}");
    for text in [install, upgrade] {
        let err = load_err(&text).to_string();
        assert!(
            err.contains("`helm install` or `helm upgrade` prints with `--dry-run`")
                && err.contains("`helm template`"),
            "{err}"
        );
    }
    // Manifests alone load.
    assert!(run(NOTHING, &manifests).is_safe());
    // Unusable input with only one of the two marks gets no such hint:
    // `helm status` (a release summary, no manifests) and a document with
    // a `MANIFEST:` key.
    let status = "NAME: app\nLAST DEPLOYED: Mon Nov 30 09:10:00 2026\nNAMESPACE: default\n\
                  STATUS: deployed\nREVISION: 3\nTEST SUITE: None\n";
    let keyed = "MANIFEST:\n  name: app\n";
    for text in [status, keyed] {
        let err = load_err(text).to_string();
        assert!(!err.contains("--dry-run"), "{text}: {err}");
    }
}

#[test]
fn an_unrendered_helm_template_is_unusable_input_saying_to_render_it() {
    // `--proposed chart/templates/` instead of what `helm template`
    // renders: an action where YAML wants a key or a value is a parse
    // error, one inside quotes an invalid name; both were exit 2 without
    // a word on why.
    let templates = [
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\ndata:\n  A: \"1\"\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  A: \"1\"\n  {{- if .Values.debug }}\n  DEBUG: \"1\"\n  {{- end }}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels:\n    {{- include \"app.labels\" . | nindent 4 }}\ndata: {A: x}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"{{ .Release.Name }}-cfg\"\ndata: {A: x}\n",
    ];
    for text in templates {
        let err = load_err(text).to_string();
        assert!(
            err.contains("if this is a Helm chart's template") && err.contains("`helm template`"),
            "{err}"
        );
    }
    // A rendered ConfigMap may hold Go templates in its values (an
    // alerting template): it loads, and an error about something else in
    // it gets no hint.
    let alerts = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: alerts\ndata:\n  msg.tmpl: '{{ .Labels.instance }} is down'\n";
    assert!(run(NOTHING, alerts).is_safe());
    let bad_name = docs(&[
        alerts,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\ndata: {A: x}\n",
    ]);
    let err = load_err(&bad_name).to_string();
    assert!(err.contains("Bad_Name"), "{err}");
    assert!(!err.contains("Helm chart's template"), "{err}");
    // A parse error in text without an action gets no hint either.
    let err = load_err("kind: [\n").to_string();
    assert!(!err.contains("Helm chart's template"), "{err}");
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
    // So does an input that does not say what the type was (a render
    // without one).
    let untold = docs(&[&secret("tls", &["cert"])]);
    assert!(run(&untold, &proposed).is_safe());
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
fn inputs_reports_and_errors_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CheckInput>();
    check::<ate_configguard::Manifests>();
    check::<Inventory>();
    check::<ate_configguard::Report>();
    check::<ate_configguard::InputError>();
}

#[test]
fn hooks_read_what_is_there_when_their_phase_runs() {
    let codes_of = |current: &str, proposed: &str| codes(&run(current, proposed));
    let wave_1 = "{argocd.argoproj.io/sync-wave: '1'}";

    // An Argo CD Sync hook runs in its wave, as the other resources do:
    // in wave 0 it cannot read what the ConfigMap brings in wave 1.
    let current = cm("cfg", &["DB_HOST"]);
    let cfg = hook_cm("cfg", &["DB_HOST", "NEW"], wave_1);
    let sync_hook = hook_job("migrate", "NEW", false, "{argocd.argoproj.io/hook: Sync}");
    assert_eq!(
        codes_of(&current, &docs(&[&cfg, &sync_hook])),
        vec![("later-sync-wave".into(), Some("NEW".into()))]
    );
    // In wave 2 it does.
    let in_wave_2 = hook_job(
        "migrate",
        "NEW",
        false,
        "{argocd.argoproj.io/hook: Sync, argocd.argoproj.io/sync-wave: '2'}",
    );
    let report = run(&current, &docs(&[&cfg, &in_wave_2]));
    assert!(report.is_safe(), "{}", report.to_text());

    // A Job that finished starts no pod: it waits for no wave.
    let job = hook_job("migrate", "NEW", false, "{}");
    assert_eq!(
        codes_of(&current, &docs(&[&cfg, &job])),
        vec![("later-sync-wave".into(), Some("NEW".into()))]
    );
    let finished =
        format!("{job}status:\n  conditions:\n    - {{type: Complete, status: 'True'}}\n");
    let report = run(&current, &docs(&[&cfg, &finished]));
    assert!(report.is_safe(), "{}", report.to_text());

    // A post-upgrade hook runs after the change: a key the change removes
    // is gone for it, and so is one a bulk load of its loses.
    let current = cm("cfg", &["OLD", "DB_HOST"]);
    let post = "{helm.sh/hook: post-upgrade}";
    let proposed = docs(&[
        &cm("cfg", &["DB_HOST"]),
        &hook_job("cleanup", "OLD", false, post),
    ]);
    assert_eq!(
        codes_of(&current, &proposed),
        vec![("missing-key".into(), Some("OLD".into()))]
    );
    let bulk = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: cleanup\n  annotations: {post}\n\
         spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        \
         - name: cleanup\n          image: app:2\n          envFrom: [{{configMapRef: {{name: cfg}}}}]\n"
    );
    assert_eq!(
        codes_of(&current, &docs(&[&cm("cfg", &["DB_HOST"]), &bulk])),
        vec![("bulk-key-removed".into(), Some("OLD".into()))]
    );
    // ... while a pre-upgrade one still sees the ConfigMap as it was.
    let pre_bulk = bulk.replace("post-upgrade", "pre-upgrade");
    let report = run(&current, &docs(&[&cm("cfg", &["DB_HOST"]), &pre_bulk]));
    assert!(report.is_safe(), "{}", report.to_text());

    // A pre-upgrade hook reading a ConfigMap that only a later hook of its
    // phase creates (and deletes once the hooks succeed): too late.
    let later = hook_cm(
        "cfg",
        &["K"],
        "{helm.sh/hook: pre-upgrade, helm.sh/hook-weight: '5', \
         helm.sh/hook-delete-policy: hook-succeeded}",
    );
    let report = run(
        NOTHING,
        &docs(&[
            &later,
            &hook_job("migrate", "K", false, "{helm.sh/hook: pre-upgrade}"),
        ]),
    );
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), Some("K".into()))]
    );
    let message = &report.failures[0].message;
    assert!(
        message.contains("and the ConfigMap comes only with the change"),
        "{message}"
    );
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

/// ServiceAccount `app` with `annotations` (a flow map's inside), whose
/// one pull secret is `secret`.
fn account(secret: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n  annotations: {{{annotations}}}\nimagePullSecrets: [ {{name: {secret}}} ]\n"
    )
}

/// A pull secret the kubelet reads, with `annotations`.
fn pull_secret(name: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\ntype: kubernetes.io/dockerconfigjson\ndata: {{.dockerconfigjson: e30=}}\n"
    )
}

/// Job `migrate`, a Helm `hook`, running as account `app`.
fn app_job(hook: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations: {{helm.sh/hook: {hook}}}\nspec:\n  template:\n    spec:\n      serviceAccountName: app\n      restartPolicy: Never\n      containers:\n        - name: migrate\n          image: registry.example/app:2\n"
    )
}

#[test]
fn a_hook_that_runs_before_the_change_runs_as_its_account_as_it_is_now() {
    // A pre-upgrade Job runs before the change updates its ServiceAccount:
    // its pod gets the pull secrets the account has now. Rotating the
    // account's pull secret (oldcred kept, newcred added with the change)
    // is then safe for it; judged by the updated account, it failed, as
    // newcred is not there yet.
    let current = docs(&[&account("oldcred", ""), &pull_secret("oldcred", "")]);
    let rotated = |hook: &str| {
        docs(&[
            &account("newcred", ""),
            &pull_secret("newcred", ""),
            &app_job(hook),
        ])
    };
    let report = run(&current, &rotated("pre-upgrade"));
    assert!(report.is_safe(), "{}", report.to_text());
    assert_eq!(report.references_checked, 1);
    // After the change, it runs as the updated account, and finds newcred.
    assert!(run(&current, &rotated("post-upgrade")).is_safe());
    // Deleting, with the change, the Secret the account has now leaves the
    // pre-upgrade Job as it was: it runs before the deletion.
    let report = run_with(
        &current,
        &rotated("pre-upgrade"),
        Deletion::Listed,
        &["Secret/default/oldcred"],
    );
    assert!(report.is_safe(), "{}", report.to_text());
    // An account the state now lacks (one the chart makes as an earlier
    // hook, say) is the one the change brings: its pull secret is judged
    // as the Job's own.
    let report = run(NOTHING, &rotated("pre-install"));
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), None)],
        "{}",
        report.to_text()
    );
    // And a Secret the account has now that is gone fails as for any pod.
    let report = run(&account("oldcred", ""), &app_job("pre-upgrade"));
    assert_eq!(
        codes(&report),
        vec![("missing-object".into(), None)],
        "{}",
        report.to_text()
    );
}

#[test]
fn a_pod_runs_as_its_account_as_the_change_has_made_it_by_then() {
    // A ServiceAccount may itself be a hook, or in an Argo CD sync wave:
    // a pod gets the pull secrets of the account as it is when the pod is
    // admitted, so the updated account's only if the change has applied it
    // by then; else the account as it is now.
    let job = &app_job("pre-upgrade");
    let web = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      serviceAccountName: app\n      containers:\n        - name: web\n          image: registry.example/app:2\n";
    let current = docs(&[&account("oldcred", ""), &pull_secret("oldcred", "")]);

    // The account is a pre-upgrade hook created before the Job (a lower
    // weight): the Job's pod runs as the updated account, and its new pull
    // secret comes only with the change. Before, the Job was judged by the
    // account as it is now, and passed.
    let hook_account = "helm.sh/hook: pre-upgrade, helm.sh/hook-weight: \"-5\"";
    let report = run(
        &current,
        &docs(&[
            &account("newcred", hook_account),
            &pull_secret("newcred", ""),
            job,
        ]),
    );
    assert_eq!(
        codes(&report),
        vec![("applied-after-hook".into(), None)],
        "{}",
        report.to_text()
    );
    // Made a hook created before the Job too, the new pull secret is there.
    let report = run(
        &current,
        &docs(&[
            &account("newcred", hook_account),
            &pull_secret("newcred", hook_account),
            job,
        ]),
    );
    assert!(report.is_safe(), "{}", report.to_text());
    // An account hook created after the Job (a higher weight) is as it is
    // now when the Job runs.
    let later = "helm.sh/hook: pre-upgrade, helm.sh/hook-weight: \"5\"";
    let report = run(
        &current,
        &docs(&[&account("newcred", later), &pull_secret("newcred", ""), job]),
    );
    assert!(report.is_safe(), "{}", report.to_text());

    // A Deployment of wave 0, its account updated in wave 1 with the new
    // pull secret: its new pods run as the account as it is now, whose
    // pull secret is still there. Before, they were judged by the updated
    // account, and failed (the new Secret comes in a later wave).
    let wave_1 = "argocd.argoproj.io/sync-wave: \"1\"";
    let report = run(
        &current,
        &docs(&[
            &account("newcred", wave_1),
            &pull_secret("newcred", wave_1),
            web,
        ]),
    );
    assert!(report.is_safe(), "{}", report.to_text());
    // In the Deployment's wave, the account is applied first: its new pods
    // run as the updated one, whose pull secret comes only in wave 1.
    let report = run(
        &current,
        &docs(&[
            &account("newcred", ""),
            &pull_secret("newcred", wave_1),
            web,
        ]),
    );
    assert_eq!(
        codes(&report),
        vec![("later-sync-wave".into(), None)],
        "{}",
        report.to_text()
    );

    // The account updated by a post-upgrade hook, the Secret it names now
    // deleted with the change: the Deployment's new pods start before that
    // hook runs, as the account as it is now, and its pull secret is gone.
    // Before, they were judged by the updated account, and passed. So with
    // a hook the change never runs (a `test` hook).
    for hook in ["helm.sh/hook: post-upgrade", "helm.sh/hook: test"] {
        let report = run_with(
            &current,
            &docs(&[&account("newcred", hook), &pull_secret("newcred", ""), web]),
            Deletion::Listed,
            &["Secret/default/oldcred"],
        );
        assert_eq!(
            codes(&report),
            vec![("missing-object".into(), None)],
            "{hook}: {}",
            report.to_text()
        );
    }
}
