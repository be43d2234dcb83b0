//! `AsyncPgStore` against a PostgreSQL server of the test's own that is
//! stalled (SIGSTOP of all its processes: a hang, not a refusal) and
//! restarted (fast shutdown): every call is bounded by the call timeout
//! while it hangs, and the same store answers again once the server does,
//! without being rebuilt.
#![cfg(all(feature = "postgres-async", feature = "test-util"))]

use std::time::{Duration, Instant};

use ate_ledger::testing::TestPostgres;
use ate_ledger::{AsyncPgStore, Error, Key, store::AsyncStore};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Tries `store.get` until it answers, for at most 10 s: how long the
/// store took to answer again.
async fn answers_again(store: &AsyncPgStore, key: &Key) -> Duration {
    let start = Instant::now();
    loop {
        match store.get(key).await {
            Ok(_) => return start.elapsed(),
            Err(e) if start.elapsed() < Duration::from_secs(10) => {
                assert!(matches!(e, Error::Storage(_)), "{e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the store did not answer again within 10 s: {e}"),
        }
    }
}

#[test]
fn a_stalled_server_costs_one_call_timeout_and_a_restarted_one_answers_again() {
    let server = TestPostgres::start();
    let url = server.url();
    let rt = runtime();
    let key = Key::new("faults", "k");
    let store = rt.block_on(async {
        let store = AsyncPgStore::connect(&url, 2)
            .await
            .unwrap()
            .with_call_timeout(Duration::from_millis(300));
        assert!(store.get(&key).await.unwrap().record.is_none());
        store
    });

    // Stalled for 2 s: a read gets a storage error within the call
    // timeout, not when the server wakes.
    let stalled = std::thread::spawn(move || {
        server.stall(Duration::from_secs(2));
        server
    });
    let mut server = rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start = Instant::now();
        match store.get(&key).await {
            Err(Error::Storage(text)) => {
                assert!(text.contains("no answer within 300ms"), "{text}")
            }
            other => panic!("a read from a stalled server: {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_millis(1_500),
            "{:?}",
            start.elapsed()
        );
        let server = tokio::task::spawn_blocking(move || stalled.join().unwrap())
            .await
            .unwrap();
        answers_again(&store, &key).await;
        server
    });

    // Restarted: the same store answers again.
    server.restart();
    rt.block_on(async {
        answers_again(&store, &key).await;
        assert!(store.get(&key).await.unwrap().record.is_none());
    });
}

/// Waits until no other client statement runs on `url`'s server (what sat
/// in the stalled sockets has been executed), for at most 10 s.
async fn quiet(url: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let start = Instant::now();
    loop {
        let busy: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                 AND backend_type = 'client backend' AND state <> 'idle'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if busy == 0 {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{busy} busy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The late-landing dispatch mark, on a real server: the mark's call
/// times out while the server is stopped (the UPDATE waits in the
/// socket), the worker sends nothing and cannot close the try, and the
/// server wakes after the lease ended. Before, the UPDATE then ran and the
/// try read as dispatched with no close left to undo it: every retry got
/// a final "provider unavailable" for a request nobody sent. The mark is
/// written only while the lease lasts by the server's clock, so it lands
/// nowhere, and the retry runs the call.
#[test]
fn a_dispatch_mark_that_reaches_postgres_after_its_lease_never_lands() {
    use ate_ledger::clock::SystemClock;
    use ate_ledger::{AsyncLedger, Call, Config, Executed, Fingerprint, Response};
    use std::sync::atomic::{AtomicU32, Ordering};

    let server = TestPostgres::start();
    let url = server.url();
    let rt = runtime();
    let key = Key::new("faults", "late-mark");
    let fp = Fingerprint::of_json(&serde_json::json!({}));
    let lease_ttl = Duration::from_secs(1);
    let ledger = rt.block_on(async {
        // One connection, warmed by a whole call: the mark's UPDATE is
        // prepared, so its call sends it at once (as on a busy service),
        // and what comes after it waits behind it.
        let store = AsyncPgStore::connect(&url, 1)
            .await
            .unwrap()
            .with_call_timeout(Duration::from_millis(300));
        let config = Config {
            lease_ttl,
            ..Config::default()
        };
        let ledger = AsyncLedger::with_clock(store, config, SystemClock).unwrap();
        let warm = ledger
            .execute(&Key::new("faults", "warm"), &fp, "w", |mut d| async move {
                d.send().await.unwrap();
                Call::Succeeded(Response::new(200, b"warm".to_vec()))
            })
            .await;
        assert!(matches!(warm, Ok(Executed::Answered { .. })), "{warm:?}");
        ledger
    });
    let frozen = std::sync::Mutex::new(None);
    let (frozen_ref, server_ref) = (&frozen, &server);
    let started = Instant::now();
    rt.block_on(async {
        let r = ledger
            .execute(&key, &fp, "w", |mut d| async move {
                *frozen_ref.lock().unwrap() = Some(server_ref.freeze());
                match d.send().await {
                    Ok(_) => panic!("marked dispatched on a stopped server"),
                    Err(e) => Call::PreProvider(e.to_string()),
                }
            })
            .await;
        assert!(matches!(r, Err(Error::Storage(_))), "{r:?}");
    });
    // PostgreSQL's clock cannot be set: the server stays stopped until
    // the lease has ended by the wall clock it shares with this test.
    let past = lease_ttl + Duration::from_millis(500);
    if let Some(wait) = past.checked_sub(started.elapsed()) {
        std::thread::sleep(wait);
    }
    drop(frozen.lock().unwrap().take());
    let calls = AtomicU32::new(0);
    let calls_ref = &calls;
    rt.block_on(async {
        quiet(&url).await;
        let record = ledger.get(&key).await.unwrap().unwrap();
        assert!(
            record.tries.iter().all(|t| t.dispatched_at.is_none()),
            "a mark that came after the lease landed: {record:?}"
        );
        let r = ledger
            .execute(&key, &fp, "w", |mut d| async move {
                d.send().await.unwrap();
                calls_ref.fetch_add(1, Ordering::SeqCst);
                Call::Succeeded(Response::new(200, b"sent once".to_vec()))
            })
            .await;
        assert!(
            matches!(r, Ok(Executed::Answered { recorded: true, .. })),
            "{r:?}"
        );
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
