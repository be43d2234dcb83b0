//! The async front (feature `tokio`): the same model as the sync front,
//! `execute`'s protocol, and (with `postgres-async`) PostgreSQL through a
//! deadpool pool: the model, two pools racing as two replicas, and no
//! runtime worker ever blocked.
#![cfg(feature = "tokio")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ate_ledger::testing::{Driver, Model, is_final, key, ops};
use ate_ledger::{
    AsyncLedger, Blocking, Call, Config, Error, Executed, Fingerprint, Key, MemoryStore, RedbStore,
    Response, clock::ManualClock, store::AsyncStore,
};
use proptest::prelude::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn check<S: AsyncStore>(
    store: S,
    seq: &[ate_ledger::testing::Op],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::default();
    let ledger = AsyncLedger::with_clock(store, Config::default(), clock.clone()).unwrap();
    let mut driver = Driver::new(clock);
    let mut model = Model::new(Config::default());
    let mut was_final = [false; 3];
    for op in seq {
        let got = driver.apply_async(&ledger, op).await;
        let want = model.apply(op);
        prop_assert_eq!(got, want, "{:?}", op);
        for k in 0..3u8 {
            let record = ledger.get(&key(k)).await.unwrap();
            prop_assert_eq!(record.as_ref().map(|r| r.state.name()), model.state(k));
            if let Some(r) = record {
                prop_assert_eq!(r.tries.len() as u32, model.tries(k));
                prop_assert!(r.check_invariants().is_ok());
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
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_async_front_on_memory_matches_the_model(seq in ops(50)) {
        runtime().block_on(check(MemoryStore::new(), &seq))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn the_async_front_on_blocking_redb_matches_the_model(seq in ops(30)) {
        let dir = tempfile::tempdir().unwrap();
        let store = Blocking(Arc::new(RedbStore::open(dir.path().join("l.redb")).unwrap()));
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
            .block_on(check(store, &seq))?;
    }
}

/// A call that marks the dispatch and answers `call`.
async fn sent(mut dispatch: ate_ledger::Dispatch, call: Call) -> Call {
    dispatch.send().await.unwrap();
    call
}

fn fp(body: &serde_json::Value) -> Fingerprint {
    Fingerprint::of_json(body)
}

#[tokio::test]
async fn execute_runs_once_and_replays_byte_identical_answers() {
    let ledger = AsyncLedger::new(MemoryStore::new());
    let key = Key::new("alice", "k1");
    let body = serde_json::json!({"amount": 5});
    let calls = AtomicUsize::new(0);
    let print = fp(&body);
    let run = || {
        let calls = &calls;
        ledger.execute(&key, &print, "pod-a", move |mut d| async move {
            d.send().await.unwrap();
            calls.fetch_add(1, Ordering::SeqCst);
            Call::Succeeded(
                Response::new(201, vec![0xff, b'{', 0x00])
                    .header("content-type", "application/octet-stream"),
            )
        })
    };
    let first = run().await.unwrap();
    let Executed::Answered {
        response,
        recorded: true,
    } = first
    else {
        panic!("{first:?}")
    };
    let again = run().await.unwrap();
    assert_eq!(
        again,
        Executed::Replayed(response),
        "byte for byte, headers too"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The same key with another body is refused.
    let other = ledger
        .execute(
            &key,
            &fp(&serde_json::json!({"amount": 6})),
            "pod-a",
            |_| async { Call::Ambiguous("never called".into()) },
        )
        .await;
    assert!(
        matches!(other, Err(Error::FingerprintMismatch { .. })),
        "{other:?}"
    );
}

#[tokio::test]
async fn a_pre_provider_failure_runs_again_and_an_ambiguous_one_never_does() {
    let ledger = AsyncLedger::new(MemoryStore::new());
    let body = serde_json::json!({"x": 1});
    let (pre, amb) = (Key::new("c", "pre"), Key::new("c", "amb"));
    let failed = ledger
        .execute(&pre, &fp(&body), "w", |_| async {
            Call::PreProvider("no credential".into())
        })
        .await
        .unwrap();
    assert_eq!(
        failed,
        Executed::FailedPreProvider {
            reason: "no credential".into()
        }
    );
    let revived = ledger
        .execute(&pre, &fp(&body), "w", |d| {
            sent(d, Call::Succeeded(Response::new(200, b"ok".to_vec())))
        })
        .await
        .unwrap();
    assert!(
        matches!(revived, Executed::Answered { recorded: true, .. }),
        "{revived:?}"
    );
    assert_eq!(ledger.get(&pre).await.unwrap().unwrap().tries.len(), 2);
    // Sent, then no answer: never again, whatever the repeat's call would do.
    let lost = ledger
        .execute(&amb, &fp(&body), "w", |d| {
            sent(d, Call::Ambiguous("timeout".into()))
        })
        .await
        .unwrap();
    assert_eq!(
        lost,
        Executed::ProviderUnavailable {
            reason: "timeout".into(),
            replayed: false,
        }
    );
    let again = ledger
        .execute(&amb, &fp(&body), "w", |_| async {
            panic!("re-executed an ambiguous call")
        })
        .await
        .unwrap();
    assert_eq!(
        again,
        Executed::ProviderUnavailable {
            reason: "timeout".into(),
            replayed: true,
        }
    );
    // A "pre-provider" failure after the dispatch mark is ambiguous too.
    let late = Key::new("c", "late");
    let r = ledger
        .execute(&late, &fp(&body), "w", |d| {
            sent(d, Call::PreProvider("said too late".into()))
        })
        .await
        .unwrap();
    assert!(
        matches!(
            r,
            Executed::ProviderUnavailable {
                replayed: false,
                ..
            }
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_sent_call_the_provider_did_not_process_runs_again() {
    // A 429 / 408 / 503 with Retry-After: sent, and the provider says it
    // did not act on it. Revivable, unlike any other answer after the mark.
    let ledger = AsyncLedger::new(MemoryStore::new());
    let body = serde_json::json!({"x": 1});
    let key = Key::new("c", "busy");
    let first = ledger
        .execute(&key, &fp(&body), "w", |d| {
            sent(d, Call::NotProcessed("429".into()))
        })
        .await
        .unwrap();
    assert_eq!(
        first,
        Executed::FailedPreProvider {
            reason: "429".into()
        }
    );
    let record = ledger.get(&key).await.unwrap().unwrap();
    assert!(record.is_revivable(), "{record:?}");
    assert!(!record.ever_dispatched(), "the mark was taken back");
    assert!(record.check_invariants().is_ok());
    let retried = ledger
        .execute(&key, &fp(&body), "w", |d| {
            sent(d, Call::Succeeded(Response::new(200, b"ok".to_vec())))
        })
        .await
        .unwrap();
    assert!(
        matches!(retried, Executed::Answered { recorded: true, .. }),
        "{retried:?}"
    );
    assert_eq!(ledger.get(&key).await.unwrap().unwrap().tries.len(), 2);
    // Not processed before it was even sent: the same.
    let early = Key::new("c", "early");
    let r = ledger
        .execute(&early, &fp(&body), "w", |_| async {
            Call::NotProcessed("408".into())
        })
        .await
        .unwrap();
    assert!(matches!(r, Executed::FailedPreProvider { .. }), "{r:?}");
}

#[tokio::test]
async fn a_second_call_on_a_key_in_flight_is_a_conflict_with_retry_after() {
    let ledger = Arc::new(AsyncLedger::new(MemoryStore::new()));
    let key = Key::new("c", "busy");
    let body = serde_json::json!({});
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn({
        let (ledger, key, body) = (ledger.clone(), key.clone(), body.clone());
        async move {
            ledger
                .execute(&key, &fp(&body), "w", |mut d| async move {
                    d.send().await.unwrap();
                    started_tx.send(()).unwrap();
                    release_rx.await.unwrap();
                    Call::Succeeded(Response::new(200, b"first".to_vec()))
                })
                .await
        }
    });
    started_rx.await.unwrap();
    let second = ledger
        .execute(&key, &fp(&body), "w", |_| async { panic!("ran twice") })
        .await;
    match second {
        Err(e @ Error::Conflict { .. }) => assert!(e.retry_after_secs().unwrap() >= 1),
        other => panic!("{other:?}"),
    }
    release_tx.send(()).unwrap();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        Executed::Answered { .. }
    ));
}

#[tokio::test]
async fn a_begin_whose_answer_was_lost_is_taken_over_by_its_owner() {
    let ledger = AsyncLedger::new(MemoryStore::new());
    let key = Key::new("c", "lost");
    let body = serde_json::json!({});
    // The begin landed; its answer never came back.
    let _lost = ledger.begin(&key, &fp(&body), "pod-a").await.unwrap();
    let r = ledger
        .execute(&key, &fp(&body), "pod-a", |d| {
            sent(d, Call::Succeeded(Response::new(200, b"ok".to_vec())))
        })
        .await
        .unwrap();
    assert!(
        matches!(r, Executed::Answered { recorded: true, .. }),
        "{r:?}"
    );
    // Another owner's in-flight attempt is never taken over.
    let theirs = Key::new("c", "theirs");
    let _ = ledger.begin(&theirs, &fp(&body), "pod-b").await.unwrap();
    let r = ledger
        .execute(&theirs, &fp(&body), "pod-a", |_| async {
            panic!("took over")
        })
        .await;
    assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
}

#[tokio::test(start_paused = true)]
async fn a_long_call_keeps_its_lease_renewed() {
    // Time is tokio's (paused), so a 2-minute call takes no real time.
    #[derive(Debug)]
    struct TokioTime(chrono::DateTime<chrono::Utc>, tokio::time::Instant);
    impl ate_ledger::clock::Clock for TokioTime {
        fn now(&self) -> chrono::DateTime<chrono::Utc> {
            self.0 + chrono::TimeDelta::from_std(self.1.elapsed()).unwrap()
        }
    }
    let clock = TokioTime(chrono::Utc::now(), tokio::time::Instant::now());
    let ledger =
        Arc::new(AsyncLedger::with_clock(MemoryStore::new(), Config::default(), clock).unwrap());
    let key = Key::new("c", "long");
    let body = serde_json::json!({});
    let other = ledger.clone();
    let k2 = key.clone();
    let r = ledger
        .execute(&key, &fp(&body), "w", |mut d| async move {
            d.send().await.unwrap();
            tokio::time::sleep(Duration::from_secs(120)).await;
            // Four lease lengths in: still ours, so nobody took it over.
            let held = other.get(&k2).await.unwrap().unwrap();
            assert_eq!(held.state.name(), "in_flight");
            assert!(other.recover().await.unwrap().is_empty());
            Call::Succeeded(Response::new(200, b"late".to_vec()))
        })
        .await
        .unwrap();
    assert!(
        matches!(r, Executed::Answered { recorded: true, .. }),
        "{r:?}"
    );
}

#[test]
fn a_fingerprint_ignores_key_order_and_number_spelling() {
    let a: serde_json::Value =
        serde_json::from_str(r#"{"b":[1,2.5],"a":{"y":1e3,"x":null}}"#).unwrap();
    let b: serde_json::Value =
        serde_json::from_str(r#"{ "a" : {"x":null,"y":1000.0}, "b":[1.0,2.5] }"#).unwrap();
    assert_eq!(Fingerprint::of_json(&a), Fingerprint::of_json(&b));
    let c: serde_json::Value =
        serde_json::from_str(r#"{"b":[1,2.5],"a":{"y":1001,"x":null}}"#).unwrap();
    assert_ne!(Fingerprint::of_json(&a), Fingerprint::of_json(&c));
    assert!(Fingerprint::of_json(&a).0.starts_with("sha256:"));
}

fn fingerprint_of(text: &str) -> Fingerprint {
    Fingerprint::of_json(&serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}")))
}

#[test]
fn a_number_at_two_to_the_53_and_beyond_has_one_fingerprint_however_spelled() {
    for spellings in [
        &[
            "9007199254740992",
            "9007199254740992.0",
            "9.007199254740992e15",
        ][..],
        &[
            "-9007199254740992",
            "-9007199254740992.0",
            "-9.007199254740992E+15",
        ],
        // What JavaScript re-serialises 2^64 - 1 as.
        &[
            "18446744073709551615",
            "18446744073709552000",
            "1.8446744073709552e19",
        ],
        &[
            "9223372036854775807",
            "9223372036854775808.0",
            "9.223372036854776e18",
        ],
        &[
            "1e300",
            "1.0e300",
            "1000000000000000052504760255204420248704468581108159154915854115511802457988908195786371375080447864043704443832883878176942523235360430575644792184786706982848387200926575803737830233794788090059368953234970799945081119038967640880074652742780142494579258788820056842838115669472196386865459400540160",
        ],
    ] {
        let first = fingerprint_of(spellings[0]);
        for s in &spellings[1..] {
            assert_eq!(fingerprint_of(s), first, "{s} against {}", spellings[0]);
        }
    }
    assert_ne!(
        fingerprint_of("9007199254740992"),
        fingerprint_of("9007199254740994")
    );
}

proptest! {
    #[test]
    fn every_spelling_of_a_number_has_one_fingerprint(n in any::<i64>(), u in any::<u64>(), f in any::<f64>()) {
        prop_assert_eq!(fingerprint_of(&n.to_string()), fingerprint_of(&format!("{n}.0")));
        prop_assert_eq!(fingerprint_of(&u.to_string()), fingerprint_of(&format!("{u}.0")));
        prop_assert_eq!(fingerprint_of(&u.to_string()), fingerprint_of(&format!("{:e}", u as f64)));
        if f.is_finite() {
            let shortest = fingerprint_of(&format!("{f:e}"));
            prop_assert_eq!(fingerprint_of(&format!("{f}")), shortest.clone());
            prop_assert_eq!(fingerprint_of(&format!("{f:?}")), shortest);
        }
    }
}

#[cfg(feature = "postgres-async")]
mod postgres {
    use super::*;
    use ate_ledger::AsyncPgStore;
    use ate_ledger::testing::TestDatabase;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        #[test]
        fn the_async_front_on_postgres_matches_the_model(seq in ops(30)) {
            let db = TestDatabase::new();
            runtime().block_on(async {
                let store = AsyncPgStore::connect(db.url(), 2).await.unwrap();
                check(store, &seq).await
            })?;
        }
    }

    #[test]
    fn two_pools_racing_as_two_replicas_run_the_call_once() {
        let db = TestDatabase::new();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let a = Arc::new(AsyncLedger::new(
                AsyncPgStore::connect(db.url(), 4).await.unwrap(),
            ));
            let b = Arc::new(AsyncLedger::new(
                AsyncPgStore::connect(db.url(), 4).await.unwrap(),
            ));
            for round in 0..10 {
                let calls = Arc::new(AtomicUsize::new(0));
                let key = Key::new("race", format!("k{round}"));
                let body = serde_json::json!({"round": round});
                let mut tasks = Vec::new();
                for i in 0..8 {
                    let ledger = if i % 2 == 0 { a.clone() } else { b.clone() };
                    let (calls, key, body) = (calls.clone(), key.clone(), body.clone());
                    tasks.push(tokio::spawn(async move {
                        let owner = format!("replica-{}", i % 2);
                        ledger
                            .execute(&key, &fp(&body), &owner, move |mut d| async move {
                                if d.send().await.is_err() {
                                    return Call::PreProvider("lost the dispatch".into());
                                }
                                calls.fetch_add(1, Ordering::SeqCst);
                                Call::Succeeded(Response::new(200, b"once".to_vec()))
                            })
                            .await
                    }));
                }
                let mut answered = 0;
                for t in tasks {
                    match t.await.unwrap() {
                        Ok(Executed::Answered { .. } | Executed::Replayed(_)) => answered += 1,
                        Err(Error::Conflict { .. }) => {}
                        other => panic!("round {round}: {other:?}"),
                    }
                }
                assert_eq!(
                    calls.load(Ordering::SeqCst),
                    1,
                    "round {round}: exactly one call"
                );
                assert!(answered >= 1);
            }
        });
    }

    #[test]
    fn a_store_call_waiting_on_the_database_never_blocks_the_runtime() {
        // One thread runs everything: a call waiting on a row lock must
        // yield it, or the task that releases the lock never runs and this
        // test hangs (bounded by the timeout below).
        let db = TestDatabase::new();
        let url = db.url().to_owned();
        runtime().block_on(async move {
            let ledger = AsyncLedger::new(AsyncPgStore::connect(&url, 2).await.unwrap());
            let key = Key::new("lock", "k");
            let body = serde_json::json!({});
            let ate_ledger::Begin::Started(lease) =
                ledger.begin(&key, &fp(&body), "w").await.unwrap()
            else {
                panic!()
            };
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            client
                .batch_execute("BEGIN; SELECT 1 FROM ate_ledger_records FOR UPDATE")
                .await
                .unwrap();
            let release = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                client.batch_execute("COMMIT").await.unwrap();
            });
            let marked =
                tokio::time::timeout(Duration::from_secs(20), ledger.mark_dispatched(&lease)).await;
            assert!(matches!(marked, Ok(Ok(()))), "{marked:?}");
            release.await.unwrap();
        });
    }

    #[test]
    fn an_exhausted_pool_answers_a_storage_error_within_the_call_timeout() {
        let db = TestDatabase::new();
        let url = db.url().to_owned();
        runtime().block_on(async move {
            let store = AsyncPgStore::connect(&url, 1)
                .await
                .unwrap()
                .with_call_timeout(Duration::from_millis(300));
            let key = Key::new("pool", "k");
            // Another task holds the only connection (a slow query, a leak).
            let held = store.pool().get().await.unwrap();
            let read = tokio::time::timeout(Duration::from_secs(10), store.get(&key)).await;
            match read {
                Ok(Err(Error::Storage(text))) => {
                    assert!(text.contains("no answer within 300ms"), "{text}");
                }
                other => panic!("a read on an exhausted pool: {other:?}"),
            }
            // `execute` answers the store's error (the service's 503), and
            // never calls the provider.
            let ledger = AsyncLedger::new(store.clone());
            let fingerprint = fp(&serde_json::json!({}));
            let run = ledger.execute(&key, &fingerprint, "w", |_| async {
                panic!("called without a begin")
            });
            let r = tokio::time::timeout(Duration::from_secs(10), run).await;
            assert!(matches!(r, Ok(Err(Error::Storage(_)))), "{r:?}");
            // The connection back: the store answers again.
            drop(held);
            assert!(store.get(&key).await.unwrap().record.is_none());
        });
    }
}

/// A store whose next `fail` writes fail as a store that is away would.
#[derive(Debug, Default)]
struct Flaky {
    inner: MemoryStore,
    fail: AtomicUsize,
}

impl AsyncStore for Flaky {
    fn get<'a>(
        &'a self,
        key: &'a Key,
    ) -> ate_ledger::store::StoreFuture<'a, ate_ledger::store::Read> {
        AsyncStore::get(&self.inner, key)
    }
    fn put<'a>(
        &'a self,
        record: &'a ate_ledger::Record,
        expected: Option<u64>,
    ) -> ate_ledger::store::StoreFuture<'a, ()> {
        let failing = self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Box::pin(async { Err(Error::Storage("connection reset".into())) });
        }
        AsyncStore::put(&self.inner, record, expected)
    }
    fn open(
        &self,
    ) -> ate_ledger::store::StoreFuture<
        '_,
        (
            Vec<ate_ledger::Record>,
            Option<chrono::DateTime<chrono::Utc>>,
        ),
    > {
        AsyncStore::open(&self.inner)
    }
    fn purge(
        &self,
        cutoff: ate_ledger::store::Cutoff,
    ) -> ate_ledger::store::StoreFuture<'_, usize> {
        AsyncStore::purge(&self.inner, cutoff)
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_for_a_moment_is_asked_again_not_answered_for() {
    let ledger = AsyncLedger::new(Flaky::default());
    let key = Key::new("c", "flaky");
    let body = serde_json::json!({});
    // Two failed writes at each step: the begin, the dispatch mark, the close.
    let fail = |n| ledger.store().fail.store(n, Ordering::SeqCst);
    fail(2);
    let fail = &fail;
    let r = ledger
        .execute(&key, &fp(&body), "w", move |mut d| async move {
            fail(2);
            d.send().await.unwrap();
            fail(2);
            Call::Succeeded(Response::new(200, b"ok".to_vec()))
        })
        .await
        .unwrap();
    assert!(
        matches!(r, Executed::Answered { recorded: true, .. }),
        "{r:?}"
    );
    assert_eq!(
        ledger.get(&key).await.unwrap().unwrap().state.name(),
        "succeeded"
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_failure_at_the_dispatch_answers_at_once_and_frees_the_key() {
    let ledger = AsyncLedger::new(Flaky::default());
    let body = serde_json::json!({});
    let fail = |n| ledger.store().fail.store(n, Ordering::SeqCst);
    let fail = &fail;
    // The store is away from the dispatch mark until well after it: the
    // call sends nothing, and the answer is the store's failure, after the
    // mark's and the close's second of retries, not a lease's 30 s.
    let key = Key::new("c", "away");
    let started = tokio::time::Instant::now();
    let r = ledger
        .execute(&key, &fp(&body), "w", move |mut d| async move {
            fail(usize::MAX);
            match d.send().await {
                Ok(_) => panic!("marked on a store that is away"),
                Err(e) => Call::PreProvider(e.to_string()),
            }
        })
        .await;
    assert!(matches!(r, Err(Error::Storage(_))), "{r:?}");
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Back: the next call on the key here takes the try over and runs.
    fail(0);
    let r = ledger
        .execute(&key, &fp(&body), "w", |d| {
            sent(d, Call::Succeeded(Response::new(200, b"ok".to_vec())))
        })
        .await;
    assert!(
        matches!(r, Ok(Executed::Answered { recorded: true, .. })),
        "{r:?}"
    );
    // Back within the second: the try is closed as revivable at once, so
    // a call on any replica revives it.
    let key = Key::new("c", "blip");
    let r = ledger
        .execute(&key, &fp(&body), "w", move |mut d| async move {
            // The mark's five tries within its second fail; the close's
            // first lands.
            fail(5);
            let e = d.send().await.unwrap_err();
            Call::PreProvider(e.to_string())
        })
        .await;
    assert!(matches!(r, Err(Error::Storage(_))), "{r:?}");
    let record = ledger.get(&key).await.unwrap().unwrap();
    assert!(record.is_revivable(), "{record:?}");
}

#[tokio::test]
async fn a_call_that_lost_its_lease_answers_what_the_ledger_recorded() {
    let clock = ManualClock::default();
    let config = Config::default();
    let ledger =
        Arc::new(AsyncLedger::with_clock(MemoryStore::new(), config, clock.clone()).unwrap());
    let body = serde_json::json!({});
    let key = Key::new("c", "paused");
    let other = ledger.clone();
    let (k, f) = (key.clone(), fp(&body));
    let r = ledger
        .execute(&key, &fp(&body), "pod-a", |mut d| async move {
            d.send().await.unwrap();
            // Frozen past the lease: another worker resolves the attempt
            // by the dispatch rule while this call still runs.
            clock.advance(config.lease_ttl * 2);
            let resolved = other
                .execute(&k, &f, "pod-b", |_| async { panic!("re-executed") })
                .await
                .unwrap();
            assert!(matches!(
                resolved,
                Executed::ProviderUnavailable { replayed: true, .. }
            ));
            Call::Succeeded(Response::new(200, b"too late".to_vec()))
        })
        .await
        .unwrap();
    // Not this call's own answer, which nobody else will ever see.
    assert!(
        matches!(r, Executed::ProviderUnavailable { replayed: true, .. }),
        "{r:?}"
    );
}

#[tokio::test]
async fn the_observer_is_told_each_durable_step() {
    let steps = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = steps.clone();
    let ledger =
        AsyncLedger::new(MemoryStore::new()).observe(move |_, step| seen.lock().push(step.name()));
    let body = serde_json::json!({});
    let run = |key: &'static str, call: Call| {
        let ledger = &ledger;
        let body = &body;
        async move {
            ledger
                .execute(&Key::new("c", key), &fp(body), "w", |mut d| async move {
                    if !matches!(call, Call::PreProvider(_)) {
                        d.send().await.unwrap();
                    }
                    call
                })
                .await
                .unwrap()
        }
    };
    let ok = || Call::Succeeded(Response::new(200, b"ok".to_vec()));
    let _ = run("a", ok()).await;
    let _ = run("a", ok()).await;
    let _ = run("b", Call::PreProvider("no credentials".into())).await;
    let _ = run("b", Call::Ambiguous("timeout".into())).await;
    assert_eq!(
        *steps.lock(),
        [
            "begun",
            "dispatched",
            "succeeded",
            "replayed",
            "begun",
            "failed_pre_provider",
            "revived",
            "dispatched",
            "provider_unavailable",
        ]
    );
}

#[tokio::test]
async fn a_send_that_failed_stays_failed_and_nothing_is_marked() {
    let clock = ManualClock::default();
    let config = Config::default();
    let ledger =
        Arc::new(AsyncLedger::with_clock(MemoryStore::new(), config, clock.clone()).unwrap());
    let body = serde_json::json!({});
    let key = Key::new("c", "retried-send");
    let other = ledger.clone();
    let provider_calls = Arc::new(AtomicUsize::new(0));
    let calls = provider_calls.clone();
    let r = ledger
        .execute(&key, &fp(&body), "pod-a", |mut d| async move {
            // Frozen past the lease before the mark; another worker
            // resolves the attempt as not dispatched.
            clock.advance(config.lease_ttl * 2);
            assert_eq!(other.recover().await.unwrap().len(), 1);
            let first = d.send().await.unwrap_err();
            assert!(matches!(first, Error::StaleLease { .. }), "{first:?}");
            assert!(!d.is_sent());
            // A call that retries the mark is refused again, with the same
            // error, and never told it may send.
            for _ in 0..3 {
                assert_eq!(d.send().await.unwrap_err(), first);
                assert!(!d.is_sent());
            }
            if d.send().await.is_ok() {
                calls.fetch_add(1, Ordering::SeqCst);
            }
            Call::PreProvider(first.to_string())
        })
        .await;
    assert_eq!(provider_calls.load(Ordering::SeqCst), 0);
    let record = ledger.get(&key).await.unwrap().unwrap();
    assert!(!record.ever_dispatched(), "{record:?}");
    assert!(record.is_revivable(), "{r:?} {record:?}");
}

#[tokio::test]
async fn a_send_hands_the_call_the_leases_fencing_token() {
    let ledger = AsyncLedger::new(MemoryStore::new());
    let body = serde_json::json!({});
    let key = Key::new("c", "fenced");
    let fingerprint = fp(&body);
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let run = |call: Call| {
        let seen = seen.clone();
        ledger.execute(&key, &fingerprint, "w", move |mut d| async move {
            let before = d.fence();
            if matches!(call, Call::PreProvider(_)) {
                seen.lock().push(before);
                return call;
            }
            let fence = d.send().await.unwrap();
            assert_eq!(fence, before);
            // Asked again after it landed: the same token, nothing new.
            assert_eq!(d.send().await.unwrap(), fence);
            assert!(d.is_sent());
            seen.lock().push(fence);
            call
        })
    };
    let _ = run(Call::PreProvider("no credentials".into()))
        .await
        .unwrap();
    let _ = run(Call::Succeeded(Response::new(200, b"ok".to_vec())))
        .await
        .unwrap();
    let seen = seen.lock().clone();
    let record = ledger.get(&key).await.unwrap().unwrap();
    assert_eq!(seen.len(), 2);
    // One incarnation, a greater token for the revived try's lease.
    assert!(seen.iter().all(|f| f.incarnation == record.incarnation));
    assert!(seen[1].token > seen[0].token, "{seen:?}");
    assert_eq!(
        seen[1].to_string().parse::<ate_ledger::Fence>(),
        Ok(seen[1])
    );
}

#[tokio::test]
async fn a_lease_that_never_expires_closes_without_a_panic() {
    let config = Config {
        lease_ttl: Duration::MAX,
        ..Config::default()
    };
    let ledger =
        AsyncLedger::with_clock(MemoryStore::new(), config, ManualClock::default()).unwrap();
    let body = serde_json::json!({});
    let key = Key::new("c", "forever");
    let r = ledger
        .execute(&key, &fp(&body), "w", |d| {
            sent(d, Call::Succeeded(Response::new(200, b"ok".to_vec())))
        })
        .await
        .unwrap();
    assert!(
        matches!(r, Executed::Answered { recorded: true, .. }),
        "{r:?}"
    );
    let record = ledger.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state.name(), "succeeded");
}
