//! The redb store: durability across reopen, schema versions, corruption,
//! and races between threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ate_ledger::{
    Begin, Close, Error, Fingerprint, Key, Ledger, MemoryStore, RedbStore, State, TryOutcome,
    store::Store,
};

fn fp() -> Fingerprint {
    Fingerprint("f".into())
}

#[test]
fn acknowledged_transitions_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let key = Key::new("t", "a");
    {
        let ledger = Ledger::new(RedbStore::open(&path).unwrap());
        let Begin::Started(l) = ledger.begin(&key, &fp(), "w").unwrap() else {
            panic!()
        };
        ledger.mark_dispatched(&l).unwrap();
        ledger.close(&l, Close::Succeeded("out".into())).unwrap();
    }
    let ledger = Ledger::new(RedbStore::open(&path).unwrap());
    match ledger.begin(&key, &fp(), "w").unwrap() {
        Begin::Replay(r) => assert_eq!(
            r.state,
            State::Succeeded {
                outcome: "out".into()
            }
        ),
        Begin::Started(_) => panic!("a restart re-executed a recorded success"),
    }
}

#[test]
fn a_file_from_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    drop(RedbStore::open(&path).unwrap());
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut meta = tx
                .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
                .unwrap();
            meta.insert("schema_version", 99).unwrap();
        }
        tx.commit().unwrap();
    }
    let err = RedbStore::open(&path).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownSchema {
            found: 99,
            supported: RedbStore::SCHEMA_VERSION
        }
    );
}

#[test]
fn a_store_has_one_owner_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let first = RedbStore::open(&path).unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert_eq!(
        err,
        Error::AlreadyOpen {
            path: path.display().to_string()
        }
    );
    assert!(err.to_string().contains("already open"), "{err}");
    drop(first);
    RedbStore::open(&path).unwrap();
}

#[test]
fn a_file_it_may_not_create_is_a_storage_error_not_corruption() {
    let dir = tempfile::tempdir().unwrap();
    // A path under a regular file cannot be created.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let err = RedbStore::open(blocker.join("l.redb")).unwrap_err();
    assert!(matches!(err, Error::Storage(_)), "{err:?}");
}

#[test]
fn a_file_that_is_not_a_ledger_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    std::fs::write(&path, b"definitely not a redb file, just some bytes....").unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
}

#[test]
fn a_corrupt_record_is_an_error_never_another_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let key = Key::new("t", "a");
    let record = {
        let ledger = Ledger::new(RedbStore::open(&path).unwrap());
        let _ = ledger.begin(&key, &fp(), "w").unwrap();
        ledger.get(&key).unwrap().unwrap()
    };
    // Well-formed records can be corrupt too: one under another key's name,
    // and one that breaks an invariant (in flight with its only try closed,
    // which no transition writes).
    let mut elsewhere = record.clone();
    elsewhere.key = Key::new("t", "b");
    let mut broken = record.clone();
    broken.tries[0].closed = Some((record.created_at, TryOutcome::PreProviderFailure));
    let stored = [
        b"{\"garbage\":true}".to_vec(),
        serde_json::to_vec(&elsewhere).unwrap(),
        serde_json::to_vec(&broken).unwrap(),
    ];
    for bytes in stored {
        {
            let db = redb::Database::create(&path).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx
                    .open_table(redb::TableDefinition::<&str, &[u8]>::new("records"))
                    .unwrap();
                t.insert(key.encode().as_str(), bytes.as_slice()).unwrap();
            }
            tx.commit().unwrap();
        }
        let text = String::from_utf8_lossy(&bytes);
        let store = RedbStore::open(&path).unwrap();
        assert!(
            matches!(store.get(&key), Err(Error::Corrupt { .. })),
            "{text}"
        );
        assert!(matches!(store.open(), Err(Error::Corrupt { .. })), "{text}");
    }
}

fn race<S: Store + 'static>(store: S) {
    let ledger = Arc::new(Ledger::new(store));
    for round in 0..20 {
        let key = Key::new("race", format!("k{round}"));
        let started = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for w in 0..4 {
                let (ledger, key, started) = (&ledger, &key, &started);
                s.spawn(move || {
                    if let Ok(Begin::Started(_)) = ledger.begin(key, &fp(), &format!("w{w}")) {
                        started.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(
            started.load(Ordering::SeqCst),
            1,
            "begin race round {round}"
        );
        // Close pre-provider, then race revives.
        let r = ledger.get(&key).unwrap().unwrap();
        let lease = r.lease.clone().unwrap();
        ledger
            .close(&lease, Close::PreProvider("x".into()))
            .unwrap();
        let revived = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for w in 0..4 {
                let (ledger, key, revived) = (&ledger, &key, &revived);
                s.spawn(move || {
                    if ledger.revive(key, &fp(), &format!("w{w}")).is_ok() {
                        revived.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(
            revived.load(Ordering::SeqCst),
            1,
            "revive race round {round}"
        );
        let r = ledger.get(&key).unwrap().unwrap();
        assert_eq!(r.tries.len(), 2);
        r.check_invariants().unwrap();
    }
}

#[test]
fn racing_begin_and_revive_have_exactly_one_winner_in_memory() {
    race(MemoryStore::new());
}

#[test]
fn racing_begin_and_revive_have_exactly_one_winner_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    race(RedbStore::open(dir.path().join("l.redb")).unwrap());
}

#[test]
fn purge_on_redb_deletes_exactly_the_ended_records_past_retention_in_batches() {
    use ate_ledger::{Config, clock::ManualClock};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let config = Config::default();
    let ledger = Ledger::with_clock(
        RedbStore::open(dir.path().join("l.redb")).unwrap(),
        config,
        clock.clone(),
    )
    .expect("a valid config");
    let start = |key: &Key| match ledger.begin(key, &fp(), "w").unwrap() {
        Begin::Started(lease) => lease,
        Begin::Replay(r) => panic!("replayed {:?}", r.state),
    };
    // More ended records than one delete batch (1,000) holds.
    let old: Vec<Key> = (0..1_100)
        .map(|i| Key::new("t", format!("old-{i}")))
        .collect();
    for key in &old {
        let lease = start(key);
        ledger
            .close(&lease, Close::PreProvider("no credentials".into()))
            .unwrap();
    }
    let open = Key::new("t", "open");
    let _lease = start(&open);
    clock.advance(config.retention + std::time::Duration::from_secs(1));
    let recent = Key::new("t", "recent");
    let lease = start(&recent);
    ledger
        .close(&lease, Close::PreProvider("no credentials".into()))
        .unwrap();

    assert_eq!(ledger.purge().unwrap(), old.len());
    assert!(old.iter().all(|k| ledger.get(k).unwrap().is_none()));
    assert!(
        ledger.get(&open).unwrap().is_some(),
        "an open attempt is never purged"
    );
    assert!(
        ledger.get(&recent).unwrap().is_some(),
        "inside the retention"
    );
    assert_eq!(ledger.purge().unwrap(), 0);
}

#[test]
fn a_lease_that_never_expires_is_stored_and_read_back_on_redb() {
    use ate_ledger::Config;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let key = Key::new("t", "forever");
    let config = Config {
        lease_ttl: std::time::Duration::MAX,
        ..Config::default()
    };
    let expires_at = {
        let ledger = Ledger::with_clock(
            RedbStore::open(&path).unwrap(),
            config,
            ate_ledger::clock::SystemClock,
        )
        .expect("a valid config");
        let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
            panic!("new key")
        };
        lease.expires_at
    };
    assert_eq!(expires_at, chrono::DateTime::<chrono::Utc>::MAX_UTC);
    // The last time chrono can hold (year 262,142) survives the record's
    // encoding: the reopened store reads the attempt, not a corrupt record.
    let ledger = Ledger::new(RedbStore::open(&path).unwrap());
    let record = ledger.get(&key).unwrap().unwrap();
    assert_eq!(record.lease.unwrap().expires_at, expires_at);
    assert_eq!(record.state, State::InFlight);
}

#[test]
fn a_redb_store_debugs_as_itself_without_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path().join("l.redb")).unwrap();
    let ledger = Ledger::new(store);
    let Begin::Started(_) = ledger
        .begin(&Key::new("t", "secret-id"), &fp(), "w")
        .unwrap()
    else {
        panic!("a new key starts")
    };
    let shown = format!("{:?}", ledger.store());
    // Counts of its commits and writes, never a key or a record.
    assert_eq!(shown, "RedbStore { commits: 1, writes: 1, .. }");
    assert!(!shown.contains("secret-id"));
}

#[test]
fn a_lease_from_before_a_purge_never_drives_the_key_begun_again() {
    let dir = tempfile::tempdir().unwrap();
    ate_ledger::testing::purged_key_fences_old_leases(
        RedbStore::open(dir.path().join("l.redb")).unwrap(),
    );
}
