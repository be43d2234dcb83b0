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
