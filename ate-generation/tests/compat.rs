//! The latch's serde form the previous release wrote, read by this build:
//! `tests/compat/0.2.0/latch.json` is `Latch::from_parts(7, 5)` as
//! release 0.2.0 (the commit `compat/baseline` names) serialized it. This
//! build reads it and writes the same bytes, so 0.2.0 reads what this
//! build stores.
#![cfg(feature = "serde")]

use ate_generation::Latch;

const FIXTURE: &str = include_str!("compat/0.2.0/latch.json");

#[test]
fn a_latch_release_0_2_0_wrote_reads_and_is_written_the_same() {
    let latch: Latch = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(latch, Latch::from_parts(7, 5).unwrap());
    assert_eq!(serde_json::to_string(&latch).unwrap(), FIXTURE.trim_end());
}
