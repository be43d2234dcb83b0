#![allow(dead_code, unreachable_pub)]

use ate_configguard::{CheckInput, Deletion, InputError, LoadOptions, Report, check, load_str};

pub fn load(yaml: &str) -> ate_configguard::Manifests {
    load_str(yaml, "test.yaml", &LoadOptions::default()).unwrap()
}

pub fn run(current: &str, proposed: &str) -> Report {
    run_with(current, proposed, Deletion::Listed, &[])
}

pub fn run_with(current: &str, proposed: &str, deletion: Deletion, delete: &[&str]) -> Report {
    let input = CheckInput {
        current: load(current),
        proposed: load(proposed),
        inventory: None,
        deletion,
        delete: delete
            .iter()
            .map(|d| ate_configguard::manifest::parse_object_id(d).unwrap())
            .collect(),
        retired: Vec::new(),
    };
    check(&input).unwrap()
}

pub fn load_err(yaml: &str) -> InputError {
    load_str(yaml, "test.yaml", &LoadOptions::default()).unwrap_err()
}

pub fn codes(report: &Report) -> Vec<(String, Option<String>)> {
    report
        .failures
        .iter()
        .map(|f| (f.code.to_string(), f.key.clone()))
        .collect()
}

pub fn deployment(name: &str, containers_yaml: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n{containers_yaml}"
    )
}

pub fn cm(name: &str, keys: &[&str]) -> String {
    let data: String = keys.iter().map(|k| format!("  {k}: v\n")).collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n{data}")
}

pub fn secret(name: &str, keys: &[&str]) -> String {
    let data: String = keys.iter().map(|k| format!("  {k}: dg==\n")).collect();
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ndata:\n{data}")
}

/// Documents as one multi-document YAML stream.
pub fn docs(parts: &[&str]) -> String {
    parts.join("\n---\n")
}

/// An empty state, stated on purpose (what `kubectl get -o yaml` prints
/// when nothing matches).
pub const NOTHING: &str = "apiVersion: v1\nkind: List\nitems: []\n";
