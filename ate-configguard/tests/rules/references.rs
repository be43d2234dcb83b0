//! Keys and objects a workload reads: removed, moved, deleted, kept in an inventory, immutable.

use super::*;

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
        value_digests: Default::default(),
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
fn dropping_immutable_from_an_immutable_object_fails() {
    // The API server refuses to unset `immutable`: the apply fails for the
    // object. It needs no value to see (before: safe).
    let imm = format!(
        "{}immutable: true
",
        cm("cfg", &["DB_HOST"])
    );
    let current = format!(
        "{imm}
---
{}",
        deployment("web", KEYREF)
    );
    for proposed in [
        cm("cfg", &["DB_HOST"]),
        format!(
            "{}immutable: false
",
            cm("cfg", &["DB_HOST"])
        ),
    ] {
        let report = run(&current, &proposed);
        assert_eq!(
            codes(&report),
            vec![("immutable-changed".into(), None)],
            "{proposed}"
        );
        assert!(
            report.failures[0].message.contains("drops immutable: true"),
            "{}",
            report.to_text()
        );
    }
    // Keeping it, or setting it on a mutable object, is fine.
    assert!(run(&current, &imm).is_safe());
    let mutable = format!(
        "{}
---
{}",
        cm("cfg", &["DB_HOST"]),
        deployment("web", KEYREF)
    );
    assert!(run(&mutable, &imm).is_safe());
}

#[test]
fn changing_a_value_of_an_immutable_object_fails_and_the_value_is_never_shown() {
    let cfg = |value: &str, immutable: bool| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg}}\ndata: {{DB_HOST: \"{value}\"}}\n{}",
            if immutable { "immutable: true\n" } else { "" }
        )
    };
    let web = deployment("web", KEYREF);
    let (old, new) = ("CANARY-old-9d1e", "CANARY-new-9d1e");
    let current = format!("{}---\n{web}", cfg(old, true));
    // The same value: safe. Another: refused by the API server.
    let report = run(&current, &cfg(old, true));
    assert!(report.is_safe(), "{}", report.to_text());
    let report = run(&current, &cfg(new, true));
    assert_eq!(
        codes(&report),
        vec![("immutable-changed".into(), Some("DB_HOST".into()))],
        "{}",
        report.to_text()
    );
    let shown = format!(
        "{}{}",
        report.to_text(),
        serde_json::to_string(&report).unwrap()
    );
    assert!(!shown.contains("CANARY"), "{shown}");
    // A mutable object's value may change; its digests are not even kept.
    let current = format!("{}---\n{web}", cfg(old, false));
    assert!(run(&current, &cfg(new, false)).is_safe());
    let m = load(&cfg(old, false));
    assert!(m.objects[0].value_digests.is_empty());
    // An immutable one's are, and are never serialized.
    let m = load(&cfg(old, true));
    assert_eq!(m.objects[0].value_digests.len(), 1);
    let json = serde_json::to_string(&m.objects[0]).unwrap();
    assert!(!json.contains("digest"), "{json}");
}
