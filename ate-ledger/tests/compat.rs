//! The formats the previous release wrote, read by this build: the bytes
//! in `tests/compat/0.2.0/` were written by release 0.2.0 (the commit
//! `compat/baseline` names), its example service on a redb data dir and
//! on PostgreSQL, one key per way a call ends. A change that cannot read
//! them, or that writes a record 0.2.0 would read differently, fails
//! here, in `cargo test`; the version-skew test in `examples/` runs the
//! two builds side by side.
#![cfg(all(feature = "redb", feature = "postgres"))]

use ate_ledger::store::Store;
use ate_ledger::testing::TestDatabase;
use ate_ledger::{Key, PgStore, RedbStore};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat/0.2.0");

/// The keys 0.2.0 wrote (the example scopes keys by caller) and the
/// state each ended in.
const ENDED: [(&str, &str); 4] = [
    ("fx-success", "succeeded"),
    ("fx-rejected", "failed_at_provider"),
    ("fx-credential_error", "failed_pre_provider"),
    ("fx-timeout", "provider_unavailable"),
];

fn key(id: &str) -> Key {
    Key::new("ip:127.0.0.1", id)
}

/// A redb file 0.2.0 wrote (schema 1) opens, every record reads as it
/// ended, and this build writes to it and reads that back after a reopen.
#[test]
fn a_redb_file_release_0_2_0_wrote_opens_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    std::fs::copy(format!("{DIR}/ledger.redb"), &path).unwrap();
    let store = RedbStore::open(&path).unwrap();
    for (id, state) in ENDED {
        let record = store
            .get(&key(id))
            .unwrap()
            .unwrap_or_else(|| panic!("{id} is missing"));
        assert_eq!(record.state.name(), state, "{id}");
        assert_eq!(record.tries.len(), 1, "{id}");
        assert_eq!(record.key, key(id));
    }
    // This build's write lands beside them and survives a reopen.
    let mut copy = store.get(&key("fx-success")).unwrap().unwrap();
    copy.key = key("fx-written-by-current");
    store.put(&copy, None).unwrap();
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    assert!(store.get(&key("fx-written-by-current")).unwrap().is_some());
    assert!(store.get(&key("fx-success")).unwrap().is_some());
}

/// PostgreSQL tables 0.2.0 made and filled: this build connects (its
/// migration runs over them), reads every record as it ended, and
/// encodes each one to exactly the text 0.2.0 stored, so 0.2.0 reads what
/// this build writes.
#[test]
fn postgres_tables_release_0_2_0_wrote_migrate_and_read() {
    let db = TestDatabase::new();
    let dump = std::fs::read_to_string(format!("{DIR}/postgres.sql")).unwrap();
    // The dump's session (it empties search_path) loads the tables; the
    // reads below use a session of their own.
    postgres::Client::connect(db.url(), postgres::NoTls)
        .unwrap()
        .batch_execute(&dump)
        .unwrap();
    let mut c = postgres::Client::connect(db.url(), postgres::NoTls).unwrap();
    let store = PgStore::connect(db.url()).unwrap();
    for (id, state) in ENDED {
        let record = store
            .get(&key(id))
            .unwrap()
            .unwrap_or_else(|| panic!("{id} is missing"));
        assert_eq!(record.state.name(), state, "{id}");
        let stored: String = c
            .query_one(
                "SELECT record FROM ate_ledger_records WHERE id = $1",
                &[&id],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            serde_json::to_string(&record).unwrap(),
            stored,
            "{id}: this build encodes the record 0.2.0 stored differently"
        );
    }
    let schema: i64 = c
        .query_one(
            "SELECT value FROM ate_ledger_meta WHERE name = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(schema, 1, "the schema version is still the one 0.2.0 reads");
}
