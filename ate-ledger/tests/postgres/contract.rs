//! The store contract: conditional puts, open lists, purge in batches, key sizes.

use super::*;

#[test]
fn acknowledged_transitions_survive_a_new_connection() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let key = Key::new("t", "a");
    {
        let ledger = Ledger::new(PgStore::connect(&url).unwrap());
        let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
            panic!("a new key starts")
        };
        ledger.mark_dispatched(&lease).unwrap();
        ledger
            .close(&lease, Close::Succeeded("{\"id\":1}".into()))
            .unwrap();
    }
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    match ledger.begin(&key, &fp(), "w2").unwrap() {
        Begin::Replay(r) => {
            assert_eq!(r.state.name(), "succeeded");
            assert!(r.ever_dispatched());
        }
        Begin::Started(_) => panic!("a succeeded key must replay, never run again"),
    }
}

#[test]
fn puts_are_conditional_on_the_version_and_say_what_is_stored() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let store = PgStore::connect(&url).unwrap();
    // A record as a ledger writes it, taken from one in memory.
    let key = Key::new("t", "v");
    let source = Ledger::new(ate_ledger::MemoryStore::new());
    let _ = source.begin(&key, &fp(), "w").unwrap();
    let mut record = source.get(&key).unwrap().unwrap();

    store.put(&record, None).unwrap();
    assert_eq!(store.get(&key).unwrap().as_ref(), Some(&record));
    // A second create, or a write from a stale version, writes nothing.
    let v = record.version;
    assert_eq!(
        store.put(&record, None),
        Err(Error::VersionConflict {
            key: key.to_string(),
            expected: None,
            found: Some(v),
        })
    );
    record.version = v + 1;
    assert_eq!(
        store.put(&record, Some(v + 7)),
        Err(Error::VersionConflict {
            key: key.to_string(),
            expected: Some(v + 7),
            found: Some(v),
        })
    );
    assert_eq!(store.get(&key).unwrap().unwrap().version, v);
    store.put(&record, Some(v)).unwrap();
    assert_eq!(store.get(&key).unwrap().unwrap().version, v + 1);
    // An update of a key with no record says so.
    let other = Key::new("t", "none");
    let mut missing = record.clone();
    missing.key = other.clone();
    assert_eq!(
        store.put(&missing, Some(1)),
        Err(Error::VersionConflict {
            key: other.to_string(),
            expected: Some(1),
            found: None,
        })
    );
    assert_eq!(store.get(&other).unwrap(), None);
}

#[test]
fn open_lists_in_flight_attempts_and_purge_never_deletes_them() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let ledger = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        Config::default(),
        clock.clone(),
    )
    .expect("a valid config");
    let (open, done) = (Key::new("t", "open"), Key::new("t", "done"));
    let _ = ledger.begin(&open, &fp(), "w").unwrap();
    let Begin::Started(lease) = ledger.begin(&done, &fp(), "w").unwrap() else {
        panic!("new key")
    };
    ledger
        .close(&lease, Close::PreProvider("no credentials".into()))
        .unwrap();
    let store = PgStore::connect(&url).unwrap();
    let in_flight: Vec<Key> = store.open().unwrap().into_iter().map(|r| r.key).collect();
    assert_eq!(in_flight, vec![open.clone()]);
    // Past any retention: only the ended record goes.
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    assert_eq!(store.purge(Cutoff::Before(clock_now(&clock))).unwrap(), 1);
    assert!(store.get(&done).unwrap().is_none());
    assert!(store.get(&open).unwrap().is_some());
    assert_eq!(store.purge(Cutoff::Before(clock_now(&clock))).unwrap(), 0);
}

#[test]
fn purge_deletes_every_row_past_retention_in_batches_and_keeps_the_rest() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let store = PgStore::connect(&url).unwrap();
    // 2,500 ended rows past the cutoff (three delete statements), one
    // ended after it, one open. Purge reads no record, so '{}' will do.
    sql(
        &url,
        "INSERT INTO ate_ledger_records (scope, id, version, open, ended_at, record)
             SELECT 'old', g::text, 1, false,
                    TIMESTAMPTZ '2025-01-01 00:00:00+00' + g * INTERVAL '1 second', '{}'
             FROM generate_series(1, 2500) g;
         INSERT INTO ate_ledger_records (scope, id, version, open, ended_at, record) VALUES
             ('recent', 'a', 1, false, TIMESTAMPTZ '2026-06-01 00:00:00+00', '{}'),
             ('open', 'a', 1, true, NULL, '{}');",
    );
    let cutoff = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    assert_eq!(store.purge(Cutoff::Before(cutoff)).unwrap(), 2_500);
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let left: Vec<String> = c
        .query("SELECT scope FROM ate_ledger_records ORDER BY scope", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["open", "recent"]);
    assert_eq!(store.purge(Cutoff::Before(cutoff)).unwrap(), 0);
}

#[test]
fn a_retention_reaching_back_before_postgres_time_purges_nothing_and_fails_nothing() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    // 10,000 years: a cutoff chrono holds (8000 BC) but PostgreSQL's
    // `timestamptz` does not (it starts in 4714 BC).
    let config = Config {
        retention: Duration::from_secs(10_000 * 365 * 24 * 3600),
        ..Config::default()
    };
    let ledger = Ledger::with_clock(PgStore::connect(&url).unwrap(), config, clock.clone())
        .expect("a valid config");
    let key = Key::new("t", "done");
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("new key")
    };
    ledger
        .close(&lease, Close::PreProvider("no credentials".into()))
        .unwrap();
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    assert_eq!(ledger.purge().unwrap(), 0);
    assert!(ledger.get(&key).unwrap().is_some());
    // And the store itself, given such a cutoff.
    let cutoff = Utc.with_ymd_and_hms(-8000, 1, 1, 0, 0, 0).unwrap();
    assert_eq!(ledger.store().purge(Cutoff::Before(cutoff)).unwrap(), 0);
}

#[test]
fn more_connections_than_a_store_opens_is_an_error_naming_the_number() {
    // Checked before anything is connected or allocated: no server needed.
    let url = "host=/nonexistent user=nobody dbname=none";
    let too_many = PgStore::MAX_CONNECTIONS + 1;
    for n in [too_many, u32::MAX as usize, usize::MAX] {
        let err = PgStore::connect_pooled(url, std::num::NonZeroUsize::new(n).unwrap())
            .expect_err("a store of that many connections");
        assert!(
            matches!(&err, Error::Storage(m) if m.contains(&n.to_string()) && m.contains("at most 1024")),
            "{err}"
        );
    }
}

#[test]
fn a_key_of_max_bytes_that_does_not_compress_fits_the_index() {
    // PostgreSQL's B-tree entries hold at most 2,704 bytes; a key it cannot
    // compress shows whether Key::MAX_BYTES leaves room for the row's own
    // overhead (3,000 such bytes failed as a storage error).
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let id: String = (0..Key::MAX_BYTES - 1)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect();
    let key = Key::new("s", id);
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("new key");
    };
    ledger.mark_dispatched(&lease).unwrap();
    ledger.close(&lease, Close::Succeeded("{}".into())).unwrap();
    assert!(matches!(
        ledger.begin(&key, &fp(), "w").unwrap(),
        Begin::Replay(_)
    ));
}
