//! The canary: no value ever appears in any output.

use super::*;

#[test]
fn values_never_appear_in_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let removed = write(
        dir.path(),
        "p.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: creds }}\ndata: {{ PASSWORD: {CANARY} }}\n"
        ),
    );
    let malformed = [
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: s }}\nstringData:\n  A: \"{CANARY}\n"
        ),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: s }}\nstringData:\n  A: {CANARY}\n  A: {CANARY}\n"
        ),
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{ name: s }}\nstringData: {CANARY}\n"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: {{ {CANARY}: 1 }} }}\nstringData: {{ A: {CANARY} }}\n"
        ),
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{{\"name\":\"s\"}},\"data\":{{\"A\":\"{CANARY}\",}}}}"
        ),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: c }}\ndata: [ {CANARY} ]\n"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: c, namespace: 7 }}\ndata: {{ A: {CANARY} }}\nimmutable: {CANARY}\n"
        ),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: c }}\ndata:\n  A: |\n    {CANARY}\n  - broken\n"
        ),
    ];
    let mut runs: Vec<Vec<String>> = Vec::new();
    for fmt in ["text", "json"] {
        runs.push(vec![
            "check".into(),
            "--current".into(),
            cur.clone(),
            "--proposed".into(),
            removed.clone(),
            "--format".into(),
            fmt.into(),
        ]);
        runs.push(vec![
            "check".into(),
            "--current".into(),
            cur.clone(),
            "--proposed".into(),
            cur.clone(),
            "--prune".into(),
            "--format".into(),
            fmt.into(),
        ]);
    }
    runs.push(vec!["inventory".into(), cur.clone()]);
    for (i, m) in malformed.iter().enumerate() {
        let ext = if m.starts_with('{') { "json" } else { "yaml" };
        let p = write(dir.path(), &format!("bad{i}.{ext}"), m);
        runs.push(vec![
            "check".into(),
            "--current".into(),
            cur.clone(),
            "--proposed".into(),
            p.clone(),
            "--format".into(),
            "json".into(),
        ]);
        runs.push(vec![
            "check".into(),
            "--current".into(),
            p.clone(),
            "--proposed".into(),
            cur.clone(),
        ]);
        runs.push(vec!["inventory".into(), p.clone()]);
        runs.push(vec![
            "drift".into(),
            "--defaults".into(),
            p.clone(),
            "--base".into(),
            p.clone(),
        ]);
    }
    // Drift with a canary value in a ConfigMap that differs from the default.
    let defaults = write(
        dir.path(),
        "defaults.json",
        "{\"DB_HOST\": \"db\", \"REDIS\": \"r\"}",
    );
    runs.push(vec![
        "drift".into(),
        "--defaults".into(),
        defaults.clone(),
        "--base".into(),
        cur.clone(),
    ]);
    let base = write(
        dir.path(),
        "base.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cfg }}\ndata: {{ DB_HOST: {CANARY}, REDIS: r }}\n"
        ),
    );
    for fmt in ["text", "json"] {
        runs.push(vec![
            "drift".into(),
            "--defaults".into(),
            defaults.clone(),
            "--base".into(),
            base.clone(),
            "--format".into(),
            fmt.into(),
        ]);
    }
    let secret_overlay = write(
        dir.path(),
        "sec.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: cfg }}\nstringData: {{ DB_HOST: {CANARY} }}\n"
        ),
    );
    runs.push(vec![
        "drift".into(),
        "--defaults".into(),
        defaults.clone(),
        "--base".into(),
        base.clone(),
        "--overlay".into(),
        secret_overlay,
    ]);
    for args in runs {
        let out = bin().args(&args).output().unwrap();
        let text = all_output(&out);
        assert!(!text.contains(CANARY), "value leaked by {args:?}:\n{text}");
        assert!(
            !text.contains("7f3a9c"),
            "partial value leaked by {args:?}:\n{text}"
        );
        assert!(out.status.code().is_some_and(|c| c <= 2), "{args:?}");
    }
}
