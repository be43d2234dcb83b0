//! The store conformance suite (`testing::conformance`) on every store the
//! crate ships, and proof that it catches the faults it names.

use std::sync::Arc;

use ate_ledger::store::{Cutoff, Read, Store};
use ate_ledger::testing::conformance;
use ate_ledger::{Error, Key, MemoryStore, PgStore, Record, RedbStore};

#[test]
fn the_memory_store_keeps_every_rule() {
    conformance::check(MemoryStore::new()).unwrap();
}

#[test]
fn the_redb_store_keeps_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    conformance::check(RedbStore::open(dir.path().join("l.redb")).unwrap()).unwrap();
}

#[test]
fn pg_store_keeps_every_rule() {
    let db = ate_ledger::testing::TestDatabase::new();
    conformance::check(PgStore::connect(db.url()).unwrap()).unwrap();
}

#[tokio::test]
async fn the_async_pg_store_keeps_every_rule() {
    let db = ate_ledger::testing::TestDatabase::new();
    let store = ate_ledger::AsyncPgStore::connect(db.url(), 4)
        .await
        .unwrap();
    conformance::check_async(store).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocking_redb_store_keeps_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    let store = ate_ledger::Blocking(Arc::new(
        RedbStore::open(dir.path().join("l.redb")).unwrap(),
    ));
    conformance::check_async(store).await.unwrap();
}

/// A memory store with one fault switched on.
#[derive(Debug, Default)]
struct Faulty {
    inner: MemoryStore,
    fault: Fault,
    gone: parking_lot::Mutex<std::collections::HashSet<Key>>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Fault {
    #[default]
    None,
    /// Checks the version only, as PostgreSQL's update did.
    VersionOnly,
    /// Purges open records too.
    PurgesOpen,
    /// Tells a time of its own but purges by the ledger's.
    PurgesByTheLedgersClock,
    /// Tells a time of its own, purges by it, but writes a fenced write
    /// whenever it arrives (as the PostgreSQL stores did).
    Unfenced,
}

impl Store for Faulty {
    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        if self.gone.lock().contains(key) {
            return Ok(None);
        }
        self.inner.get(key)
    }
    fn read(&self, key: &Key) -> Result<Read, Error> {
        let mut read = Read {
            record: self.get(key)?,
            now: None,
        };
        if matches!(self.fault, Fault::PurgesByTheLedgersClock | Fault::Unfenced) {
            read.now = Some(chrono::Utc::now());
        }
        Ok(read)
    }
    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
        if self.fault == Fault::VersionOnly
            && let Some(stored) = self.inner.get(&record.key)?
            && Some(stored.version) == expected
        {
            let mut same = record.clone();
            same.incarnation = stored.incarnation;
            if let Some(lease) = &mut same.lease {
                lease.incarnation = stored.incarnation;
            }
            self.inner.put(&same, expected)?;
            return Ok(());
        }
        self.inner.put(record, expected)
    }
    fn open(&self) -> Result<Vec<Record>, Error> {
        self.inner.open()
    }
    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error> {
        if self.fault == Fault::Unfenced {
            // By its own time, which it tells.
            let own = match cutoff {
                Cutoff::Age { retention, .. } => Cutoff::Age {
                    retention,
                    now: chrono::Utc::now(),
                },
                other => other,
            };
            return self.inner.purge(own);
        }
        let mut n = self.inner.purge(cutoff)?;
        if self.fault == Fault::PurgesOpen {
            // Deletes the open records too (from every reader's view).
            let mut gone = self.gone.lock();
            for r in self.inner.open()? {
                n += usize::from(gone.insert(r.key));
            }
        }
        Ok(n)
    }
}

#[test]
fn the_suite_names_the_rule_a_faulty_store_breaks() {
    for (fault, rule) in [
        (Fault::VersionOnly, "update-on-incarnation"),
        (Fault::PurgesOpen, "purge-ended-only"),
        (
            Fault::PurgesByTheLedgersClock,
            "purge-by-the-stamping-clock",
        ),
        (Fault::Unfenced, "fenced-write"),
    ] {
        let store = Faulty {
            fault,
            ..Faulty::default()
        };
        let e = conformance::check(store).unwrap_err();
        assert_eq!(e.rule, rule, "{fault:?}: {e}");
    }
    conformance::check(Faulty::default()).unwrap();
}
