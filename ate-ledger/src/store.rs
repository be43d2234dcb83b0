//! Where records live. Every write is a compare-and-swap on the record
//! version, so two processes or threads can never both win a transition.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use crate::error::Error;
use crate::{Key, Record};

/// A record store.
///
/// Shaped for a SQL implementation too: `get` is a `SELECT`, `put` an
/// `INSERT ... ON CONFLICT DO NOTHING` (expected `None`) or an
/// `UPDATE ... WHERE version = $expected` (checking the row count), `open`
/// an indexed scan on state, `purge` a `DELETE ... WHERE ended_at < $cutoff`
/// (`PgStore`, feature `postgres`, is exactly that).
///
/// `Debug` is required so that a [`Ledger`](crate::Ledger) over any store,
/// including `Arc<dyn Store>` (a store chosen at startup), is `Debug`.
pub trait Store: std::fmt::Debug + Send + Sync {
    /// The record for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the store cannot be read; [`Error::Corrupt`]
    /// for a record that does not decode or breaks the record invariants
    /// (never reinterpreted as another state).
    fn get(&self, key: &Key) -> Result<Option<Record>, Error>;

    /// Writes `record` iff the stored version is `expected` (`None`: no
    /// record yet) and, for an update, the stored record is of the same
    /// incarnation ([`Record::incarnation`]): a key purged and begun again
    /// may reach the version a stalled writer expects, and that writer's
    /// record must not replace the new one. Must be durable when it
    /// returns `Ok`. A mismatch of either is [`Error::VersionConflict`].
    ///
    /// # Errors
    ///
    /// [`Error::VersionConflict`] naming the expected and the stored
    /// version; [`Error::Storage`] if the write could not be made durable
    /// (then nothing was written).
    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error>;

    /// [`put`](Self::put), made only while the store's own clock (the
    /// time [`read`](Self::read) tells) is before `until`; after it,
    /// nothing is written and the answer is [`Error::LeaseExpired`].
    ///
    /// The ledger writes a dispatch mark this way, with the end of the
    /// lease it holds: a mark whose call timed out (the worker was told
    /// it failed and sent nothing) may still sit in a stalled connection,
    /// and must never land once the lease has ended, where nothing else
    /// would close the try as unsent. The condition is checked where the
    /// write is applied (in PostgreSQL, by the `UPDATE` against
    /// `clock_timestamp()`), so a write that arrives late is refused.
    ///
    /// The default is [`put`](Self::put): right for a store that tells
    /// no time ([`Read::now`] is `None`), whose writes are applied within
    /// the call. A store whose write can outlive its caller (over a
    /// network) and that tells its time must keep the condition (the
    /// conformance rule `fenced-write`).
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put), and [`Error::LeaseExpired`] past `until`.
    fn put_until(
        &self,
        record: &Record,
        expected: Option<u64>,
        until: DateTime<Utc>,
    ) -> Result<(), Error> {
        let _ = until;
        self.put(record, expected)
    }

    /// Every record that is still in flight (for recovery).
    ///
    /// # Errors
    ///
    /// As for [`get`](Self::get).
    fn open(&self) -> Result<Vec<Record>, Error>;

    /// Deletes closed records that ended before `cutoff` (by the clock
    /// that stamped their `ended_at`: see [`Cutoff`]); returns how many.
    /// Open records are never deleted.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the store cannot be written.
    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error>;

    /// [`get`](Self::get), with the store's own time where it keeps one
    /// every replica shares (PostgreSQL's `now()`, read in the same
    /// statement): leases are granted, checked and taken over at that time,
    /// so replicas whose clocks disagree still agree on every lease. The
    /// default has none: the ledger's clock decides.
    ///
    /// # Errors
    ///
    /// As for [`get`](Self::get).
    fn read(&self, key: &Key) -> Result<Read, Error> {
        Ok(Read {
            record: self.get(key)?,
            now: None,
        })
    }

    /// [`open`](Self::open), with the store's own time as for
    /// [`read`](Self::read).
    ///
    /// # Errors
    ///
    /// As for [`get`](Self::get).
    fn open_at(&self) -> Result<(Vec<Record>, Option<DateTime<Utc>>), Error> {
        Ok((self.open()?, None))
    }
}

/// Which ended records a purge deletes.
///
/// Records are stamped (`ended_at`) by the store's own time where it keeps
/// one and the ledger's clock defers to it (PostgreSQL's `now()`), else by
/// the ledger's clock; a purge must judge their age by the same clock, or a
/// replica whose clock runs an hour fast purges records an hour early (and
/// a client's retry executes again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cutoff {
    /// Those that ended before this time, on the clock that stamped them.
    Before(DateTime<Utc>),
    /// Those that ended more than `retention` ago by the store's own time
    /// (`ended_at < now() - retention` on PostgreSQL); a store without one
    /// uses `now`, the ledger's clock.
    Age {
        /// How long an ended record is kept.
        retention: std::time::Duration,
        /// The ledger's clock, for a store without a clock of its own.
        now: DateTime<Utc>,
    },
}

impl Cutoff {
    /// The cutoff on the ledger's clock: the time before which records
    /// ended, `None` if that lies before the first time chrono holds
    /// (nothing ended then: "keep forever").
    #[must_use]
    pub fn local(&self) -> Option<DateTime<Utc>> {
        match *self {
            Self::Before(at) => Some(at),
            Self::Age { retention, now } => now.checked_sub_signed(
                chrono::TimeDelta::from_std(retention).unwrap_or(chrono::TimeDelta::MAX),
            ),
        }
    }
}

/// A record as read, with the store's time if it tells it ([`Store::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The record, if there is one.
    pub record: Option<Record>,
    /// The store's time at the read, where it keeps one for every replica.
    pub now: Option<DateTime<Utc>>,
}

/// The future of an [`AsyncStore`] call.
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Error>> + Send + 'a>>;

/// A record store for async services: [`Store`]'s contract, each call a
/// future, so a tokio worker never blocks on it (`AsyncPgStore` on a
/// `deadpool-postgres` pool, `MemoryStore`, or a blocking store behind
/// `Blocking`, feature `tokio`). Boxed futures keep it usable as
/// `Arc<dyn AsyncStore>` (a store chosen at startup).
pub trait AsyncStore: std::fmt::Debug + Send + Sync {
    /// [`Store::read`]: the record of `key` and the store's time.
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read>;

    /// [`Store::put`]: writes `record` iff the stored version is
    /// `expected`, durably; a mismatch is [`Error::VersionConflict`].
    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()>;

    /// [`Store::put_until`]: written only while the store's own clock is
    /// before `until`, else [`Error::LeaseExpired`]. The default is
    /// [`put`](Self::put), for a store that tells no time.
    fn put_until<'a>(
        &'a self,
        record: &'a Record,
        expected: Option<u64>,
        until: DateTime<Utc>,
    ) -> StoreFuture<'a, ()> {
        let _ = until;
        self.put(record, expected)
    }

    /// [`Store::open_at`]: every in-flight record, and the store's time.
    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)>;

    /// [`Store::purge`].
    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize>;
}

/// `AsyncStore` for a pointer to a store: every call forwarded.
macro_rules! forward_async_store {
    ($($pointer:ty),*) => {$(
        impl<T: AsyncStore + ?Sized> AsyncStore for $pointer {
            fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
                (**self).get(key)
            }
            fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
                (**self).put(record, expected)
            }
            fn put_until<'a>(
                &'a self,
                record: &'a Record,
                expected: Option<u64>,
                until: DateTime<Utc>,
            ) -> StoreFuture<'a, ()> {
                (**self).put_until(record, expected, until)
            }
            fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)> {
                (**self).open()
            }
            fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
                (**self).purge(cutoff)
            }
        }
    )*};
}

forward_async_store!(&T, std::sync::Arc<T>);

/// In memory, nothing waits: the async front uses it as is.
impl AsyncStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
        Box::pin(std::future::ready(Store::read(self, key)))
    }
    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Store::put(self, record, expected)))
    }
    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)> {
        Box::pin(std::future::ready(Store::open_at(self)))
    }
    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
        Box::pin(std::future::ready(Store::purge(self, cutoff)))
    }
}

/// Whether `record` may replace the `stored` record (its version and
/// incarnation, `None` if there is none) when the writer expects version
/// `expected`: the versions agree and, for an update, so do the
/// incarnations. A record of another incarnation at the expected version
/// (the key was purged and begun again while the writer stalled) is a
/// conflict too.
pub(crate) fn check_write(
    record: &Record,
    stored: Option<(u64, u64)>,
    expected: Option<u64>,
) -> Result<(), Error> {
    let same = match (stored, expected) {
        (None, None) => true,
        (Some((version, incarnation)), Some(e)) => {
            version == e && incarnation == record.incarnation
        }
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(Error::VersionConflict {
            key: record.key.to_string(),
            expected,
            found: stored.map(|(version, _)| version),
        })
    }
}

/// A record as a durable store keeps it (JSON), read back for `key`: one
/// that does not decode, is stored under another key, or breaks the
/// record invariants is [`Error::Corrupt`], never reinterpreted.
#[cfg(any(feature = "redb", feature = "postgres", feature = "postgres-async"))]
pub(crate) fn decode_stored(key: &Key, bytes: &[u8]) -> Result<Record, Error> {
    let corrupt = |detail: String| Error::Corrupt {
        what: format!("record {key}"),
        detail,
    };
    let record: Record = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if record.key != *key {
        return Err(corrupt(format!(
            "stored under another key ({})",
            record.key
        )));
    }
    record.check_invariants().map_err(corrupt)?;
    Ok(record)
}

/// An in-memory store (tests, single-process services that accept losing
/// the ledger on restart).
#[derive(Debug, Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<Key, Record>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Store for MemoryStore {
    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        Ok(self.records.lock().get(key).cloned())
    }

    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
        let mut records = self.records.lock();
        check_write(
            record,
            records.get(&record.key).map(|r| (r.version, r.incarnation)),
            expected,
        )?;
        records.insert(record.key.clone(), record.clone());
        Ok(())
    }

    fn open(&self) -> Result<Vec<Record>, Error> {
        Ok(self
            .records
            .lock()
            .values()
            .filter(|r| !r.state.is_closed())
            .cloned()
            .collect())
    }

    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error> {
        let Some(cutoff) = cutoff.local() else {
            return Ok(0);
        };
        let mut records = self.records.lock();
        let before = records.len();
        records.retain(|_, r| !r.ended_before(cutoff));
        Ok(before - records.len())
    }
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        (**self).get(key)
    }
    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
        (**self).put(record, expected)
    }
    fn put_until(
        &self,
        record: &Record,
        expected: Option<u64>,
        until: DateTime<Utc>,
    ) -> Result<(), Error> {
        (**self).put_until(record, expected, until)
    }
    fn open(&self) -> Result<Vec<Record>, Error> {
        (**self).open()
    }
    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error> {
        (**self).purge(cutoff)
    }
    fn read(&self, key: &Key) -> Result<Read, Error> {
        (**self).read(key)
    }
    fn open_at(&self) -> Result<(Vec<Record>, Option<DateTime<Utc>>), Error> {
        (**self).open_at()
    }
}

mod as_async;
#[cfg(feature = "tokio")]
mod blocking;
pub(crate) use as_async::{AsAsync, run_ready};
#[cfg(feature = "redb")]
mod durable;
#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "postgres-async")]
mod pg_async;
#[cfg(any(feature = "postgres", feature = "postgres-async"))]
mod pg_sql;
#[cfg(feature = "tokio")]
pub use blocking::Blocking;
#[cfg(feature = "redb")]
pub use durable::RedbStore;
#[cfg(feature = "postgres")]
pub use pg::PgStore;
#[cfg(feature = "postgres-async")]
pub use pg_async::AsyncPgStore;
