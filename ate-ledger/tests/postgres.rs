//! `PgStore` against a real PostgreSQL server (feature `postgres`):
//! the store contract, several replicas racing on one database, corruption
//! and schema checks, and a broken connection (the reference model runs on
//! it in `model.rs`).
//!
//! Each test gets its own database from
//! [`ate_ledger::testing::TestDatabase`], dropped as it ends: on `ATE_TEST_POSTGRES_URL` if
//! set, else on a throwaway server started from the machine's PostgreSQL
//! binaries. A machine with neither fails these tests with a message
//! saying so: they are never skipped.
#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ate_ledger::testing::TestDatabase;
use ate_ledger::{
    Begin, Close, Config, Error, Fingerprint, Key, Ledger, PgStore,
    clock::ManualClock,
    store::{Cutoff, Store},
};
use chrono::{TimeZone, Utc};

fn sql(url: &str, statement: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(statement).unwrap();
}

/// Ends every other session on `url`'s database (a failover, an idle
/// timeout, a restart).
fn end_every_session(url: &str) {
    let db = param(url, "dbname");
    sql(
        url,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND pid <> pg_backend_pid()"
        ),
    );
}

fn fp() -> Fingerprint {
    Fingerprint("f".into())
}

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

fn clock_now(clock: &ManualClock) -> chrono::DateTime<Utc> {
    use ate_ledger::clock::Clock;
    clock.now()
}

#[test]
fn replicas_racing_on_one_database_have_exactly_one_winner() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    // Four replicas: four ledgers, four connections, one database.
    let replicas: Vec<Ledger<PgStore>> = (0..4)
        .map(|_| Ledger::new(PgStore::connect(&url).unwrap()))
        .collect();
    exactly_one_winner(&replicas.iter().collect::<Vec<_>>());
}

#[test]
fn threads_racing_on_one_pooled_store_have_exactly_one_winner() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    // One replica, four request threads, four connections.
    let pooled = PgStore::connect_pooled(&url, std::num::NonZeroUsize::new(4).unwrap()).unwrap();
    let ledger = Ledger::new(pooled);
    exactly_one_winner(&[&ledger; 4]);
}

#[test]
fn a_pooled_store_serves_other_calls_while_one_waits_on_a_row_lock() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let pooled = PgStore::connect_pooled(&url, std::num::NonZeroUsize::new(2).unwrap()).unwrap();
    let ledger = Ledger::new(pooled);
    let a = Key::new("t", "a");
    let Begin::Started(lease) = ledger.begin(&a, &fp(), "w").unwrap() else {
        panic!("new key")
    };
    // Another session holds key a's row: closing it waits on the lock.
    let mut holder = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM ate_ledger_records WHERE scope = 't' AND id = 'a' FOR UPDATE",
        &[],
    )
    .unwrap();
    std::thread::scope(|s| {
        let closing = s.spawn(|| ledger.close(&lease, Close::PreProvider("x".into())));
        let mut watcher = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while watcher
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            assert!(
                Instant::now() < deadline,
                "the close never reached the lock"
            );
            std::thread::yield_now();
        }
        // The other connection still serves: a new key begins at once.
        let (done, answer) = std::sync::mpsc::channel();
        let ledger = &ledger;
        s.spawn(move || {
            let b = Key::new("t", "b");
            let _ = done.send(
                ledger
                    .begin(&b, &fp(), "w")
                    .map(|b| matches!(b, Begin::Started(_))),
            );
        });
        let began = answer.recv_timeout(Duration::from_secs(10));
        tx.commit().unwrap();
        assert_eq!(
            began.expect("begin waited behind the locked call"),
            Ok(true)
        );
        assert_eq!(
            closing.join().unwrap().unwrap().state.name(),
            "failed_pre_provider"
        );
    });
}

/// Ten rounds: every ledger begins one key at once (one starts), then
/// every ledger revives it at once (one revives).
fn exactly_one_winner(replicas: &[&Ledger<PgStore>]) {
    for round in 0..10 {
        let key = Key::new("race", format!("k{round}"));
        let started = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (w, ledger) in replicas.iter().enumerate() {
                let (key, started) = (&key, &started);
                s.spawn(move || match ledger.begin(key, &fp(), &format!("w{w}")) {
                    Ok(Begin::Started(_)) => {
                        started.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Begin::Replay(r)) => panic!("nothing ended yet: {r:?}"),
                    Err(Error::Conflict { .. }) => {}
                    Err(e) => panic!("replica {w}: {e}"),
                });
            }
        });
        assert_eq!(started.load(Ordering::SeqCst), 1, "begin race {round}");
        let lease = replicas[0].get(&key).unwrap().unwrap().lease.unwrap();
        replicas[0]
            .close(&lease, Close::PreProvider("x".into()))
            .unwrap();
        let revived = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (w, ledger) in replicas.iter().enumerate() {
                let (key, revived) = (&key, &revived);
                s.spawn(move || {
                    if ledger.revive(key, &fp(), &format!("w{w}")).is_ok() {
                        revived.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(revived.load(Ordering::SeqCst), 1, "revive race {round}");
        let r = replicas[3].get(&key).unwrap().unwrap();
        assert_eq!(r.tries.len(), 2);
        r.check_invariants().unwrap();
    }
}

#[test]
fn a_replica_whose_lease_expired_cannot_close_after_another_took_over() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let a = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        Config::default(),
        clock.clone(),
    )
    .expect("a valid config");
    let b = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        Config::default(),
        clock.clone(),
    )
    .expect("a valid config");
    let key = Key::new("t", "lease");
    let Begin::Started(old) = a.begin(&key, &fp(), "a").unwrap() else {
        panic!("new key")
    };
    assert!(matches!(
        b.begin(&key, &fp(), "b"),
        Err(Error::Conflict { .. })
    ));
    clock.advance(Config::default().lease_ttl + Duration::from_secs(1));
    // B recovers the expired attempt (A is presumed gone): not dispatched,
    // so a pre-provider failure, revivable.
    assert_eq!(b.recover().unwrap().len(), 1);
    assert!(b.get(&key).unwrap().unwrap().is_revivable());
    assert!(matches!(
        a.close(&old, Close::Succeeded("late".into())),
        Err(Error::StaleLease { .. })
    ));
    assert_eq!(
        b.get(&key).unwrap().unwrap().state.name(),
        "failed_pre_provider"
    );
}

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
fn a_broken_connection_is_reopened_on_the_next_call() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let key = Key::new("t", "conn");
    let _ = ledger.begin(&key, &fp(), "w").unwrap();
    // The server ends every other session on this database (a failover,
    // an idle timeout, a restart).
    end_every_session(&url);
    // The call that finds the connection dead fails as a storage error
    // (nothing is retried behind the caller's back)...
    let first = ledger.get(&key);
    assert!(
        matches!(first, Err(Error::Storage(_)) | Ok(Some(_))),
        "{first:?}"
    );
    // ...and the next one reconnects.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ledger.get(&key) {
            Ok(Some(r)) => {
                assert_eq!(r.key, key);
                break;
            }
            other if Instant::now() < deadline => {
                let _ = other;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => panic!("no reconnect: {other:?}"),
        }
    }
}

#[test]
fn after_a_failover_a_pooled_store_fails_one_call_not_one_per_connection() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let three = std::num::NonZeroUsize::new(3).unwrap();
    let ledger = Ledger::new(PgStore::connect_pooled(&url, three).unwrap());
    let key = Key::new("t", "conn");
    let _ = ledger.begin(&key, &fp(), "w").unwrap();
    // Make sure all three connections have served (calls rotate among
    // them), then end every session on the database.
    for _ in 0..6 {
        ledger.get(&key).unwrap();
    }
    end_every_session(&url);
    // The connection that finds itself dead fails its call; the others
    // then check theirs before using them.
    let failed = (0..9).filter(|_| ledger.get(&key).is_err()).count();
    assert!(failed <= 1, "{failed} calls failed after the failover");
}

#[test]
fn a_pooled_store_checks_its_connections_only_after_one_broke() {
    // Checking a connection before a call is a round trip to the server
    // (an empty query): the store makes it only once another of its
    // connections found itself broken, never before every call.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let front = ping_counter(&url);
    let three = std::num::NonZeroUsize::new(3).unwrap();
    let plain = format!(
        "host=127.0.0.1 port={} user={} dbname={}",
        front.port,
        param(&url, "user"),
        param(&url, "dbname")
    );
    let ledger = Ledger::new(PgStore::connect_pooled(&plain, three).unwrap());
    let key = Key::new("t", "pings");
    let _ = ledger.begin(&key, &fp(), "w").unwrap();
    for _ in 0..9 {
        ledger.get(&key).unwrap();
    }
    assert_eq!(front.pings(), 0, "a ping while no connection had broken");
    end_every_session(&url);
    let failed = (0..9).filter(|_| ledger.get(&key).is_err()).count();
    assert!(failed <= 1, "{failed} calls failed after the failover");
    // Every connection is open again: no more checks.
    let before = front.pings();
    for _ in 0..9 {
        ledger.get(&key).unwrap();
    }
    assert_eq!(
        front.pings(),
        before,
        "pings once every connection was reopened"
    );
}

#[tokio::test]
async fn a_store_works_when_called_from_inside_an_async_runtime() {
    // The `postgres` client drives a runtime of its own on every call, which
    // panics on a thread already running one: the store must not expose
    // that to an async service that connects at startup or calls it from a
    // handler.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = Ledger::new(PgStore::connect(&url).unwrap());
    let key = Key::new("t", "async");
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("new key")
    };
    ledger.mark_dispatched(&lease).unwrap();
    ledger.close(&lease, Close::Succeeded("ok".into())).unwrap();
    assert_eq!(ledger.get(&key).unwrap().unwrap().state.name(), "succeeded");
}

#[test]
fn the_documented_timeouts_are_accepted_and_bound_a_statement() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let bounded =
        format!("{url} connect_timeout=5 tcp_user_timeout=10 options='-c statement_timeout=5000'");
    let ledger = Ledger::new(PgStore::connect(&bounded).unwrap());
    let _ = ledger
        .begin(&Key::new("t", "timeouts"), &fp(), "w")
        .unwrap();
    // The statement timeout reached the server: the session reports it.
    let mut c = postgres::Client::connect(&bounded, postgres::NoTls).unwrap();
    let timeout: String = c.query_one("SHOW statement_timeout", &[]).unwrap().get(0);
    assert_eq!(timeout, "5s");
}

#[test]
fn a_bad_connection_string_is_a_storage_error_naming_it() {
    let err = PgStore::connect("host=/nonexistent port=notaport").unwrap_err();
    assert!(
        matches!(&err, Error::Storage(m) if m.contains("connection string")),
        "{err}"
    );
    let db = TestDatabase::new();
    let debug = format!(
        "{:?}",
        PgStore::connect(&format!("{} password=hunter2", db.url())).unwrap()
    );
    assert!(!debug.contains("hunter2"), "{debug}");
}

#[test]
fn storage_errors_say_what_the_server_or_the_connection_said() {
    // `postgres::Error` displays only its kind ("db error", "error
    // connecting to server"); the reason is its source.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let missing = format!("{url}_missing");
    let err = PgStore::connect(&missing).unwrap_err().to_string();
    assert!(
        err.contains("db error") && err.contains("does not exist"),
        "{err}"
    );
    let err = PgStore::connect("host=127.0.0.1 port=1 user=u dbname=d connect_timeout=5")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("error connecting to server") && err.contains("refused"),
        "{err}"
    );
    let err = PgStore::connect("host=/tmp port=notaport")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("invalid connection string") && err.contains("port"),
        "{err}"
    );
}

/// Waits (up to 10 s) for a call on `key` to succeed again after the
/// server ended every session: one call may fail, the next reconnects.
fn reconnected(ledger: &Ledger<PgStore>, key: &Key) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while ledger.get(key).is_err() {
        assert!(Instant::now() < deadline, "no reconnect");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TLS connector that counts the connections it is asked to secure and
/// leaves them plain: the store's plumbing, whatever the TLS crate.
#[derive(Clone, Default)]
struct CountingTls(std::sync::Arc<AtomicUsize>);

impl postgres::tls::MakeTlsConnect<postgres::Socket> for CountingTls {
    type Stream = postgres::tls::NoTlsStream;
    type TlsConnect = postgres::NoTls;
    type Error = postgres::tls::NoTlsError;

    fn make_tls_connect(&mut self, _domain: &str) -> Result<postgres::NoTls, Self::Error> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(postgres::NoTls)
    }
}

#[test]
fn every_connection_and_every_reconnection_goes_through_the_tls_connector() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let tls = CountingTls::default();
    let three = std::num::NonZeroUsize::new(3).unwrap();
    let ledger = Ledger::new(PgStore::connect_pooled_tls(&url, three, tls.clone()).unwrap());
    assert_eq!(tls.0.load(Ordering::SeqCst), 3, "one per connection");
    let key = Key::new("t", "tls");
    let _ = ledger.begin(&key, &fp(), "w").unwrap();
    for _ in 0..6 {
        ledger.get(&key).unwrap();
    }
    end_every_session(&url);
    // The store reconnects (one call may fail), through the connector.
    reconnected(&ledger, &key);
    for _ in 0..9 {
        ledger.get(&key).unwrap();
    }
    assert_eq!(
        tls.0.load(Ordering::SeqCst),
        6,
        "each of the three connections reopened through the connector"
    );
}

#[test]
fn sslmode_require_without_a_tls_connector_is_an_error_that_says_tls() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let err = PgStore::connect(&format!("{url} sslmode=require")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("TLS") || text.contains("tls"), "{text}");
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

/// TLS in front of the test server: a loopback TCP port that answers
/// PostgreSQL's SSLRequest with "S", terminates TLS (rustls, with the test
/// certificate in `tests/tls`) and passes the bytes to the server. Counts
/// the TLS sessions it completed.
struct TlsFront {
    port: u16,
    sessions: std::sync::Arc<AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

fn tls_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

/// `name=value` of a libpq-style connection string.
fn param<'a>(url: &'a str, name: &str) -> &'a str {
    url.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

fn ring() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

/// A front's runtime (one worker thread) and its listener on a free
/// loopback port.
fn loopback_front() -> (tokio::runtime::Runtime, tokio::net::TcpListener, u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    (runtime, listener, port)
}

fn tls_front(url: &str) -> TlsFront {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (host, port) = (param(url, "host").to_owned(), param(url, "port").to_owned());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(tls_file("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(tls_file("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let (runtime, listener, front_port) = loopback_front();
    let sessions = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = sessions.clone();
    runtime.spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            let (host, port) = (host.clone(), port.clone());
            tokio::spawn(async move {
                // SSLRequest: length 8, code 80877103. Anything else (a
                // client that did not ask for TLS) is hung up on.
                let mut request = [0u8; 8];
                if tcp.read_exact(&mut request).await.is_err()
                    || request != [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]
                    || tcp.write_all(b"S").await.is_err()
                {
                    return;
                }
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                if host.starts_with('/') {
                    let socket = format!("{host}/.s.PGSQL.{port}");
                    let mut server = tokio::net::UnixStream::connect(socket).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                } else {
                    let mut server = tokio::net::TcpStream::connect(format!("{host}:{port}"))
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                }
            });
        }
    });
    TlsFront {
        port: front_port,
        sessions,
        _runtime: runtime,
    }
}

/// A plain TCP front to the test server that counts the empty queries
/// clients send through it: the ping of `postgres::Client::is_valid`.
struct PingCounter {
    port: u16,
    pings: std::sync::Arc<AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

impl PingCounter {
    fn pings(&self) -> usize {
        self.pings.load(Ordering::SeqCst)
    }
}

fn ping_counter(url: &str) -> PingCounter {
    let (host, port) = (param(url, "host").to_owned(), param(url, "port").to_owned());
    let (runtime, listener, front_port) = loopback_front();
    let pings = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = pings.clone();
    runtime.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (client_in, client_out) = tcp.into_split();
            let (counted, host, port) = (counted.clone(), host.clone(), port.clone());
            tokio::spawn(async move {
                if host.starts_with('/') {
                    let socket = format!("{host}/.s.PGSQL.{port}");
                    let server = tokio::net::UnixStream::connect(socket).await.unwrap();
                    let (server_in, server_out) = server.into_split();
                    relay(client_in, client_out, server_in, server_out, &counted).await;
                } else {
                    let server = tokio::net::TcpStream::connect(format!("{host}:{port}"))
                        .await
                        .unwrap();
                    let (server_in, server_out) = server.into_split();
                    relay(client_in, client_out, server_in, server_out, &counted).await;
                }
            });
        }
    });
    PingCounter {
        port: front_port,
        pings,
        _runtime: runtime,
    }
}

/// Passes bytes both ways until either side ends (then drops both).
async fn relay(
    client_in: impl tokio::io::AsyncRead + Unpin,
    mut client_out: impl tokio::io::AsyncWrite + Unpin,
    mut server_in: impl tokio::io::AsyncRead + Unpin,
    server_out: impl tokio::io::AsyncWrite + Unpin,
    pings: &AtomicUsize,
) {
    tokio::select! {
        _ = count_pings(client_in, server_out, pings) => {}
        _ = tokio::io::copy(&mut server_in, &mut client_out) => {}
    }
}

/// Passes the client's messages on, counting its empty simple queries
/// (`Q`, length 5, the query `""`).
async fn count_pings(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    pings: &AtomicUsize,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The startup message has no type byte: its length, then the rest.
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await?;
    let mut rest = vec![0u8; (u32::from_be_bytes(length) as usize).saturating_sub(4)];
    from.read_exact(&mut rest).await?;
    to.write_all(&length).await?;
    to.write_all(&rest).await?;
    loop {
        let mut head = [0u8; 5];
        from.read_exact(&mut head).await?;
        let length = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; length.saturating_sub(4)];
        from.read_exact(&mut body).await?;
        if head[0] == b'Q' && body == [0] {
            pings.fetch_add(1, Ordering::SeqCst);
        }
        to.write_all(&head).await?;
        to.write_all(&body).await?;
    }
}

/// A rustls connector that trusts `roots` (PEM files in `tests/tls`).
fn rustls_connector(roots: &[&str]) -> tokio_postgres_rustls::MakeRustlsConnect {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        for cert in CertificateDer::pem_file_iter(tls_file(root)).unwrap() {
            store.add(cert.unwrap()).unwrap();
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// The database of `url`, through `front`, with TLS required.
fn through(front: &TlsFront, url: &str) -> String {
    format!(
        "host=127.0.0.1 port={} user={} dbname={} sslmode=require",
        front.port,
        param(url, "user"),
        param(url, "dbname")
    )
}

#[test]
fn a_store_connects_and_reconnects_over_real_tls() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let front = tls_front(&url);
    let three = std::num::NonZeroUsize::new(3).unwrap();
    let tls = rustls_connector(&["ca.pem"]);
    let ledger =
        Ledger::new(PgStore::connect_pooled_tls(&through(&front, &url), three, tls).unwrap());
    assert_eq!(
        front.sessions.load(Ordering::SeqCst),
        3,
        "a TLS session per connection"
    );
    let key = Key::new("t", "over-tls");
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("new key");
    };
    ledger.mark_dispatched(&lease).unwrap();
    ledger.close(&lease, Close::Succeeded("{}".into())).unwrap();
    // What went through TLS is in the database.
    assert!(
        Ledger::new(PgStore::connect(&url).unwrap())
            .get(&key)
            .unwrap()
            .is_some_and(|r| r.state.is_closed())
    );
    // A failover: every session ends; the store reopens its connections,
    // each through a new TLS session.
    end_every_session(&url);
    reconnected(&ledger, &key);
    for _ in 0..9 {
        assert!(matches!(
            ledger.begin(&key, &fp(), "w").unwrap(),
            Begin::Replay(_)
        ));
    }
    assert_eq!(front.sessions.load(Ordering::SeqCst), 6);
}

#[test]
fn a_server_certificate_the_connector_does_not_trust_is_a_storage_error_saying_so() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let front = tls_front(&url);
    // Trusting only the server's own certificate, not the CA that signed it.
    let tls = rustls_connector(&["server.pem"]);
    let err = PgStore::connect_pooled_tls(&through(&front, &url), std::num::NonZeroUsize::MIN, tls)
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Storage(_)), "{text}");
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(front.sessions.load(Ordering::SeqCst), 0);
}

#[test]
fn a_renewal_thread_beside_the_call_never_costs_the_owner_its_attempt() {
    // The owner's two tasks on two connections of one pooled store: one
    // renews the lease every 2 ms (a service renews every few seconds;
    // this makes the races frequent) while the other dispatches and
    // closes. Every dispatch and close must land (a lost race is read
    // again, after a short random pause). A renewal may lose its own races
    // to them: the contract lets it answer `Error::Contended` (nothing
    // written; the next renewal tries again), never `StaleLease` before
    // the close.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = std::sync::Arc::new(Ledger::new(
        PgStore::connect_pooled(&url, std::num::NonZeroUsize::new(2).unwrap()).unwrap(),
    ));
    for i in 0..40 {
        let key = Key::new("renew", format!("call-{i}"));
        let Begin::Started(lease) = ledger.begin(&key, &fp(), "w1").unwrap() else {
            panic!("a new key starts");
        };
        let renewer = {
            let (ledger, lease) = (ledger.clone(), lease.clone());
            std::thread::spawn(move || {
                let mut renewals = 0;
                loop {
                    match ledger.renew(&lease) {
                        Ok(_) => {
                            renewals += 1;
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(Error::Contended { .. }) => {}
                        // Only once the call's close has landed.
                        Err(Error::StaleLease { .. }) => {
                            let record = ledger.get(&key).unwrap().unwrap();
                            assert!(record.state.is_closed(), "stale before the close");
                            return renewals;
                        }
                        Err(e) => panic!("renewal {renewals} of {key}: {e}"),
                    }
                }
            })
        };
        ledger.mark_dispatched(&lease).unwrap();
        let record = ledger
            .close(&lease, Close::Succeeded("ok".into()))
            .unwrap_or_else(|e| panic!("close of call-{i} beside a renewal: {e}"));
        assert!(record.lease.is_none());
        renewer.join().unwrap();
    }
}

#[test]
fn a_test_database_is_dropped_with_its_handle_even_with_connections_open() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let name = param(&url, "dbname").to_owned();
    let admin_url = format!("{} dbname=postgres", url.rsplit_once(" dbname=").unwrap().0);
    let exists = || {
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        let row = admin
            .query_one(
                "SELECT count(*) FROM pg_database WHERE datname = $1",
                &[&name],
            )
            .unwrap();
        row.get::<_, i64>(0) == 1
    };
    // A store still connected to it, as in a test that panicked.
    let store = PgStore::connect(&url).unwrap();
    let ledger = Ledger::new(store);
    let _ = ledger.begin(&Key::new("t", "a"), &fp(), "w").unwrap();
    assert!(exists());
    drop(db);
    assert!(!exists(), "database {name} still exists");
    drop(ledger);
}

#[test]
fn a_stores_debug_names_its_database_and_user_but_never_the_password() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    // The throwaway server trusts local connections: the password is sent
    // to no one, but the store is given it, as a service's would be.
    let store = PgStore::connect(&format!("{url} password=CANARY-pw-7f3a")).unwrap();
    let shown = format!("{store:?}");
    let (dbname, user) = (param(&url, "dbname"), param(&url, "user"));
    assert!(
        shown.starts_with("PgStore { target: ")
            && shown.contains(&format!("dbname={dbname} user={user} (1 host(s))")),
        "{shown}"
    );
    assert!(!shown.contains("CANARY"), "{shown}");
}

#[test]
fn a_lease_from_before_a_purge_never_drives_the_key_begun_again() {
    let db = TestDatabase::new();
    ate_ledger::testing::purged_key_fences_old_leases(PgStore::connect(db.url()).unwrap());
}

/// A replica whose clock runs `ahead` of the others.
#[derive(Debug)]
struct Skewed(chrono::TimeDelta);

impl ate_ledger::clock::Clock for Skewed {
    fn now(&self) -> chrono::DateTime<Utc> {
        Utc::now() + self.0
    }
}

#[test]
fn a_replica_whose_clock_runs_ahead_does_not_take_over_a_live_lease() {
    let db = TestDatabase::new();
    let a = Ledger::new(PgStore::connect(db.url()).unwrap());
    let ahead = Ledger::with_clock(
        PgStore::connect(db.url()).unwrap(),
        Config::default(),
        Skewed(chrono::TimeDelta::seconds(45)),
    )
    .expect("a valid config");
    let key = Key::new("t", "skew");
    let Begin::Started(lease) = a.begin(&key, &fp(), "replica-a").unwrap() else {
        panic!("new key")
    };
    a.mark_dispatched(&lease).unwrap();
    // By its own clock the 30 s lease expired 15 s ago; by the server's it
    // has 30 s to run: the call is in flight, not lost.
    match ahead.begin(&key, &fp(), "replica-b") {
        Err(Error::Conflict { retry_after, .. }) => {
            assert!(retry_after > Duration::from_secs(25), "{retry_after:?}")
        }
        other => panic!("the skewed replica took over a live attempt: {other:?}"),
    }
    assert!(ahead.recover().unwrap().is_empty(), "nor does its recovery");
    // The owner still closes with the real answer.
    let r = a.close(&lease, Close::Succeeded("answer".into())).unwrap();
    assert!(matches!(r.state, ate_ledger::State::Succeeded { .. }));
}

#[test]
fn a_skewed_replicas_one_round_trip_transitions_keep_the_servers_time() {
    let db = TestDatabase::new();
    let ahead = Ledger::with_clock(
        PgStore::connect(db.url()).unwrap(),
        Config::default(),
        Skewed(chrono::TimeDelta::minutes(10)),
    )
    .expect("a valid config");
    let key = Key::new("t", "skew-written");
    let Begin::Started(lease) = ahead.begin(&key, &fp(), "replica-b").unwrap() else {
        panic!("new key")
    };
    // The renewal and the dispatch write what this replica last wrote,
    // without reading it again: their times are still the server's
    // (within a second here), not its clock's 10 minutes ahead.
    let renewed = ahead.renew(&lease).unwrap();
    ahead.mark_dispatched(&renewed).unwrap();
    let closed = ahead
        .close(&renewed, Close::Succeeded("answer".into()))
        .unwrap();
    let server = Utc::now();
    let off = |t: chrono::DateTime<Utc>| (t - server).num_milliseconds().abs();
    assert!(off(renewed.expires_at - chrono::TimeDelta::seconds(30)) < 1_000);
    assert!(off(closed.tries[0].dispatched_at.unwrap()) < 1_000);
    assert!(off(closed.ended_at.unwrap()) < 1_000);
    assert_eq!(closed.version, 4);
    assert_eq!(ahead.get(&key).unwrap(), Some(closed));
}

#[test]
fn a_replica_whose_clock_runs_an_hour_fast_purges_nothing_early() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let config = Config {
        retention: Config::MIN_RETENTION,
        ..Config::default()
    };
    let fast = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        config,
        Skewed(chrono::TimeDelta::minutes(90)),
    )
    .unwrap();
    let key = Key::new("t", "kept");
    let Begin::Started(lease) = fast.begin(&key, &fp(), "w").unwrap() else {
        panic!("a new key starts")
    };
    fast.mark_dispatched(&lease).unwrap();
    fast.close(&lease, Close::Succeeded("ok".into())).unwrap();
    // Ended a moment ago by the server's clock, which stamped it: an hour's
    // retention keeps it, whatever this replica's clock says.
    assert_eq!(fast.purge().unwrap(), 0);
    assert!(matches!(
        fast.begin(&key, &fp(), "w").unwrap(),
        Begin::Replay(_)
    ));
    // Ended two hours ago by the server's clock: purged.
    sql(
        &url,
        "UPDATE ate_ledger_records SET ended_at = now() - interval '2 hours'",
    );
    assert_eq!(fast.purge().unwrap(), 1);
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
