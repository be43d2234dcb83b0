//! Property tests: the ledger on every store against the reference model
//! (PostgreSQL with the `postgres` feature).

use ate_ledger::testing::{Driver, Model, is_final, key, ops};
use ate_ledger::{Config, Ledger, MemoryStore, RedbStore, clock::ManualClock, store::Store};
use proptest::prelude::*;

fn check<S: Store>(store: S, seq: &[ate_ledger::testing::Op]) -> Result<(), TestCaseError> {
    check_replicas(vec![store], seq, &[])
}

/// The model against ledgers on `stores` (one store seen by several
/// ledgers: replicas), the `i`th operation sent to the ledger `on[i]`
/// names (the first when `on` runs out). Each ledger remembers what it
/// wrote last and writes its next transition at once; another ledger's
/// write in between must send it back to a read, so the answers are the
/// one ledger's.
fn check_replicas<S: Store>(
    stores: Vec<S>,
    seq: &[ate_ledger::testing::Op],
    on: &[usize],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::default();
    let ledgers: Vec<_> = stores
        .into_iter()
        .map(|store| {
            Ledger::with_clock(store, Config::default(), clock.clone()).expect("a valid config")
        })
        .collect();
    let ledger = &ledgers[0];
    let mut driver = Driver::new(clock);
    let mut model = Model::new(Config::default());
    let mut was_final = [false; 3];
    for (i, op) in seq.iter().enumerate() {
        let on = &ledgers[on.get(i).copied().unwrap_or(0) % ledgers.len()];
        let got = driver.apply(on, op);
        let want = model.apply(op);
        prop_assert_eq!(got, want, "{:?}", op);
        for k in 0..3u8 {
            let record = ledger.get(&key(k)).unwrap();
            prop_assert_eq!(record.as_ref().map(|r| r.state.name()), model.state(k));
            if let Some(r) = record {
                prop_assert_eq!(r.tries.len() as u32, model.tries(k));
                prop_assert!(r.check_invariants().is_ok(), "{:?}", r.check_invariants());
                if r.ever_dispatched() {
                    prop_assert!(!r.is_revivable(), "a dispatched key is revivable");
                }
                if was_final[k as usize] {
                    prop_assert!(is_final(&r.state), "a final state changed");
                }
                was_final[k as usize] = is_final(&r.state);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn memory_store_matches_the_model(seq in ops(50)) {
        check(MemoryStore::new(), &seq)?;
    }

    #[test]
    fn three_replicas_on_one_store_match_the_model(
        seq in ops(50),
        on in proptest::collection::vec(0..3usize, 50),
    ) {
        let store = std::sync::Arc::new(MemoryStore::new());
        check_replicas(vec![store.clone(), store.clone(), store], &seq, &on)?;
    }
}

proptest! {
    // Each redb transition fsyncs: fewer cases (unless PROPTEST_CASES,
    // which proptest lets override this, says otherwise).
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn redb_store_matches_the_model(seq in ops(40)) {
        let dir = tempfile::tempdir().unwrap();
        check(RedbStore::open(dir.path().join("ledger.redb")).unwrap(), &seq)?;
    }
}

#[cfg(feature = "postgres")]
proptest! {
    // A database per case on a real server: fewer cases (unless
    // PROPTEST_CASES, which proptest lets override this, says otherwise).
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn postgres_store_matches_the_model(seq in ops(40)) {
        // Dropped after the case: PROPTEST_CASES=3000 made 3,000 databases
        // of about 8 MB each, and filled a disk, when they were kept.
        let db = ate_ledger::testing::TestDatabase::new();
        // Two connections: one caller's calls land on either, and each must
        // see what the one before it committed.
        let two = std::num::NonZeroUsize::new(2).unwrap();
        check(ate_ledger::PgStore::connect_pooled(db.url(), two).unwrap(), &seq)?;
    }
}
