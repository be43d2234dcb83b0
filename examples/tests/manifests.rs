//! The shipped Kubernetes manifests are consistent: the config guard
//! accepts them, and the rollout gate (probes split, preStop, grace budget,
//! headroom) passes them.

use std::path::PathBuf;

use ate_configguard::{
    CheckInput, LoadOptions, check, load_paths, load_str, manifest::parse_retired_key,
};
use k8s_openapi::api::apps::v1::Deployment;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s/deployment.yaml")
}

#[test]
fn the_example_manifests_pass_the_config_guard() {
    // The whole directory, as `kubectl apply -f examples/k8s/` applies it.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s");
    let m = load_paths(&[dir], &LoadOptions::default()).unwrap();
    assert_eq!(m.workloads.len(), 2, "the service and its ledger database");
    let report = check(&CheckInput {
        current: m.clone(),
        proposed: m,
        ..Default::default()
    })
    .unwrap();
    assert!(report.is_safe(), "{}", report.to_text());
    assert!(report.references_checked >= 2);
}

#[test]
fn dropping_a_setting_from_the_envfrom_config_map_fails_the_guard_unless_retired() {
    // The service reads its settings with envFrom, so nothing names each
    // key: a setting dropped from config.yaml would silently leave the
    // pods' environment. The guard fails that, until the pipeline says it
    // is meant (`--retire-key cm/default/ate-example-limits/...`).
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s");
    let opts = LoadOptions::default();
    let live = load_paths(std::slice::from_ref(&dir), &opts).unwrap();
    let config = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    let dropped = config.replace("  ATE_MAX_CALLERS: \"100000\"\n", "");
    assert_ne!(dropped, config);
    let proposed = load_str(&dropped, "config.yaml", &opts).unwrap();
    let run = |retired: &[&str]| {
        check(&CheckInput {
            current: live.clone(),
            proposed: proposed.clone(),
            retired: retired
                .iter()
                .map(|r| parse_retired_key(r).unwrap())
                .collect(),
            ..Default::default()
        })
        .unwrap()
    };
    let report = run(&[]);
    assert!(!report.is_safe());
    assert!(
        report
            .failures
            .iter()
            .all(|f| f.code == "bulk-key-removed" && f.key.as_deref() == Some("ATE_MAX_CALLERS")),
        "{}",
        report.to_text()
    );
    let report = run(&["cm/default/ate-example-limits/ATE_MAX_CALLERS"]);
    assert!(report.is_safe(), "{}", report.to_text());
    assert!(
        report.warnings.iter().any(|w| w.code == "bulk-key-removed"),
        "{}",
        report.to_text()
    );
}

/// Both shipped Deployments (the exec `drain` hook, and the native sleep
/// for Kubernetes 1.34+) pass the rollout gate: probes split, a working
/// preStop, a grace period over preStop + drain wait + margin, headroom.
#[test]
fn the_shipped_manifests_pass_the_rollout_gate() {
    use ate_configguard::rollout::{RolloutOptions, load_paths as fleet, rollout};
    let dir = manifest().with_file_name("");
    let native = dir.with_file_name("k8s-1.34");
    for paths in [
        vec![dir.clone()],
        vec![native.join("deployment.yaml"), dir.join("postgres.yaml")],
    ] {
        let report = rollout(
            &fleet(&paths, &LoadOptions::default()).unwrap(),
            &RolloutOptions::default(),
        )
        .unwrap();
        assert!(report.is_safe(), "{paths:?}: {}", report.to_rollout_text());
        assert_eq!(
            report.workloads_checked, 2,
            "the service and its ledger database"
        );
        // Warnings are the mutable example tags alone.
        assert!(
            report.warnings.iter().all(|w| w.code == "image-identity"),
            "{}",
            report.to_rollout_text()
        );
    }
    // The drain wait the gate reads (an annotation: it never reads a
    // ConfigMap) is the one the ConfigMap sets.
    let config = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    let wait = serde_saphyr_value(&config)["data"]["ATE_DRAIN_TIMEOUT_SECS"].clone();
    for file in [manifest(), native.join("deployment.yaml")] {
        let text = std::fs::read_to_string(&file).unwrap();
        let doc = text
            .split("\n---\n")
            .find(|d| d.contains("kind: Deployment"))
            .unwrap();
        let d: Deployment = serde_json::from_value(serde_saphyr_value(doc)).unwrap();
        let stated = &d.metadata.annotations.unwrap()["ate.dev/drain-timeout-seconds"];
        assert_eq!(Some(stated.as_str()), wait.as_str(), "{}", file.display());
    }
}

#[test]
fn the_config_map_says_what_the_service_compiles_in() {
    // `ate-configguard drift`, as the file's header runs it: every setting
    // the service reads is in the ConfigMap, at its compiled-in default,
    // and the ConfigMap holds nothing else. A default changed in the code
    // alone (or a key misspelt in the manifest) fails here.
    let path = manifest().with_file_name("config.yaml");
    let base = std::fs::read_to_string(&path).unwrap();
    let defaults = serde_json::to_string(&ate_examples::config::defaults()).unwrap();
    let report = ate_configguard::drift(
        ate_configguard::Source {
            text: &defaults,
            name: "axum-service defaults",
        },
        ate_configguard::Source {
            text: &base,
            name: "config.yaml",
        },
        &[],
        &Default::default(),
    )
    .unwrap();
    assert!(report.is_safe(), "{}", report.to_drift_text());
    assert_eq!(report.references_checked, 19, "{}", report.to_drift_text());
    // And the binaries print the same defaults.
    for bin in [
        env!("CARGO_BIN_EXE_axum-service"),
        env!("CARGO_BIN_EXE_actix-service"),
    ] {
        let out = std::process::Command::new(bin)
            .arg("defaults")
            .output()
            .unwrap();
        assert!(out.status.success(), "{bin}");
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            printed,
            serde_json::to_value(ate_examples::config::defaults()).unwrap(),
            "{bin}"
        );
    }
}

fn serde_saphyr_value(doc: &str) -> serde_json::Value {
    // The configguard loader drops values; here we need the whole document.
    let m: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
    m
}

#[test]
fn every_shipped_manifest_decodes_into_its_kubernetes_type_with_no_unknown_field() {
    // A misspelt field (`volumeClaimTemplate`, `secretkeyRef`) is dropped
    // by the API server or kubectl without a word: catch it here.
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
    fn decode<T: serde::de::DeserializeOwned>(doc: serde_json::Value, at: &str) {
        let mut unknown = Vec::new();
        let decoded: Result<T, _> =
            serde_ignored::deserialize(doc, |path| unknown.push(path.to_string()));
        assert!(decoded.is_ok(), "{at}: {}", decoded.err().unwrap());
        assert!(unknown.is_empty(), "{at}: unknown fields {unknown:?}");
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut kinds = Vec::new();
    let files = ["k8s", "k8s-1.34"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
        .map(|e| e.unwrap().path());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, doc) in text.split("\n---\n").enumerate() {
            let value = serde_saphyr_value(doc);
            let kind = value["kind"].as_str().unwrap().to_owned();
            let at = format!("{} document {}", path.display(), i + 1);
            match kind.as_str() {
                "Deployment" => decode::<Deployment>(value, &at),
                "StatefulSet" => decode::<StatefulSet>(value, &at),
                "Service" => decode::<Service>(value, &at),
                "Secret" => decode::<Secret>(value, &at),
                "ConfigMap" => decode::<ConfigMap>(value, &at),
                other => panic!("{at}: no check for kind {other}"),
            }
            kinds.push(kind);
        }
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Deployment",
            "Deployment",
            "Secret",
            "Secret",
            "Secret",
            "Secret",
            "Service",
            "Service",
            "Service",
            "StatefulSet"
        ]
    );
}
