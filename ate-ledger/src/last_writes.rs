//! What a ledger remembers of the records it last wrote as an owner, so
//! the owner's next transition (dispatch, renew, close) writes at once,
//! conditional on the version it wrote, instead of reading the record
//! first: one store round trip instead of two.
//!
//! Why that is exact: the write is the store's compare-and-swap on the
//! version, so it succeeds only if nothing wrote the record since; the
//! remembered record is then exactly the stored one, and every check the
//! read would have allowed (the lease still owns the try) holds of it. A
//! lost race, a check the remembered record fails, or anything but a write
//! to make, goes the usual way (read, check, write).
//!
//! Two things a read gives are kept beside the record:
//!
//! - The store's time (PostgreSQL's `now()`), as an offset from the
//!   ledger's clock measured at the read: the time of a remembered write is
//!   the clock plus that offset, off the store's by at most one round trip.
//! - Freshness: a remembered record is used for at most the lease's ttl
//!   after the read it was built on (so the offset is re-measured that
//!   often) and never longer than a quarter of the retention. A version repeats
//!   only in another incarnation of the key (purged, then begun again),
//!   and a purge takes the whole retention after the attempt ended, so
//!   within that bound the version alone tells the record the owner wrote.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use parking_lot::Mutex;

use crate::clock::delta;
use crate::config::Config;
use crate::model::owns;
use crate::{Key, Lease, Record};

/// The most records remembered; past it the stale ones are dropped, then
/// all (a service that begins attempts and never closes them).
const CAPACITY: usize = 4_096;

struct Entry {
    record: Record,
    /// The store's time minus the clock's, at the read it came from.
    offset: TimeDelta,
    /// The clock's time of that read.
    at: DateTime<Utc>,
}

/// The remembered records of one ledger, by key.
#[derive(Default)]
pub(crate) struct LastWrites(Mutex<HashMap<Key, Entry>>);

/// How many, not what: a ledger's `Debug` stays short, and without the
/// stored outcomes.
impl std::fmt::Debug for LastWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LastWrites")
            .field("records", &self.0.lock().len())
            .finish()
    }
}

impl LastWrites {
    /// How long a remembered record may be used: the lease's ttl, at most
    /// a quarter of the retention (see the module's docs).
    fn bound(config: &Config) -> TimeDelta {
        let quarter = config.retention / 4;
        delta(config.lease_ttl.min(quarter))
    }

    /// The record `lease` owns as this ledger last wrote it, with the
    /// store-time offset and the clock's time of the read both came from,
    /// if that read is fresh at the clock's `now` and the lease still owns
    /// the record.
    pub(crate) fn owned(
        &self,
        lease: &Lease,
        now: DateTime<Utc>,
        config: &Config,
    ) -> Option<(Record, TimeDelta, DateTime<Utc>)> {
        let entries = self.0.lock();
        let entry = entries.get(&lease.key)?;
        let age = now.signed_duration_since(entry.at);
        if age < TimeDelta::zero() || age >= Self::bound(config) {
            return None;
        }
        owns(&entry.record, lease).then(|| (entry.record.clone(), entry.offset, entry.at))
    }

    /// Remembers `record`, just written, built on a read at the clock's
    /// `at` that measured the store-time `offset`; an ended record is forgotten instead. An older
    /// version never replaces a newer one (two tasks of one owner).
    pub(crate) fn remember(
        &self,
        record: &Record,
        offset: TimeDelta,
        at: DateTime<Utc>,
        config: &Config,
    ) {
        let mut entries = self.0.lock();
        if record.state.is_closed() {
            entries.remove(&record.key);
            return;
        }
        if entries.get(&record.key).is_some_and(|known| {
            known.record.incarnation == record.incarnation && known.record.version >= record.version
        }) {
            return;
        }
        if entries.len() >= CAPACITY && !entries.contains_key(&record.key) {
            let bound = Self::bound(config);
            entries.retain(|_, e| at.signed_duration_since(e.at) < bound);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(
            record.key.clone(),
            Entry {
                record: record.clone(),
                offset,
                at,
            },
        );
    }

    /// Forgets the record of `key` if it is still at `version`.
    pub(crate) fn forget(&self, key: &Key, version: u64) {
        let mut entries = self.0.lock();
        if entries
            .get(key)
            .is_some_and(|e| e.record.version == version)
        {
            entries.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::store::{MemoryStore, Store};
    use crate::{Begin, Close, Error, Fingerprint, Ledger, State};

    /// A memory store that counts reads and writes.
    #[derive(Debug, Default)]
    struct Counted {
        inner: MemoryStore,
        gets: AtomicUsize,
        puts: AtomicUsize,
    }

    impl Counted {
        fn calls(&self) -> (usize, usize) {
            (
                self.gets.load(Ordering::SeqCst),
                self.puts.load(Ordering::SeqCst),
            )
        }
    }

    impl Store for Counted {
        fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            self.inner.get(key)
        }
        fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            self.inner.put(record, expected)
        }
        fn open(&self) -> Result<Vec<Record>, Error> {
            self.inner.open()
        }
        fn purge(&self, cutoff: crate::store::Cutoff) -> Result<usize, Error> {
            self.inner.purge(cutoff)
        }
    }

    /// A clock tests step by hand (one per ledger: two replicas).
    #[derive(Debug, Default)]
    struct Stepped(Mutex<TimeDelta>);

    impl Stepped {
        fn advance(&self, by: Duration) {
            *self.0.lock() += delta(by);
        }
    }

    impl Clock for Stepped {
        fn now(&self) -> DateTime<Utc> {
            DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000) + *self.0.lock()
        }
    }

    fn ledger(store: &Arc<Counted>) -> Ledger<Arc<Counted>, Stepped> {
        Ledger::with_clock(store.clone(), Config::default(), Stepped::default()).unwrap()
    }

    fn begin(ledger: &Ledger<Arc<Counted>, Stepped>, id: &str) -> Lease {
        let key = Key::new("t", id);
        match ledger.begin(&key, &Fingerprint("fp".into()), "me").unwrap() {
            Begin::Started(lease) => lease,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_owners_transitions_after_its_own_write_are_one_write_each() {
        let store = Arc::new(Counted::default());
        let ledger = ledger(&store);
        let lease = begin(&ledger, "k");
        assert_eq!(store.calls(), (1, 1));
        ledger.clock().advance(Duration::from_secs(5));
        let renewed = ledger.renew(&lease).unwrap();
        ledger.mark_dispatched(&renewed).unwrap();
        let closed = ledger
            .close(&renewed, Close::Succeeded("ok".into()))
            .unwrap();
        assert_eq!(store.calls(), (1, 4), "no read after the begin");
        // What was written is what the read path would have written.
        assert_eq!(closed.version, 4);
        assert_eq!(
            renewed.expires_at,
            ledger.clock().now() + TimeDelta::seconds(30)
        );
        assert_eq!(closed.tries[0].dispatched_at, Some(ledger.clock().now()));
        assert_eq!(ledger.get(&lease.key).unwrap(), Some(closed));
        // An ended record is not kept.
        assert!(ledger.written.0.lock().is_empty());
        assert!(format!("{ledger:?}").contains("written: LastWrites { records: 0 }"));
    }

    #[test]
    fn a_write_by_another_replica_sends_the_owner_back_to_a_read() {
        let store = Arc::new(Counted::default());
        let (a, b) = (ledger(&store), ledger(&store));
        let lease = begin(&a, "k");
        // The same lease renewed through another replica: still the owner.
        b.renew(&lease).unwrap();
        let before = store.calls();
        a.mark_dispatched(&lease).unwrap();
        // The remembered write lost the version race, then read, then wrote.
        assert_eq!(store.calls(), (before.0 + 1, before.1 + 2));
        let record = a.get(&lease.key).unwrap().unwrap();
        assert_eq!(record.version, 3);
        assert!(record.tries[0].dispatched_at.is_some());
        // Taken over by another replica: the remembered record still says
        // this lease owns the attempt, the store says it does not.
        let lease = begin(&a, "taken");
        b.recover_all().unwrap();
        assert!(matches!(
            a.mark_dispatched(&lease),
            Err(Error::StaleLease { .. })
        ));
        let record = a.get(&lease.key).unwrap().unwrap();
        assert!(matches!(record.state, State::FailedPreProvider { .. }));
        assert_eq!(record.tries[0].dispatched_at, None);
    }

    #[test]
    fn a_remembered_record_is_used_for_at_most_the_leases_ttl() {
        let store = Arc::new(Counted::default());
        let ledger = ledger(&store);
        let lease = begin(&ledger, "k");
        ledger.clock().advance(Duration::from_secs(29));
        let lease = ledger.renew(&lease).unwrap();
        assert_eq!(store.calls(), (1, 2));
        // 30 s after the begin's read: read again, even though this ledger
        // wrote the record last (1 s ago).
        ledger.clock().advance(Duration::from_secs(1));
        let lease = ledger.renew(&lease).unwrap();
        assert_eq!(store.calls(), (2, 3));
        ledger.renew(&lease).unwrap();
        assert_eq!(store.calls(), (2, 4));
        // A clock that stepped back does not make it fresher.
        ledger.clock().advance(Duration::ZERO);
        *ledger.clock().0.lock() -= TimeDelta::seconds(60);
        ledger.renew(&lease).unwrap();
        assert_eq!(store.calls(), (3, 5));
    }

    #[test]
    fn the_bound_is_the_ttl_at_most_a_quarter_of_the_retention() {
        let hour = Duration::from_secs(3600);
        let bound = |lease_ttl, retention| {
            LastWrites::bound(&Config {
                lease_ttl,
                retention,
            })
        };
        assert_eq!(bound(Duration::from_secs(30), hour), TimeDelta::seconds(30));
        assert_eq!(bound(Duration::MAX, hour), TimeDelta::minutes(15));
        assert_eq!(
            bound(Duration::MAX, Duration::MAX),
            delta(Duration::MAX / 4)
        );
    }

    #[test]
    fn a_full_memory_drops_the_stale_then_everything() {
        let store = Arc::new(Counted::default());
        let ledger = ledger(&store);
        for i in 0..CAPACITY {
            begin(&ledger, &i.to_string());
        }
        assert_eq!(ledger.written.0.lock().len(), CAPACITY);
        ledger.clock().advance(Duration::from_secs(31));
        let fresh = begin(&ledger, "fresh");
        assert_eq!(ledger.written.0.lock().len(), 1, "the stale ones dropped");
        ledger.clock().advance(Duration::from_secs(1));
        let before = store.calls();
        ledger.mark_dispatched(&fresh).unwrap();
        assert_eq!(store.calls(), (before.0, before.1 + 1));
    }
}
