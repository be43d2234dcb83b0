//! `--retire-key`: a bulk load losing a retired key warns; a key it does not name is unusable input.

use super::*;

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
