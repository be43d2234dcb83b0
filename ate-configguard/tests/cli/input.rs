//! What the CLI reads: summaries, empty input, Kustomize, stdin, UTF-16, mounted directories, namespaces.

use super::*;

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
