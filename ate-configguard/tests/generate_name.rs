//! Objects named by the API server (`metadata.generateName` without a
//! `metadata.name`): a migration Job run with `kubectl create`, an Argo CD
//! hook, an Argo Workflow. Each is a new object, checked as one; a
//! ConfigMap or Secret named that way cannot be named by anything else.

mod common;

use ate_configguard::{LoadOptions, load_str, manifest::inventory};
use common::*;

/// A Job made with `generateName: PREFIX` whose container reads `key` of
/// ConfigMap `cfg`.
fn generated_job(prefix: &str, key: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: {prefix}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: m\n          image: m:1\n          env:\n            - name: K\n              valueFrom:\n                configMapKeyRef: {{name: cfg, key: {key}}}\n"
    )
}

/// Each workload a finding names, with the key it is about.
fn named(report: &ate_configguard::Report) -> Vec<(String, String, Option<String>)> {
    report
        .failures
        .iter()
        .map(|f| {
            let w = f.workload.as_ref().expect("a workload finding");
            (w.kind.clone(), w.name.clone(), f.key.clone())
        })
        .collect()
}

#[test]
fn a_generated_workload_is_checked_as_a_new_one_named_by_its_prefix_and_place() {
    let current = cm("cfg", &["A", "B"]);
    // Document 2 reads a key the same change removes.
    let proposed = docs(&[&cm("cfg", &["A"]), &generated_job("migrate-", "B")]);
    let report = run(&current, &proposed);
    assert_eq!(
        named(&report),
        [(
            "Job".to_owned(),
            "migrate-<generated: test.yaml document 2>".to_owned(),
            Some("B".to_owned())
        )],
        "{report:?}"
    );
    // Reading a key that stays is safe.
    let proposed = docs(&[&cm("cfg", &["A"]), &generated_job("migrate-", "A")]);
    assert!(run(&current, &proposed).is_safe());
}

#[test]
fn two_generated_workloads_with_one_prefix_are_two_workloads() {
    // Two `kubectl create` runs of one template make two Jobs; neither is
    // "the same workload twice", and each is checked.
    let proposed = docs(&[
        &cm("cfg", &["A"]),
        &generated_job("migrate-", "A"),
        &generated_job("migrate-", "B"),
    ]);
    let report = run(&cm("cfg", &["A", "B"]), &proposed);
    assert_eq!(
        named(&report),
        [(
            "Job".to_owned(),
            "migrate-<generated: test.yaml document 3>".to_owned(),
            Some("B".to_owned())
        )],
        "{report:?}"
    );
    assert_eq!(report.workloads_checked, 2);
}

#[test]
fn a_name_wins_over_generate_name_and_neither_is_still_an_input_error() {
    let both = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  generateName: web-\nspec:\n  containers:\n    - name: a\n      image: a\n";
    let loaded = load(both);
    assert_eq!(loaded.workloads[0].id.name, "web");
    for nameless in [
        "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec:\n  containers:\n    - name: a\n      image: a\n",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: \"\"\nspec:\n  containers:\n    - name: a\n      image: a\n",
    ] {
        assert!(
            load_err(nameless).to_string().contains("metadata.name"),
            "{nameless}"
        );
    }
}

#[test]
fn a_generated_config_object_is_no_object_anything_reads() {
    // The API server names it when it creates it, so no manifest can name
    // it: a reference to its prefix is a reference to an object that does
    // not exist, and the inventory has no entry for it.
    let scratch =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: cfg\ndata:\n  B: v\n";
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: \"\"\n  generateName: s-\ndata:\n  B: dg==\n";
    let proposed = docs(&[&cm("cfg", &["A"]), scratch, secret]);
    assert_eq!(inventory(&load(&proposed)).objects.len(), 1);
    let report = run(
        &cm("cfg", &["A", "B"]),
        &docs(&[&proposed, &generated_job("m-", "B")]),
    );
    assert_eq!(
        codes(&report),
        [("missing-key".to_owned(), Some("B".to_owned()))]
    );
}

#[test]
fn a_generated_allow_listed_workload_is_read() {
    // The canonical Argo Workflow is made with `generateName`.
    let workflow = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata:\n  generateName: hello-\nspec:\n  entrypoint: main\n  templates:\n    - name: main\n      container:\n        image: busybox\n        env:\n          - name: K\n            valueFrom:\n              secretKeyRef: {name: creds, key: token}\n";
    let options = LoadOptions {
        allow_kinds: ["Workflow".to_owned()].into(),
        ..LoadOptions::default()
    };
    let loaded = load_str(workflow, "wf.yaml", &options).unwrap();
    assert_eq!(loaded.workloads.len(), 1);
    assert_eq!(
        loaded.workloads[0].id.name,
        "hello-<generated: wf.yaml document 1>"
    );
    assert_eq!(loaded.workloads[0].references.len(), 1);
}
