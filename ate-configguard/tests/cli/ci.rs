//! Real manifests, warnings counted on one line, and findings placed for CI systems (GitHub, SARIF).

use super::*;

#[test]
fn real_kube_prometheus_passes_itself_and_fails_when_alertmanagers_config_goes() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/realworld/kube-prometheus"
    );
    let same = check(dir, dir);
    assert_eq!(same.status.code(), Some(0), "{}", all_output(&same));
    assert!(
        all_output(&same).contains("SAFE: 0 failure(s), 0 warning(s)"),
        "{}",
        all_output(&same)
    );
    // The proposed state: the same files without the Secret, deleted.
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .is_some_and(|n| n != "alertmanager-secret.yaml")
        {
            std::fs::copy(&path, tmp.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let proposed = tmp.path().display().to_string();
    let gone = check_with(
        dir,
        &proposed,
        &["--delete", "Secret/monitoring/alertmanager-main"],
    );
    assert_eq!(gone.status.code(), Some(1), "{}", all_output(&gone));
    let out = all_output(&gone);
    assert!(
        out.contains("Alertmanager.monitoring.coreos.com/monitoring/main")
            && out.contains("alertmanager.yaml"),
        "{out}"
    );
}

#[test]
fn optional_reference_warnings_are_counted_on_one_line_unless_listed() {
    let dir = tempfile::tempdir().unwrap();
    let web = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    \
        spec:\n      containers:\n        - name: web\n          image: img\n          env:\n            \
        - name: A\n              valueFrom: {configMapKeyRef: {name: extra, key: a, optional: true}}\n            \
        - name: B\n              valueFrom: {configMapKeyRef: {name: extra, key: b, optional: true}}\n";
    let path = write(dir.path(), "web.yaml", web);
    let summed = check(&path, &path);
    let out = all_output(&summed);
    assert_eq!(summed.status.code(), Some(0), "{out}");
    assert!(
        out.contains("WARN 2 optional reference(s) would not resolve (missing-object: 2)"),
        "{out}"
    );
    assert!(!out.contains("WARN [missing-object]"), "{out}");
    let listed = check_with(&path, &path, &["--list-warnings"]);
    let out = all_output(&listed);
    assert_eq!(out.matches("WARN [missing-object]").count(), 2, "{out}");
    assert!(out.contains("(current and proposed)"), "{out}");
    assert!(out.contains("SAFE: 0 failure(s), 2 warning(s)"), "{out}");
}

/// A Secret, then (from line 6) a Deployment that reads it.
const PLACED: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\ndata: {password: eA==}\n\
---\n# the API\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  template:\n    \
spec:\n      containers:\n        - name: api\n          image: api:1\n          env:\n            \
- name: P\n              valueFrom: {secretKeyRef: {name: db, key: password}}\n";

#[test]
fn findings_are_placed_at_their_file_and_line_for_ci_systems() {
    let dir = tempfile::tempdir().unwrap();
    let current = write(dir.path(), "live.yaml", PLACED);
    let proposed = write(
        dir.path(),
        "rendered.yaml",
        &PLACED.replace("password: eA==", "other: eA=="),
    );
    // JSON: the finding says where its workload was read.
    let out = check_with(&current, &proposed, &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sources: Vec<&serde_json::Value> = report["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["source"])
        .collect();
    assert!(
        sources
            .iter()
            .any(|s| s["file"] == proposed.as_str() && s["document"] == 2 && s["line"] == 7),
        "{sources:?}"
    );
    // GitHub annotations: one per finding, file and line as properties.
    let out = check_with(&current, &proposed, &["--format", "github"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("(current and proposed)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.starts_with(&format!(
            "::error file={proposed},line=7,title=missing-key::FAIL [missing-key]"
        )),
        "{line}"
    );
    assert!(!text.contains("eA=="), "no value: {text}");
    // SARIF 2.1.0: one rule per code, each result at its file and line.
    let out = check_with(&current, &proposed, &["--format", "sarif"]);
    assert_eq!(out.status.code(), Some(1));
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "ate-configguard");
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["missing-key"]);
    let results = run["results"].as_array().unwrap();
    // One finding for the reference, in both states: placed in the
    // proposed file.
    assert_eq!(results.len(), 1);
    let placed = results
        .iter()
        .find(|r| {
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == proposed.as_str()
        })
        .unwrap();
    assert_eq!(placed["level"], "error");
    assert_eq!(placed["ruleId"], "missing-key");
    assert_eq!(
        placed["locations"][0]["physicalLocation"]["region"]["startLine"],
        7
    );
    // Unusable input is an annotation too, exit 2.
    let broken = write(dir.path(), "b.yaml", "kind: [\n");
    let out = check_with(&broken, &broken, &["--format", "github"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("::error title=unusable-input::"));
}

#[test]
fn sarif_on_unusable_input_is_a_log_with_the_error_as_a_tool_notification() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "kind: ConfigMap\nmetadata:\n  name: \"x\n",
    );
    let out = check_with(&bad, &bad, &["--format", "sarif"]);
    assert_eq!(out.status.code(), Some(2), "{}", all_output(&out));
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    assert_eq!(run["results"], serde_json::json!([]));
    let invocation = &run["invocations"][0];
    assert_eq!(invocation["executionSuccessful"], false);
    let note = &invocation["toolExecutionNotifications"][0];
    assert_eq!(note["level"], "error");
    assert!(
        note["message"]["text"]
            .as_str()
            .unwrap()
            .contains("unclosed quote"),
        "{log:#}"
    );
}
