//! [`Blocking`]: a blocking [`Store`] (a `RedbStore`, which fsyncs) as an
//! [`AsyncStore`], on tokio's blocking pool.

use std::sync::Arc;

use super::{AsyncStore, Cutoff, Read, Store, StoreFuture};
use crate::error::Error;
use crate::{Key, Record};

/// A blocking [`Store`] (a `RedbStore`, which fsyncs) as an
/// [`AsyncStore`]: each call runs on tokio's blocking pool, so it never
/// holds a runtime worker.
#[derive(Debug)]
pub struct Blocking<S: ?Sized>(pub Arc<S>);

impl<S: ?Sized> Clone for Blocking<S> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

fn joined<T>(r: Result<Result<T, Error>, tokio::task::JoinError>) -> Result<T, Error> {
    r.map_err(|e| Error::Storage(format!("a blocking store call failed: {e}")))?
}

impl<S: Store + ?Sized + 'static> AsyncStore for Blocking<S> {
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
        let (store, key) = (self.0.clone(), key.clone());
        Box::pin(async move { joined(tokio::task::spawn_blocking(move || store.read(&key)).await) })
    }

    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
        let (store, record) = (self.0.clone(), record.clone());
        Box::pin(async move {
            joined(tokio::task::spawn_blocking(move || store.put(&record, expected)).await)
        })
    }

    fn put_until<'a>(
        &'a self,
        record: &'a Record,
        expected: Option<u64>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreFuture<'a, ()> {
        let (store, record) = (self.0.clone(), record.clone());
        Box::pin(async move {
            joined(
                tokio::task::spawn_blocking(move || store.put_until(&record, expected, until))
                    .await,
            )
        })
    }

    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<chrono::DateTime<chrono::Utc>>)> {
        let store = self.0.clone();
        Box::pin(async move { joined(tokio::task::spawn_blocking(move || store.open_at()).await) })
    }

    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
        let store = self.0.clone();
        Box::pin(
            async move { joined(tokio::task::spawn_blocking(move || store.purge(cutoff)).await) },
        )
    }
}
