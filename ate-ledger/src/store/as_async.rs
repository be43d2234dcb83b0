//! [`AsAsync`]: a blocking [`Store`] seen as an [`AsyncStore`] whose futures
//! are ready at once, and [`run_ready`], which runs such a future: how the
//! sync [`Ledger`](crate::Ledger) drives the one state machine.

use std::future::Future;
use std::task::{Context, Poll};

use chrono::{DateTime, Utc};

use super::{AsyncStore, Cutoff, Read, Store, StoreFuture};
use crate::Record;
use crate::model::Key;

/// Runs a future whose every await is ready at once (the state machine
/// over a [`Store`]): it finishes on its first poll.
pub(crate) fn run_ready<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        // Not reached over a `Store`; a store that does pend is polled
        // again rather than lost.
        std::thread::yield_now();
    }
}

/// A [`Store`] seen as an [`AsyncStore`] whose futures are ready at once.
#[derive(Debug)]
pub(crate) struct AsAsync<'a, S: ?Sized>(pub(crate) &'a S);

impl<S: Store + ?Sized> AsyncStore for AsAsync<'_, S> {
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
        Box::pin(std::future::ready(self.0.read(key)))
    }

    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(self.0.put(record, expected)))
    }

    fn put_until<'a>(
        &'a self,
        record: &'a Record,
        expected: Option<u64>,
        until: DateTime<Utc>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(
            self.0.put_until(record, expected, until),
        ))
    }

    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)> {
        Box::pin(std::future::ready(self.0.open_at()))
    }

    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
        Box::pin(std::future::ready(self.0.purge(cutoff)))
    }
}
