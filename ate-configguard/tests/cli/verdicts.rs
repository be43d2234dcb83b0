//! Exit codes, the JSON report, and inventories round-tripped.

use super::*;

#[test]
fn exit_codes_are_0_safe_1_unsafe_2_unusable() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let same = check(&cur, &cur);
    assert_eq!(same.status.code(), Some(0), "{}", all_output(&same));
    let removed = write(
        dir.path(),
        "p.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x }\n",
    );
    let unsafe_run = check(&cur, &removed);
    assert_eq!(unsafe_run.status.code(), Some(1));
    let text = all_output(&unsafe_run);
    assert!(
        text.contains("Deployment/default/web")
            && text.contains("REDIS")
            && text.contains("bulk-key-removed"),
        "{text}"
    );
    let broken = write(dir.path(), "b.yaml", "kind: [\n");
    let bad = check(&cur, &broken);
    assert_eq!(bad.status.code(), Some(2));
    let missing = bin()
        .args([
            "check",
            "--current",
            &cur,
            "--proposed",
            "/nonexistent/x.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    // The operating system's own words, not only the error's kind.
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        said.contains("/nonexistent/x.yaml") && said.contains("No such file or directory"),
        "{said}"
    );
    let usage = bin().args(["check"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn an_inventory_that_is_not_one_or_of_another_version_is_unusable_input() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let good = bin().args(["inventory", &cur]).output().unwrap();
    assert_eq!(good.status.code(), Some(0), "{}", all_output(&good));
    let good = String::from_utf8(good.stdout).unwrap();
    for (name, text, says) in [
        ("good.json", good.clone(), None),
        (
            "v2.json",
            good.replacen("\"version\": 1", "\"version\": 2", 1),
            Some("v2.json: inventory format version 2 is not one this build reads (version 1)"),
        ),
        (
            "noversion.json",
            r#"{"objects": []}"#.into(),
            Some("not an inventory (see `ate-configguard inventory`): missing field `version`"),
        ),
        (
            "typo.json",
            good.replacen("\"keys\"", "\"secret_typ\": \"Opaque\", \"keys\"", 1),
            Some("not an inventory (see `ate-configguard inventory`): unknown field `secret_typ`"),
        ),
        (
            "manifest.json",
            r#"{"apiVersion": "v1", "kind": "Secret", "data": {"k": "aHVudGVyMg=="}}"#.into(),
            Some("not an inventory (see `ate-configguard inventory`): unknown field `apiVersion`"),
        ),
    ] {
        let path = write(dir.path(), name, &text);
        let out = check_with(&cur, &cur, &["--inventory", &path]);
        let all = all_output(&out);
        match says {
            None => assert_eq!(out.status.code(), Some(0), "{name}: {all}"),
            Some(says) => {
                assert_eq!(out.status.code(), Some(2), "{name}: {all}");
                assert!(all.contains(says), "{name}: {all}");
            }
        }
        assert!(
            !all.contains("aHVudGVyMg") && !all.contains("hunter2"),
            "{all}"
        );
    }
}

#[test]
fn json_report_is_one_document_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let removed = write(
        dir.path(),
        "p.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x }\n",
    );
    let out = check_with(&cur, &removed, &["--format", "json"]);
    let report: ate_configguard::Report = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.result, "unsafe");
    assert_eq!(report.failures[0].key.as_deref(), Some("REDIS"));

    // Unusable input is a JSON document on stdout too (and the message on
    // stderr), exit 2: a pipeline parsing the report gets one either way.
    let broken = write(dir.path(), "b.yaml", "kind: [\n");
    for args in [
        vec!["check", "--current", &cur, "--proposed", &broken],
        vec!["drift", "--defaults", &broken, "--base", &broken],
    ] {
        let out = bin()
            .args(&args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["result"], "unusable_input", "{doc}");
        assert_eq!(doc["exit_code"], 2, "{doc}");
        let error = doc["error"].as_str().unwrap();
        assert!(error.contains("b.yaml"), "{doc}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(error));
    }
}

#[test]
fn inventory_reads_an_allowed_unknown_kind_as_check_does() {
    let dir = tempfile::tempdir().unwrap();
    let rendered = write(
        dir.path(),
        "rendered.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x }\n---\napiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: { name: web }\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: app\n          envFrom: [ { configMapRef: { name: cfg } } ]\n",
    );
    // Without the flag the error names the flag to pass ...
    let refused = bin().args(["inventory", &rendered]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", all_output(&refused));
    assert!(all_output(&refused).contains("pass --allow-kind Rollout"));
    // ... and inventory takes it, as check does.
    let inv = bin()
        .args(["inventory", &rendered, "--allow-kind", "Rollout"])
        .output()
        .unwrap();
    assert_eq!(inv.status.code(), Some(0), "{}", all_output(&inv));
    let inv: ate_configguard::manifest::Inventory = serde_json::from_slice(&inv.stdout).unwrap();
    let json = serde_json::to_string(&inv).unwrap();
    assert!(json.contains("DB_HOST"), "{json}");
}

#[test]
fn directories_and_inventory_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let cur_dir = dir.path().join("cur");
    std::fs::create_dir(&cur_dir).unwrap();
    current(&cur_dir);
    let inv = bin()
        .args(["inventory", cur_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(inv.status.code(), Some(0));
    let inv_path = write(
        dir.path(),
        "inv.json",
        &String::from_utf8(inv.stdout).unwrap(),
    );
    let proposed = write(
        dir.path(),
        "p.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x, REDIS: r }\n",
    );
    let check = |inventory: &str, extra: &[&str]| {
        let mut args = vec![
            "check",
            "--current",
            cur_dir.to_str().unwrap(),
            "--proposed",
            &proposed,
            "--inventory",
            inventory,
        ];
        args.extend_from_slice(extra);
        bin().args(&args).output().unwrap()
    };
    let out = check(&inv_path, &["--prune"]);
    // Prune deletes the Secret creds, which web bulk-loads.
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(all_output(&out).contains("Secret/default/creds"));
    // A file that is no inventory (the manifests given by mistake) is
    // unusable input that names the file and says what was expected.
    let out = check(&proposed, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", all_output(&out));
    assert!(
        all_output(&out).contains(&proposed)
            && all_output(&out).contains("not an inventory (see `ate-configguard inventory`)"),
        "{}",
        all_output(&out)
    );
    // So is one with a field this version does not know (a newer tool's,
    // or a typo): not read as if the field were not there.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&inv_path).unwrap()).unwrap();
    doc["objets"] = serde_json::json!([]);
    let odd = dir.path().join("odd-inventory.json");
    std::fs::write(&odd, doc.to_string()).unwrap();
    let out = check(odd.to_str().unwrap(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("not an inventory"),
        "{}",
        all_output(&out)
    );
}
