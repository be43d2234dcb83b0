//! Retiring a key on purpose (`CheckInput::retired`, `--retire-key`): a
//! bulk load that loses it is a warning, never a reference by name, and
//! only for that object and key.

mod common;

use ate_configguard::testing::naive_safe;
use ate_configguard::{
    CheckInput, LoadOptions, Report, Severity, check, load_str,
    manifest::{RetiredKey, inventory, parse_retired_key},
};
use common::*;

const ENVFROM_APP: &str = "      containers:\n        - name: app\n          image: app:1\n          envFrom:\n            - configMapRef:\n                name: app-config\n";

const KEYREF_APP: &str = "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: DB_HOST\n              valueFrom:\n                configMapKeyRef:\n                  name: app-config\n                  key: DB_HOST\n";

/// A Secret mounted whole: every key is a file.
const SECRET_VOLUME_APP: &str = "      containers:\n        - name: app\n          image: app:1\n          volumeMounts: [ { name: creds, mountPath: /creds } ]\n      volumes:\n        - name: creds\n          secret:\n            secretName: creds\n";

fn retire(ids: &[&str]) -> Vec<RetiredKey> {
    ids.iter()
        .map(|id| parse_retired_key(id).unwrap())
        .collect()
}

fn input_retiring(current: &str, proposed: &str, retired: &[&str]) -> CheckInput {
    CheckInput {
        current: load(current),
        proposed: load(proposed),
        retired: retire(retired),
        ..Default::default()
    }
}

fn run_retiring(current: &str, proposed: &str, retired: &[&str]) -> Report {
    check(&input_retiring(current, proposed, retired)).unwrap()
}

fn warning_codes(report: &Report) -> Vec<(String, Option<String>)> {
    report
        .warnings
        .iter()
        .map(|w| (w.code.to_string(), w.key.clone()))
        .collect()
}

/// Without the retirement (`without`) the change fails as a bulk load
/// losing `key`, and nothing else; with it (`with`) it is safe, and that
/// loss is its one warning.
fn assert_waived(without: &Report, with: &Report, key: &str) {
    assert_eq!(
        codes(without),
        vec![("bulk-key-removed".into(), Some(key.into()))]
    );
    assert!(with.is_safe(), "{}", with.to_text());
    assert_eq!(
        warning_codes(with),
        vec![("bulk-key-removed".into(), Some(key.into()))]
    );
}

#[test]
fn a_retired_key_lost_by_an_envfrom_bulk_load_is_a_warning_not_a_failure() {
    let current = docs(&[
        &cm("app-config", &["OLD_FLAG", "LOG_LEVEL"]),
        &deployment("web", ENVFROM_APP),
    ]);
    let proposed = cm("app-config", &["LOG_LEVEL"]);
    // Without the retirement: the historical outage, a failure. Retired on
    // purpose: reported, not failed.
    let report = run_retiring(
        &current,
        &proposed,
        &["ConfigMap/default/app-config/OLD_FLAG"],
    );
    assert_waived(&run_retiring(&current, &proposed, &[]), &report, "OLD_FLAG");
    assert_eq!(report.exit_code(), 0);
    let w = &report.warnings[0];
    assert_eq!(w.severity, Severity::Warning);
    assert_eq!(
        w.workload.as_ref().unwrap().to_string(),
        "Deployment/default/web"
    );
    assert!(w.message.contains("which is retired"), "{}", w.message);
    assert!(!w.message.contains("silently"), "{}", w.message);
}

#[test]
fn a_retired_key_lost_by_a_whole_secret_volume_is_a_warning() {
    let current = docs(&[
        &secret("creds", &["token", "legacy.pem"]),
        &deployment("web", SECRET_VOLUME_APP),
    ]);
    let proposed = secret("creds", &["token"]);
    assert_waived(
        &run_retiring(&current, &proposed, &[]),
        &run_retiring(&current, &proposed, &["secret/default/creds/legacy.pem"]),
        "legacy.pem",
    );
}

#[test]
fn retiring_a_key_never_waives_a_reference_to_it_by_name() {
    // web bulk-loads app-config and also reads DB_HOST by name: its pods
    // would not start without the key, retired or not.
    let both = "      containers:\n        - name: app\n          image: app:1\n          envFrom:\n            - configMapRef:\n                name: app-config\n          env:\n            - name: DB_HOST\n              valueFrom:\n                configMapKeyRef:\n                  name: app-config\n                  key: DB_HOST\n";
    let current = docs(&[
        &cm("app-config", &["DB_HOST", "LOG_LEVEL"]),
        &deployment("web", both),
    ]);
    let proposed = cm("app-config", &["LOG_LEVEL"]);
    let report = run_retiring(&current, &proposed, &["cm/default/app-config/DB_HOST"]);
    assert!(!report.is_safe());
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("DB_HOST".into()))]
    );
    let f = &report.failures[0];
    assert!(
        f.message.contains("waives its loss from bulk loads only"),
        "{}",
        f.message
    );
    // The bulk load's loss of it is waived all the same.
    assert_eq!(
        warning_codes(&report),
        vec![("bulk-key-removed".into(), Some("DB_HOST".into()))]
    );
    // A reference by name alone fails just the same.
    let current = docs(&[
        &cm("app-config", &["DB_HOST"]),
        &deployment("web", KEYREF_APP),
    ]);
    let report = run_retiring(
        &current,
        &cm("app-config", &["OTHER"]),
        &["cm/default/app-config/DB_HOST"],
    );
    assert_eq!(
        codes(&report),
        vec![("missing-key".into(), Some("DB_HOST".into()))]
    );
}

#[test]
fn a_retirement_waives_only_its_own_kind_namespace_object_and_key() {
    let current = docs(&[
        &cm("app-config", &["OLD_FLAG", "LOG_LEVEL"]),
        &deployment("web", ENVFROM_APP),
    ]);
    let proposed = cm("app-config", &["LOG_LEVEL"]);
    // Another object (kind, namespace, name) that is not there: unusable
    // input naming it, never a waiver.
    for absent in [
        "Secret/default/app-config/OLD_FLAG",
        "ConfigMap/prod/app-config/OLD_FLAG",
        "ConfigMap/default/app-config2/OLD_FLAG",
    ] {
        let err = check(&input_retiring(&current, &proposed, &[absent])).unwrap_err();
        assert!(
            err.to_string().contains("is not in the current state"),
            "{absent}: {err}"
        );
    }
    // Another key of the object: waives nothing.
    for other in [
        "ConfigMap/default/app-config/OLD_FLAG2",
        "ConfigMap/default/app-config/old_flag",
    ] {
        let report = run_retiring(&current, &proposed, &[other]);
        assert_eq!(
            codes(&report),
            vec![("bulk-key-removed".into(), Some("OLD_FLAG".into()))],
            "{other}"
        );
        // And the retirement says it waived nothing.
        assert_eq!(
            report
                .warnings
                .iter()
                .map(|w| w.code.as_str())
                .collect::<Vec<_>>(),
            vec!["retired-key-unused"],
            "{other}"
        );
        // The public reference model agrees.
        assert!(
            !naive_safe(&input_retiring(&current, &proposed, &[other])),
            "{other}"
        );
    }
    let own = "ConfigMap/default/app-config/OLD_FLAG";
    assert!(run_retiring(&current, &proposed, &[own]).is_safe());
    assert!(naive_safe(&input_retiring(&current, &proposed, &[own])));
}

#[test]
fn a_retirement_that_waives_nothing_is_a_warning_that_says_why() {
    let current = docs(&[
        &cm("app-config", &["A", "B"]),
        &cm("unread", &["C"]),
        &deployment("web", ENVFROM_APP),
    ]);
    let proposed = docs(&[&cm("app-config", &["A", "B"]), &cm("unread", &[])]);
    // A is kept; C leaves an object no workload bulk-loads.
    let report = run_retiring(
        &current,
        &proposed,
        &["cm/default/app-config/A", "cm/default/unread/C"],
    );
    assert!(report.is_safe(), "{}", report.to_text());
    assert_eq!(
        warning_codes(&report),
        vec![
            ("retired-key-unused".into(), Some("A".into())),
            ("retired-key-unused".into(), Some("C".into())),
        ]
    );
    let kept = &report.warnings[0];
    assert_eq!(
        kept.object.as_ref().unwrap().to_string(),
        "ConfigMap/default/app-config"
    );
    assert!(
        kept.message.contains("the proposed state keeps this key"),
        "{}",
        kept.message
    );
    assert!(
        report.warnings[1]
            .message
            .contains("no bulk load in this change loses this key"),
        "{}",
        report.warnings[1].message
    );
    assert!(
        report
            .to_text()
            .contains("WARN [retired-key-unused] -> ConfigMap/default/app-config key A:"),
        "{}",
        report.to_text()
    );
}

#[test]
fn a_retired_key_that_only_the_previous_inventory_holds_is_waived_too() {
    // The live object already lost OLD (an earlier apply); the inventory
    // taken before that still lists it.
    let opts = LoadOptions::default();
    let inv =
        inventory(&load_str(&cm("app-config", &["OLD", "LOG_LEVEL"]), "inv.yaml", &opts).unwrap());
    let current = docs(&[
        &cm("app-config", &["LOG_LEVEL"]),
        &deployment("web", ENVFROM_APP),
    ]);
    let input = |retired: &[&str]| CheckInput {
        current: load(&current),
        proposed: load(&cm("app-config", &["LOG_LEVEL"])),
        inventory: Some(inv.clone()),
        retired: retire(retired),
        ..Default::default()
    };
    assert_waived(
        &check(&input(&[])).unwrap(),
        &check(&input(&["cm/default/app-config/OLD"])).unwrap(),
        "OLD",
    );
}

#[test]
fn retired_keys_parse_as_kind_namespace_name_key_and_bad_ones_are_named() {
    let r = parse_retired_key("CM/prod/app.v2/db_password").unwrap();
    assert_eq!(r.to_string(), "ConfigMap/prod/app.v2/db_password");
    assert_eq!(r.object.name, "app.v2");
    assert_eq!(r.key, "db_password");
    assert_eq!(
        parse_retired_key("secret/prod/tls/tls.crt")
            .unwrap()
            .to_string(),
        "Secret/prod/tls/tls.crt"
    );
    // Keys may hold dots, dashes and underscores, as the API server takes.
    assert!(parse_retired_key("cm/prod/app/.hidden-file_1").is_ok());
    for (bad, says) in [
        ("cm/prod/app", "is not ConfigMap/NAMESPACE/NAME/KEY"),
        ("cm/prod/app/", "is not ConfigMap/NAMESPACE/NAME/KEY"),
        ("cm/prod//key", "is not ConfigMap/NAMESPACE/NAME/KEY"),
        ("cm/prod/app/a/b", "is not ConfigMap/NAMESPACE/NAME/KEY"),
        (
            "deployment/prod/app/key",
            "is not ConfigMap/NAMESPACE/NAME/KEY",
        ),
        ("", "is not ConfigMap/NAMESPACE/NAME/KEY"),
        ("cm/Prod/app/key", "namespace \"Prod\" is no namespace name"),
        // (The name's own rule names the name, as for `--delete`.)
        ("cm/prod/App/key", "ConfigMap name \"App\" is no name"),
        (
            "cm/prod/app/a b",
            "\"a b\" is no key a ConfigMap or Secret can hold",
        ),
        ("cm/prod/app/..x", "\"..x\" is no key"),
        ("cm/prod/app/.", "\".\" is no key"),
    ] {
        let err = parse_retired_key(bad).unwrap_err().to_string();
        assert!(err.contains("--retire-key"), "{bad:?}: {err}");
        assert!(err.contains(says), "{bad:?}: {err}");
        if !bad.is_empty() && !bad.contains("App") {
            assert!(err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
        }
    }
    let long = format!("cm/prod/app/{}", "k".repeat(254));
    assert!(
        parse_retired_key(&long)
            .unwrap_err()
            .to_string()
            .contains("is no key")
    );
    assert!(parse_retired_key(&format!("cm/prod/app/{}", "k".repeat(253))).is_ok());
}

#[test]
fn a_key_lost_by_a_volume_plugins_secret_fails_and_can_be_retired() {
    // A CSI driver (or Ceph, Azure File, ...) is handed every key of the
    // Secret its volume names: a key it reads and loses fails the mount,
    // and the pod never starts. This passed as safe before.
    for (volume, site) in [
        (
            "csi: {driver: secrets.example.com, nodePublishSecretRef: {name: creds}}",
            "volumes[data].csi.nodePublishSecretRef",
        ),
        (
            "azureFile: {secretName: creds, shareName: share}",
            "volumes[data].azureFile.secretName",
        ),
        (
            "cephfs: {monitors: [m], secretRef: {name: creds}}",
            "volumes[data].cephfs.secretRef",
        ),
    ] {
        let pod = format!(
            "      containers:\n        - name: app\n          image: app:1\n      \
             volumes:\n        - name: data\n          {volume}\n"
        );
        let current = docs(&[
            &secret("creds", &["clientID", "clientSecret"]),
            &deployment("web", &pod),
        ]);
        let proposed = secret("creds", &["clientID"]);
        let without = run_retiring(&current, &proposed, &[]);
        let with = run_retiring(&current, &proposed, &["secret/default/creds/clientSecret"]);
        assert_waived(&without, &with, "clientSecret");
        let f = &without.failures[0];
        assert_eq!(f.site.as_deref(), Some(site));
        assert!(
            f.message.starts_with(
                "the volume plugin is given every key of this Secret, and the proposed state \
                 removes this key: a mount that needs it fails"
            ),
            "{}",
            f.message
        );
        let w = &with.warnings[0];
        assert!(
            w.message
                .contains("which is retired: the plugin no longer gets it"),
            "{}",
            w.message
        );
        // A key added, or the Secret kept as it is: safe.
        for proposed in [
            secret("creds", &["clientID", "clientSecret", "tenant"]),
            secret("creds", &["clientID", "clientSecret"]),
        ] {
            let report = run_retiring(&current, &proposed, &[]);
            assert!(report.is_safe(), "{volume}: {}", report.to_text());
        }
    }
}
