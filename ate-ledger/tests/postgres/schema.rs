//! Corrupt records, schema versions, and the schema set up by replicas starting at once.

use super::*;

#[test]
fn a_corrupt_record_is_an_error_never_another_state() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let store = PgStore::connect(&url).unwrap();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let (a, b) = (Key::new("t", "a"), Key::new("t", "b"));
    let _ = ledger.begin(&a, &fp(), "w").unwrap();
    let _ = ledger.begin(&b, &fp(), "w").unwrap();
    sql(
        &url,
        "UPDATE ate_ledger_records SET record = '{\"garbage\":true}' WHERE id = 'a'",
    );
    assert!(matches!(store.get(&a), Err(Error::Corrupt { .. })));
    assert!(matches!(store.open(), Err(Error::Corrupt { .. })));
    // Columns that disagree with the record are corruption too: a version
    // the record does not carry would let a stale writer through.
    sql(
        &url,
        "UPDATE ate_ledger_records SET version = version + 5 WHERE id = 'b'",
    );
    assert!(matches!(store.get(&b), Err(Error::Corrupt { .. })));
    // So is an `open` column that disagrees: a closed row kept as open
    // would never be purged, an open one marked closed could be.
    let d = Key::new("t", "d");
    let _ = ledger.begin(&d, &fp(), "w").unwrap();
    sql(
        &url,
        "UPDATE ate_ledger_records SET open = false WHERE id = 'd'",
    );
    assert!(matches!(store.get(&d), Err(Error::Corrupt { .. })));
    // A record stored under another key.
    sql(
        &url,
        "UPDATE ate_ledger_records SET version = version - 5, id = 'c' WHERE id = 'b'",
    );
    assert!(matches!(
        store.get(&Key::new("t", "c")),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn a_database_from_a_newer_schema_is_refused() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    drop(PgStore::connect(&url).unwrap());
    sql(
        &url,
        "UPDATE ate_ledger_meta SET value = 99 WHERE name = 'schema_version'",
    );
    assert_eq!(
        PgStore::connect(&url).err(),
        Some(Error::UnknownSchema {
            found: 99,
            supported: PgStore::SCHEMA_VERSION,
        })
    );
}

#[test]
fn replicas_starting_at_once_all_set_up_the_schema() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ok = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                PgStore::connect(&url).unwrap();
                ok.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    assert_eq!(ok.load(Ordering::SeqCst), 8);
}

#[test]
fn a_table_from_before_the_incarnation_column_gets_it_filled_on_connect() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let key = Key::new("t", "old");
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("a new key starts")
    };
    // The table as the build before the column left it.
    sql(
        &url,
        "ALTER TABLE ate_ledger_records DROP COLUMN incarnation;
         DELETE FROM ate_ledger_meta WHERE name = 'incarnation_column';",
    );
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let column: i64 = c
        .query_one("SELECT incarnation FROM ate_ledger_records", &[])
        .unwrap()
        .get(0);
    assert_eq!(column, i64::from_ne_bytes(lease.incarnation.to_ne_bytes()));
    // The lease still drives its attempt; a lease of another incarnation
    // does not.
    let mut other = lease.clone();
    other.incarnation = lease.incarnation.wrapping_add(1);
    assert!(matches!(
        ledger.mark_dispatched(&other),
        Err(Error::StaleLease { .. })
    ));
    ledger.mark_dispatched(&lease).unwrap();
    ledger.close(&lease, Close::Succeeded("ok".into())).unwrap();
}

#[test]
fn one_unreadable_record_never_stops_the_migration() {
    // jsonb refuses \u0000, which the crate writes for a NUL in a reason,
    // and a torn row: the backfill cast each record, so connect failed and
    // the upgrade could not roll out.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let nul = Key::new("t", "nul");
    let Begin::Started(lease) = ledger.begin(&nul, &fp(), "w").unwrap() else {
        panic!("a new key starts")
    };
    ledger
        .close(
            &lease,
            Close::PreProvider("a reason with a \0 in it".into()),
        )
        .unwrap();
    sql(
        &url,
        "ALTER TABLE ate_ledger_records DROP COLUMN incarnation;
         DELETE FROM ate_ledger_meta WHERE name = 'incarnation_column';
         INSERT INTO ate_ledger_records (scope, id, version, open, ended_at, record)
         VALUES ('t', 'torn', 1, true, NULL, '{\"key\":{\"scope\":\"t\",\"id\":\"torn\"},\"fing');",
    );
    let store = PgStore::connect(&url).expect("the migration stopped on one row");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let filled: Option<i64> = c
        .query_one(
            "SELECT incarnation FROM ate_ledger_records WHERE id = 'nul'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        filled,
        Some(i64::from_ne_bytes(lease.incarnation.to_ne_bytes()))
    );
    let torn: Option<i64> = c
        .query_one(
            "SELECT incarnation FROM ate_ledger_records WHERE id = 'torn'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(torn, None, "skipped, not guessed");
    // The NUL record still reads and replays; the torn one is corrupt.
    let record = store.get(&nul).unwrap().unwrap();
    assert!(record.is_revivable());
    assert!(matches!(
        store.get(&Key::new("t", "torn")),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn a_row_an_older_build_wrote_still_checks_the_incarnation() {
    // An older build inserts rows without the column. The write accepted
    // any incarnation where it was NULL, so a writer of another
    // incarnation replaced the record where every other store refuses.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let key = Key::new("t", "older");
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("a new key starts")
    };
    sql(
        &url,
        "UPDATE ate_ledger_records SET incarnation = NULL WHERE id = 'older'",
    );
    // At the store: the same key and version, another incarnation (the
    // key purged and begun again under it, say).
    let store = PgStore::connect(&url).unwrap();
    let stored = store.get(&key).unwrap().unwrap();
    let mut other = stored.clone();
    other.incarnation = stored.incarnation.wrapping_add(1);
    other.version = stored.version + 1;
    assert!(matches!(
        store.put(&other, Some(stored.version)),
        Err(Error::VersionConflict { .. })
    ));
    assert_eq!(store.get(&key).unwrap().unwrap(), stored, "replaced");
    // The record's own incarnation is believed, and the column filled.
    ledger.mark_dispatched(&lease).unwrap();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let filled: Option<i64> = c
        .query_one(
            "SELECT incarnation FROM ate_ledger_records WHERE id = 'older'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        filled,
        Some(i64::from_ne_bytes(lease.incarnation.to_ne_bytes()))
    );
}
