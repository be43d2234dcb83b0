//! Output that cannot be written: a reader that leaves early, a report that cannot be written.

use super::*;

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
