//! A dispatch mark that timed out and lands later (feature `tokio`): a
//! statement that sat in a stalled connection and ran when it woke. The
//! worker knows it never sent, so the try is closed as unsent, never left
//! marked dispatched (which every retry would answer as a final 504 once
//! the lease ends).
#![cfg(feature = "tokio")]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ate_ledger::store::{AsyncStore, Cutoff, Read, StoreFuture};
use ate_ledger::{
    AsyncLedger, Call, Error, Executed, Fingerprint, Key, MemoryStore, Record, Response,
};
use chrono::{DateTime, Utc};

/// A store whose dispatch marks, while `hold` is set, time out without an
/// answer and land later: just before the next write that is not one.
#[derive(Debug, Default)]
struct LateMarks {
    inner: MemoryStore,
    hold: AtomicBool,
    late: Mutex<Vec<(Record, Option<u64>)>>,
    /// Every other write fails too (the store is away), and late marks
    /// wait for `land`.
    away: AtomicBool,
}

impl LateMarks {
    /// The marks that sat in the stalled connection run.
    async fn run_late(&self) {
        let late: Vec<_> = self.late.lock().unwrap().drain(..).collect();
        for (r, e) in late {
            let _ = AsyncStore::put(&self.inner, &r, e).await;
        }
    }

    /// The store is back: the late marks land.
    async fn land(&self) {
        self.away.store(false, Ordering::SeqCst);
        self.run_late().await;
    }
}

fn timed_out() -> Error {
    Error::Storage("postgres: write: no answer within 5s".into())
}

impl AsyncStore for LateMarks {
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
        AsyncStore::get(&self.inner, key)
    }
    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mark = !record.state.is_closed()
                && record
                    .tries
                    .last()
                    .is_some_and(|t| t.dispatched_at.is_some());
            if mark && self.hold.load(Ordering::SeqCst) {
                self.late.lock().unwrap().push((record.clone(), expected));
                return Err(timed_out());
            }
            if self.away.load(Ordering::SeqCst) {
                return Err(timed_out());
            }
            self.run_late().await;
            AsyncStore::put(&self.inner, record, expected).await
        })
    }
    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)> {
        AsyncStore::open(&self.inner)
    }
    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
        AsyncStore::purge(&self.inner, cutoff)
    }
}

fn fp() -> Fingerprint {
    Fingerprint::of_json(&serde_json::json!({}))
}

/// Runs `key` with every dispatch mark timing out (and, with `away`, every
/// other write failing too): the call, told the mark failed, sends
/// nothing. The store error `execute` answers.
async fn unsent(ledger: &AsyncLedger<LateMarks>, key: &Key, away: bool) {
    let store = ledger.store();
    let r = ledger
        .execute(key, &fp(), "w", move |mut d| async move {
            store.hold.store(true, Ordering::SeqCst);
            store.away.store(away, Ordering::SeqCst);
            let marked = d.send().await;
            store.hold.store(false, Ordering::SeqCst);
            match marked {
                Ok(_) => panic!("marked while every mark timed out"),
                Err(e) => Call::PreProvider(e.to_string()),
            }
        })
        .await;
    assert!(matches!(r, Err(Error::Storage(_))), "{r:?}");
}

/// Whether `key` reads closed as unsent (revivable), no try dispatched.
async fn closed_unsent(ledger: &AsyncLedger<LateMarks>, key: &Key) {
    let record = ledger.get(key).await.unwrap().unwrap();
    assert_eq!(record.state.name(), "failed_pre_provider", "{record:?}");
    assert!(
        record.tries.iter().all(|t| t.dispatched_at.is_none()),
        "{record:?}"
    );
}

/// The mark landed just before the close of the unsent try: the try is
/// closed as unsent, and a retry revives it and runs.
#[tokio::test(start_paused = true)]
async fn a_dispatch_mark_that_lands_after_its_timeout_never_makes_a_send() {
    let ledger = AsyncLedger::new(LateMarks::default());
    let key = Key::new("c", "late-mark");
    unsent(&ledger, &key, false).await;
    closed_unsent(&ledger, &key).await;
    let r = ledger
        .execute(&key, &fp(), "w", |mut d| async move {
            d.send().await.unwrap();
            Call::Succeeded(Response::new(200, b"ok".to_vec()))
        })
        .await;
    assert!(
        matches!(r, Ok(Executed::Answered { recorded: true, .. })),
        "{r:?}"
    );
}

/// The same, with the store away past the close's retries: the mark lands
/// only once it is back. `settle` closes the try as unsent while its lease
/// lasts, so no retry meets a try marked dispatched that was never sent.
#[tokio::test(start_paused = true)]
async fn a_dispatch_mark_that_lands_after_the_close_gave_up_is_settled() {
    let ledger = AsyncLedger::new(LateMarks::default());
    let key = Key::new("c", "later-mark");
    unsent(&ledger, &key, true).await;
    // Back: the mark lands after everything gave up.
    ledger.store().land().await;
    let record = ledger.get(&key).await.unwrap().unwrap();
    assert!(
        record.tries.iter().any(|t| t.dispatched_at.is_some()),
        "{record:?}"
    );
    assert_eq!(ledger.settle().await, 0);
    closed_unsent(&ledger, &key).await;
}
