//! The inventory JSON the previous release wrote, read by this build:
//! `tests/compat/0.2.0/inventory-argo-cd.json` is what release 0.2.0
//! (the commit `compat/baseline` names) printed for
//! `ate-configguard inventory tests/realworld/argo-cd/`. This build must
//! read it (an inventory is kept as the `--inventory` of a later check)
//! and print the same bytes for the same manifests, so 0.2.0 reads what
//! this build writes.

use ate_configguard::manifest::{Inventory, inventory};
use ate_configguard::{LoadOptions, load_paths};

const FIXTURE: &str = include_str!("compat/0.2.0/inventory-argo-cd.json");

#[test]
fn an_inventory_release_0_2_0_wrote_reads_and_is_written_the_same() {
    let read = Inventory::from_json(FIXTURE, "inventory-argo-cd.json").unwrap();
    assert_eq!(read.version, Inventory::VERSION);
    assert!(read.objects.len() > 5, "{} objects", read.objects.len());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/realworld/argo-cd/");
    let manifests = load_paths(&[dir.into()], &LoadOptions::default()).unwrap();
    let written = serde_json::to_string_pretty(&inventory(&manifests)).unwrap() + "\n";
    assert_eq!(
        written, FIXTURE,
        "this build's inventory of the same manifests differs from 0.2.0's"
    );
}
