//! A real install checked against the live dump it leaves: Argo CD's
//! `install.yaml` (tests/realworld/argo-cd), applied, then read back as
//! `kubectl get -o yaml` would show it, with the Secret its install writes
//! at run time (`argocd-redis`, by the redis Deployment's `secret-init`
//! init container) that no manifest holds.

use ate_configguard::{CheckInput, Deletion, LoadOptions, Report, check, load_str};

const INSTALL: &str = include_str!("realworld/argo-cd/install.yaml");

/// Every document of `INSTALL` as the API server returns it after a
/// server-side apply: a `uid`, a `resourceVersion` and an `Apply` entry
/// in `managedFields`; plus the `argocd-redis` Secret, written by
/// `written_by` (a `managedFields` entry).
fn live_dump(written_by: &str) -> String {
    let mut live = String::new();
    for (i, doc) in INSTALL.split("\n---\n").enumerate() {
        let doc = doc.replacen(
            "\nmetadata:\n",
            &format!(
                "\nmetadata:\n  uid: live-{i}\n  resourceVersion: \"{i}\"\n  managedFields:\n  \
                 - {{manager: kubectl, operation: Apply}}\n"
            ),
            1,
        );
        assert!(doc.contains("uid: live-"), "document {i} has no metadata");
        live.push_str(&doc);
        live.push_str("\n---\n");
    }
    live.push_str(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-redis\n  uid: live-redis\n  \
         resourceVersion: \"99\"\n  managedFields:\n  - {written_by}\ntype: Opaque\n\
         data:\n  auth: cGFzc3dvcmQ=\n"
    ));
    live
}

fn prune(current: &str) -> Report {
    let options = LoadOptions::default();
    check(&CheckInput {
        current: load_str(current, "live.yaml", &options).unwrap(),
        proposed: load_str(INSTALL, "install.yaml", &options).unwrap(),
        inventory: None,
        deletion: Deletion::Prune,
        delete: Vec::new(),
        retired: Vec::new(),
    })
    .unwrap()
}

#[test]
fn a_live_install_checked_against_its_manifests_with_prune_is_safe() {
    // Written by the init container (an Update, not an apply): the next
    // `kubectl apply --prune` of install.yaml leaves it, and the four
    // workloads that read it keep it.
    let report = prune(&live_dump("{manager: argocd, operation: Update}"));
    assert!(report.is_safe(), "{}", report.to_text());
    assert!(report.failures.is_empty(), "{:?}", report.failures);
}

#[test]
fn the_same_secret_applied_by_the_applier_is_pruned_and_breaks_its_readers() {
    // Had the applier applied it, a prune would delete it: every reader
    // of `argocd-redis` fails, naming it.
    let report = prune(&live_dump("{manager: kubectl, operation: Apply}"));
    assert!(!report.is_safe(), "{}", report.to_text());
    let named: Vec<_> = report
        .failures
        .iter()
        .filter_map(|f| f.object.as_ref())
        .map(|o| o.name.as_str())
        .collect();
    assert!(
        !named.is_empty() && named.iter().all(|n| *n == "argocd-redis"),
        "{named:?}"
    );
}
