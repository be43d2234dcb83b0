//! Broken connections, failovers, timeouts and the errors storage failures give.

use super::tls::ping_counter;
use super::*;

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
