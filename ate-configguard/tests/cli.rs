//! The CLI: exit codes, output formats, and the canary test (values never
//! appear anywhere).
#![cfg(feature = "cli")]

use std::path::Path;
use std::process::{Command, Output};

const CANARY: &str = "CANARY-7f3a9c-DO-NOT-PRINT";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ate-configguard"))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `ate-configguard check --current CURRENT --proposed PROPOSED`.
fn check(current: &str, proposed: &str) -> Output {
    check_with(current, proposed, &[])
}

/// The same with `more` arguments after.
fn check_with(current: &str, proposed: &str, more: &[&str]) -> Output {
    bin()
        .args(["check", "--current", current, "--proposed", proposed])
        .args(more)
        .output()
        .unwrap()
}

fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn current(dir: &Path) -> String {
    write(
        dir,
        "current.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{ name: creds }}\nstringData:\n  PASSWORD: {CANARY}\n  TOKEN: \"{CANARY}\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cfg }}\ndata:\n  DB_HOST: {CANARY}\n  REDIS: {CANARY}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{ name: web }}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: app\n          envFrom: [ {{ configMapRef: {{ name: cfg }} }}, {{ secretRef: {{ name: creds }} }} ]\n"
        ),
    )
}

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

#[test]
fn text_summaries_say_what_was_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let out = check(&cur, &cur);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("workload(s)") && text.contains("reference(s) checked"),
        "{text}"
    );
    let defaults = write(dir.path(), "d.json", "{\"A\": \"1\", \"B\": \"2\"}");
    let base = write(
        dir.path(),
        "base.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c }\ndata: { A: \"1\", B: \"2\" }\n",
    );
    let out = bin()
        .args(["drift", "--defaults", &defaults, "--base", &base])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("key(s) compared"), "{text}");
    assert!(
        !text.contains("workload"),
        "a drift check reads no workloads: {text}"
    );
}

#[test]
fn an_empty_file_or_directory_is_unusable_input_and_an_empty_list_is_an_empty_state() {
    // A failed `helm template > proposed.yaml` or `kubectl get > current.yaml`
    // leaves an empty file behind: reading it as "no objects" would pass.
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let empty = write(dir.path(), "empty.yaml", "");
    let comments = write(dir.path(), "comments.yaml", "# Source: chart/x\n---\n---\n");
    let empty_dir = dir.path().join("rendered");
    std::fs::create_dir(&empty_dir).unwrap();
    std::fs::write(empty_dir.join("NOTES.txt"), "not a manifest").unwrap();
    let empty_dir = empty_dir.display().to_string();
    for (current, proposed, names) in [
        (cur.as_str(), empty.as_str(), "empty.yaml"),
        (cur.as_str(), comments.as_str(), "comments.yaml"),
        (empty.as_str(), cur.as_str(), "empty.yaml"),
        (cur.as_str(), empty_dir.as_str(), "rendered"),
    ] {
        let o = check(current, proposed);
        let text = all_output(&o);
        assert_eq!(o.status.code(), Some(2), "{names}: {text}");
        assert!(
            text.contains(names) && text.contains("\"kind\": \"List\""),
            "the error names the input and says how to state an empty state: {text}"
        );
    }
    // Stated on purpose, an empty state is read as one: nothing serves, so
    // nothing can break (a first deploy), and proposing nothing is safe.
    let nothing = write(
        dir.path(),
        "nothing.yaml",
        "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: \"\"\n",
    );
    let nothing_json = write(dir.path(), "nothing.json", "[]");
    for (current, proposed) in [
        (nothing.as_str(), cur.as_str()),
        (cur.as_str(), nothing.as_str()),
        (cur.as_str(), nothing_json.as_str()),
    ] {
        let o = check(current, proposed);
        assert_eq!(o.status.code(), Some(0), "{}", all_output(&o));
    }
}

#[test]
fn a_kustomization_is_unusable_input_not_an_empty_state() {
    // Its generators and patches are what would be applied; the guard must
    // see the rendered output, not pass the source for holding no workload.
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let k = write(
        dir.path(),
        "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deployment.yaml]\nconfigMapGenerator:\n  - name: cfg\n    literals: [DB_HOST=x]\n",
    );
    let o = check(&cur, &k);
    let text = all_output(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(
        text.contains("Kustomization") && text.contains("kubectl kustomize"),
        "{text}"
    );
}

/// Runs the binary with `input` on its standard input.
fn piped(args: &[&str], input: impl AsRef<[u8]>) -> Output {
    use std::io::Write;
    let mut child = bin()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A run that fails before reading may close its end first.
    let _ = child.stdin.take().unwrap().write_all(input.as_ref());
    child.wait_with_output().unwrap()
}

#[test]
fn a_dash_reads_standard_input_once_and_an_empty_pipe_is_unusable_input() {
    // `kubectl get deploy,cm,secret -o yaml | ate-configguard check --current - ...`
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    let live = std::fs::read_to_string(&cur).unwrap();
    let removed = write(
        dir.path(),
        "p.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x }\n",
    );
    let run = piped(&["check", "--current", "-", "--proposed", &removed], &live);
    assert_eq!(run.status.code(), Some(1), "{}", all_output(&run));
    assert!(all_output(&run).contains("REDIS"), "{}", all_output(&run));
    let run = piped(&["check", "--current", &cur, "--proposed", "-"], &live);
    assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
    let run = piped(&["inventory", "-"], &live);
    assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
    assert!(String::from_utf8_lossy(&run.stdout).contains("\"DB_HOST\""));
    // A failed `kubectl get` pipes nothing: never an empty state.
    let run = piped(&["check", "--current", "-", "--proposed", &removed], "");
    assert_eq!(run.status.code(), Some(2), "{}", all_output(&run));
    assert!(
        all_output(&run).contains("<stdin>: no document"),
        "{}",
        all_output(&run)
    );
    // A second `-` would read nothing.
    let run = piped(&["check", "--current", "-", "--proposed", "-"], &live);
    assert_eq!(run.status.code(), Some(2), "{}", all_output(&run));
    assert!(
        all_output(&run).contains("standard input can be read once"),
        "{}",
        all_output(&run)
    );
}

fn utf16le(text: &str) -> Vec<u8> {
    [0xFF, 0xFE]
        .into_iter()
        .chain(text.encode_utf16().flat_map(u16::to_le_bytes))
        .collect()
}

#[test]
fn utf16_files_and_byte_order_marks_are_read_as_kubectl_reads_them() {
    // Windows PowerShell 5.1 writes `kubectl get ... -o yaml > live.yaml`
    // as UTF-16 with a byte-order mark, and its editors put a UTF-8 one
    // before JSON; kubectl reads both.
    let dir = tempfile::tempdir().unwrap();
    let live = std::fs::read_to_string(current(dir.path())).unwrap();
    let removed = write(
        dir.path(),
        "p.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x }\n",
    );
    let unsafe_with = |current: &str| {
        let run = check(current, &removed);
        assert_eq!(run.status.code(), Some(1), "{}", all_output(&run));
        assert!(all_output(&run).contains("REDIS"), "{}", all_output(&run));
    };
    let utf16_file = dir.path().join("live-utf16.yaml");
    std::fs::write(&utf16_file, utf16le(&live)).unwrap();
    unsafe_with(&utf16_file.display().to_string());
    let json = serde_json::json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"DB_HOST": "a", "REDIS": "b"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app", "envFrom": [{"configMapRef": {"name": "cfg"}}]}
        ]}}}}
    ])
    .to_string();
    let bom_json = write(dir.path(), "live.json", &format!("\u{feff}{json}"));
    unsafe_with(&bom_json);
    let big_endian: Vec<u8> = [0xFE, 0xFF]
        .into_iter()
        .chain(live.encode_utf16().flat_map(u16::to_be_bytes))
        .collect();
    let run = piped(
        &["check", "--current", "-", "--proposed", &removed],
        &big_endian,
    );
    assert_eq!(run.status.code(), Some(1), "{}", all_output(&run));
    // The inventory and the drift defaults go through the same reading.
    let inventory = bin()
        .args(["inventory", &utf16_file.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(
        inventory.status.code(),
        Some(0),
        "{}",
        all_output(&inventory)
    );
    let inventory_file = dir.path().join("inventory.json");
    std::fs::write(
        &inventory_file,
        utf16le(&String::from_utf8(inventory.stdout).unwrap()),
    )
    .unwrap();
    let run = bin()
        .args([
            "check",
            "--current",
            &bom_json,
            "--proposed",
            &bom_json,
            "--inventory",
        ])
        .arg(&inventory_file)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
    let defaults = write(
        dir.path(),
        "defaults.json",
        "\u{feff}{\"DB_HOST\": \"a\", \"REDIS\": \"b\"}",
    );
    let base = write(
        dir.path(),
        "base.json",
        "\u{feff}{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"cfg\"}, \"data\": {\"DB_HOST\": \"a\", \"REDIS\": \"b\"}}",
    );
    let run = bin()
        .args(["drift", "--defaults", &defaults, "--base", &base])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));

    // What is neither is unusable input, naming the file and where, never
    // the bytes there (they may be a Secret's value).
    let mut unpaired = utf16le("kind: Secret\nstringData: {k: ");
    unpaired.extend([0x00, 0xD8, b'x', 0]);
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "latin1.yaml",
            b"apiVersion: v1\nkind: Secret\nstringData: {k: caf\xE9}\n".to_vec(),
            "not UTF-8 text: the character at line 3 column 20 is not UTF-8",
        ),
        (
            "unpaired.yaml",
            unpaired,
            "unpaired surrogate) at line 2 column 17",
        ),
        (
            "utf32.yaml",
            vec![0xFF, 0xFE, 0, 0, b'a', 0, 0, 0],
            "UTF-32",
        ),
        (
            "cut.yaml",
            utf16le("kind: List\n")[..5].to_vec(),
            "odd number of bytes, 5",
        ),
    ];
    for (name, bytes, says) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let run = bin()
            .args(["check", "--current", &removed, "--proposed"])
            .arg(&file)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(2), "{}", all_output(&run));
        let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        let error = report["error"].as_str().unwrap();
        assert!(
            error.contains(name) && error.contains(says),
            "{name}: {error}"
        );
        let stderr = String::from_utf8_lossy(&run.stderr);
        for shown in [error, &stderr] {
            assert!(
                !shown.contains("caf") && !shown.contains("E9") && !shown.contains("D800"),
                "{shown}"
            );
        }
    }
}

#[test]
fn a_configmap_mounted_directory_is_read_once_through_its_links() {
    // What the kubelet writes for a ConfigMap volume: the files live in a
    // timestamped directory, `..data` links to it, and each name links
    // through `..data`. Every manifest is reachable three ways.
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("manifests");
    let real = mount.join("..2026_11_29_21_00_00.123456789");
    std::fs::create_dir_all(&real).unwrap();
    let cur = current(&real);
    std::os::unix::fs::symlink("..2026_11_29_21_00_00.123456789", mount.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/current.yaml", mount.join("current.yaml")).unwrap();
    // And a link back up, which must not be walked forever.
    std::os::unix::fs::symlink("..", real.join("up")).unwrap();
    let mount = mount.display().to_string();
    let run = check(&mount, &cur);
    assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
    let twice = bin()
        .args([
            "check",
            "--current",
            &cur,
            &cur,
            &mount,
            "--proposed",
            &mount,
            &mount,
        ])
        .output()
        .unwrap();
    assert_eq!(twice.status.code(), Some(0), "{}", all_output(&twice));
}

#[test]
fn manifests_without_a_namespace_that_miss_the_other_state_are_unusable_input() {
    // `helm template` leaves the namespace out (`helm install -n prod`
    // supplies it); `kubectl get -n prod -o yaml` writes it. Read in
    // `default`, the rendered objects never met the live ones, and the
    // removed key passed as safe (exit 0).
    let dir = tempfile::tempdir().unwrap();
    let live = write(
        dir.path(),
        "live.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg, namespace: prod }\ndata: { DB_HOST: x, REDIS: r }\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: web, namespace: prod }\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: app\n          envFrom: [ { configMapRef: { name: cfg } } ]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: { name: reader }\n",
    );
    let rendered = write(
        dir.path(),
        "rendered.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: cfg }\ndata: { DB_HOST: x }\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: { name: reader }\n",
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["check", "--current", &live, "--proposed", &rendered];
        args.extend_from_slice(extra);
        bin().args(&args).output().unwrap()
    };
    let missed = run(&[]);
    assert_eq!(missed.status.code(), Some(2), "{}", all_output(&missed));
    assert!(
        all_output(&missed).contains(
            "proposed state: 1 document(s) without a metadata.namespace were read in namespace \
             default, where the current state holds nothing (it holds prod)"
        ) && all_output(&missed).contains("--namespace prod"),
        "{}",
        all_output(&missed)
    );
    // Live state read with `-A` reaches `default` too; the rendered
    // ConfigMap is there, but live only in prod.
    let all = write(
        dir.path(),
        "all.yaml",
        &format!(
            "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: kube-root-ca.crt, namespace: default }}\ndata: {{ ca.crt: x }}\n",
            std::fs::read_to_string(&live).unwrap()
        ),
    );
    let missed = check(&all, &rendered);
    assert_eq!(missed.status.code(), Some(2), "{}", all_output(&missed));
    assert!(
        all_output(&missed).contains(
            "ConfigMap cfg is there, but the current state holds it only in prod, so the two \
             states would not meet: give the namespace they are applied to, as --namespace prod"
        ),
        "{}",
        all_output(&missed)
    );
    // Named, the states meet and the removed key fails.
    let named = run(&["--namespace", "prod"]);
    assert_eq!(named.status.code(), Some(1), "{}", all_output(&named));
    assert!(
        all_output(&named).contains("REDIS"),
        "{}",
        all_output(&named)
    );
    // Chosen on purpose, even `default` is taken as it is.
    let chosen = run(&["--namespace", "default"]);
    assert_eq!(chosen.status.code(), Some(0), "{}", all_output(&chosen));
    // Both states without namespaces (two renders) meet in `default`; a
    // cluster-scoped object has none to give, and does not count.
    let same = check(&rendered, &rendered);
    assert_eq!(same.status.code(), Some(0), "{}", all_output(&same));
    let cluster_only = write(
        dir.path(),
        "cluster.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: { name: reader }\n",
    );
    let scoped = check(&live, &cluster_only);
    assert_eq!(scoped.status.code(), Some(0), "{}", all_output(&scoped));
}

#[test]
fn retire_key_turns_a_bulk_load_losing_that_key_into_a_warning_and_never_prints_values() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    // REDIS leaves cfg, which web bulk-loads (envFrom).
    let proposed = write(
        dir.path(),
        "p.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cfg }}\ndata: {{ DB_HOST: {CANARY} }}\n"
        ),
    );
    assert_eq!(check(&cur, &proposed).status.code(), Some(1));
    let retired = check_with(&cur, &proposed, &["--retire-key", "cm/default/cfg/REDIS"]);
    let text = all_output(&retired);
    assert_eq!(retired.status.code(), Some(0), "{text}");
    assert!(
        text.contains("WARN [bulk-key-removed] Deployment/default/web")
            && text.contains("key REDIS"),
        "{text}"
    );
    assert!(text.contains("SAFE: 0 failure(s), 1 warning(s)"), "{text}");
    assert!(!text.contains(CANARY), "{text}");
    // JSON: the finding is a warning, the result safe.
    let json = check_with(
        &cur,
        &proposed,
        &[
            "--retire-key",
            "ConfigMap/default/cfg/REDIS",
            "--format",
            "json",
        ],
    );
    assert_eq!(json.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["result"], "safe");
    assert_eq!(report["warnings"][0]["code"], "bulk-key-removed");
    assert_eq!(report["warnings"][0]["severity"], "warning");
    assert_eq!(report["warnings"][0]["key"], "REDIS");
    assert!(!all_output(&json).contains(CANARY));
    // Retiring another key waives nothing, and says so.
    let other = check_with(&cur, &proposed, &["--retire-key", "cm/default/cfg/DB_HOST"]);
    let text = all_output(&other);
    assert_eq!(other.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL [bulk-key-removed]"), "{text}");
    assert!(
        text.contains("WARN [retired-key-unused] -> ConfigMap/default/cfg key DB_HOST"),
        "{text}"
    );
    // A key of an object that is not there (the kind mistaken) is unusable
    // input naming it: it would waive nothing and check nothing.
    let absent = check_with(
        &cur,
        &proposed,
        &["--retire-key", "secret/default/cfg/REDIS"],
    );
    let text = all_output(&absent);
    assert_eq!(absent.status.code(), Some(2), "{text}");
    assert!(
        text.contains("--retire-key: Secret/default/cfg is not in the current state")
            && text.contains("did you mean ConfigMap/default/cfg"),
        "{text}"
    );
}

#[test]
fn a_retire_key_that_names_no_key_is_unusable_input_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    for (bad, says) in [
        (
            "cm/default/cfg",
            "\"cm/default/cfg\" is not ConfigMap/NAMESPACE/NAME/KEY",
        ),
        (
            "pod/default/cfg/REDIS",
            "\"pod/default/cfg/REDIS\" is not ConfigMap",
        ),
        (
            "cm/Default/cfg/REDIS",
            "namespace \"Default\" is no namespace name",
        ),
        (
            "cm/default/cfg/conf/app.yaml",
            "is not ConfigMap/NAMESPACE/NAME/KEY",
        ),
        (
            "cm/default/cfg/a:b",
            "\"a:b\" is no key a ConfigMap or Secret can hold",
        ),
    ] {
        let out = check_with(&cur, &cur, &["--retire-key", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--retire-key") && err.contains(says),
            "{bad}: {err}"
        );
    }
}

/// Many ConfigMaps, each with a key the other state lacks, so a report or
/// inventory of them is far more than a pipe holds (64 KiB).
fn many(dir: &Path, name: &str, key: &str) -> String {
    let docs: Vec<String> = (0..2000)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cfg-{i} }}\ndata: {{ {key}: v }}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{ name: p-{i} }}\nspec:\n  containers:\n    - name: a\n      image: a\n      env: [ {{ name: X, valueFrom: {{ configMapKeyRef: {{ name: cfg-{i}, key: {key} }} }} }} ]\n"))
        .collect();
    write(dir, name, &docs.join("---\n"))
}

#[test]
fn a_reader_that_leaves_early_is_no_panic_and_the_exit_code_is_the_verdict() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let cur = many(dir.path(), "cur.yaml", "OLD");
    let new = many(dir.path(), "new.yaml", "NEW");
    // `ate-configguard ... | head -c 0`: the reader is gone before a byte.
    for (args, verdict) in [
        (vec!["inventory", cur.as_str()], 0),
        (vec!["check", "--current", &cur, "--proposed", &new], 1),
        (
            vec![
                "check",
                "--current",
                &cur,
                "--proposed",
                &new,
                "--format",
                "json",
            ],
            1,
        ),
    ] {
        let mut child = bin()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(verdict), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_report_that_cannot_be_written_is_exit_2_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let cur = current(dir.path());
    for args in [
        vec!["check", "--current", cur.as_str(), "--proposed", &cur],
        vec!["inventory", &cur],
    ] {
        let full = std::fs::File::create("/dev/full").unwrap();
        let out = bin().args(&args).stdout(full).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: cannot write the "), "{stderr}");
        assert!(stderr.contains("No space left on device"), "{stderr}");
    }
}

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
