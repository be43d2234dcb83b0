//! The durable store on redb (feature `redb`).

use std::path::Path;

use chrono::{DateTime, Utc};
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition,
    WriteTransaction,
};

use super::{Cutoff, Store, check_write, decode_stored};
use crate::{Error, Key, Record};

const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SCHEMA_KEY: &str = "schema_version";

const SCHEMA_VERSION: u64 = RedbStore::SCHEMA_VERSION;

fn storage<E: std::fmt::Display>(e: E) -> Error {
    Error::Storage(e.to_string())
}

/// A write transaction that commits in two phases (the data and its
/// commit slot, fsync; then the switch to that slot, fsync). With one
/// phase, a commit slot whose pages fail their checksums is taken for
/// a commit torn by a crash, and the open falls back to the commit
/// before it: an acknowledged transition (say, "dispatched") would
/// silently be undone. With two, the slot is switched only once its
/// pages are durable, so failing pages are corruption, and the open
/// says so.
fn begin_write(db: &Database) -> Result<WriteTransaction, Error> {
    let mut tx = db.begin_write().map_err(storage)?;
    tx.set_two_phase_commit(true);
    Ok(tx)
}

/// Why a file could not be opened: held by another owner, an I/O
/// failure (say, a directory it may not write), or content that is not
/// a ledger this build can read.
fn open_error(path: &Path, e: DatabaseError) -> Error {
    let path = path.display().to_string();
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            Error::AlreadyOpen { path }
        }
        // redb reports a file that is not a redb database as invalid
        // data: that is content, like corruption.
        DatabaseError::Storage(StorageError::Io(io))
            if io.kind() != std::io::ErrorKind::InvalidData =>
        {
            Error::Storage(format!("{path}: {io}"))
        }
        other => Error::Corrupt {
            what: path,
            detail: other.to_string(),
        },
    }
}

/// A durable store on redb: every transition is one write transaction,
/// committed with fsync before the call returns.
pub struct RedbStore {
    db: Database,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

impl RedbStore {
    /// The record schema this build writes and reads.
    pub const SCHEMA_VERSION: u64 = 1;

    /// Records a purge deletes per write transaction.
    const PURGE_BATCH: usize = 1_000;

    /// Opens (or creates) the store at `path`. A file that is not a
    /// redb database, is corrupt, or was written by a newer schema is an
    /// error; nothing is silently reinterpreted.
    ///
    /// The open verifies the checksum of every page, so it reads the
    /// whole file once (an open takes time in proportion to the file;
    /// `benches/NOTES.md` has the numbers): a file that was
    /// changed since redb wrote it (a flipped bit, an edit) is
    /// [`Error::Corrupt`], even after a crash, rather than a record read
    /// back with another value or a commit rolled back to the one
    /// before. Every commit is two-phase (two fsyncs) for that last
    /// guarantee.
    ///
    /// The store holds an exclusive lock on the file until it is
    /// dropped: a second open, from this process or another, fails with
    /// [`Error::AlreadyOpen`]. So the process that opened it is the only
    /// worker on it, and an attempt found open at start was left by a
    /// run that has ended ([`Ledger::recover_all`](crate::Ledger::recover_all)).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyOpen`] if another store holds the file;
    /// [`Error::Corrupt`] for a file that fails its checksums or is not
    /// a ledger; [`Error::UnknownSchema`] for a newer schema;
    /// [`Error::Storage`] if the file cannot be created or read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        // A plain open trusts a file that was closed cleanly, so a bit
        // flipped since in a record's value read back as another valid
        // record (measured: 83 of the 138 one-digit changes to a file
        // holding one record; 27 more made the open panic). With the
        // check, every page's checksum is verified at open: a file
        // altered since redb wrote it is `Corrupt`. It reads the whole
        // file once.
        let db = Database::builder()
            .set_check_integrity_on_open(true)
            .create(path)
            .map_err(|e| open_error(path, e))?;
        let tx = begin_write(&db)?;
        {
            let mut meta = tx.open_table(META).map_err(storage)?;
            let found = meta.get(SCHEMA_KEY).map_err(storage)?.map(|v| v.value());
            match found {
                None => {
                    meta.insert(SCHEMA_KEY, SCHEMA_VERSION).map_err(storage)?;
                }
                Some(v) if v == SCHEMA_VERSION => {}
                Some(v) => {
                    return Err(Error::UnknownSchema {
                        found: v,
                        supported: SCHEMA_VERSION,
                    });
                }
            }
            let _ = tx.open_table(RECORDS).map_err(storage)?;
        }
        tx.commit().map_err(storage)?;
        Ok(Self { db })
    }

    /// The record stored under `key` (`Key::encode`'s form).
    fn decode(key: &str, bytes: &[u8]) -> Result<Record, Error> {
        let (scope, id) = key.split_once('\0').ok_or_else(|| Error::Corrupt {
            what: format!("record {key:?}"),
            detail: "a stored key without its scope".into(),
        })?;
        decode_stored(&Key::new(scope, id), bytes)
    }
}

impl Store for RedbStore {
    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        let tx = self.db.begin_read().map_err(storage)?;
        let table = tx.open_table(RECORDS).map_err(storage)?;
        let k = key.encode();
        match table.get(k.as_str()).map_err(storage)? {
            None => Ok(None),
            Some(v) => Self::decode(&k, v.value()).map(Some),
        }
    }

    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
        let bytes = serde_json::to_vec(record).map_err(storage)?;
        let k = record.key.encode();
        let tx = begin_write(&self.db)?;
        {
            let mut table = tx.open_table(RECORDS).map_err(storage)?;
            let stored = match table.get(k.as_str()).map_err(storage)? {
                None => None,
                Some(v) => {
                    let stored = Self::decode(&k, v.value())?;
                    Some((stored.version, stored.incarnation))
                }
            };
            check_write(record, stored, expected)?;
            table
                .insert(k.as_str(), bytes.as_slice())
                .map_err(storage)?;
        }
        // redb's default durability fsyncs on commit.
        tx.commit().map_err(storage)?;
        Ok(())
    }

    fn open(&self) -> Result<Vec<Record>, Error> {
        let tx = self.db.begin_read().map_err(storage)?;
        let table = tx.open_table(RECORDS).map_err(storage)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(storage)? {
            let (k, v) = entry.map_err(storage)?;
            let record = Self::decode(k.value(), v.value())?;
            if !record.state.is_closed() {
                out.push(record);
            }
        }
        Ok(out)
    }

    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error> {
        let Some(cutoff) = cutoff.local() else {
            return Ok(0);
        };
        let doomed = self.ended_before(cutoff)?;
        self.remove_still_ended(&doomed, cutoff)
    }
}

impl RedbStore {
    /// The stored keys of records that ended before `cutoff`, found in
    /// a read transaction: a snapshot that does not hold up writers
    /// (scanning in the write transaction held every transition for
    /// the whole scan: 720 ms at 200,000 records).
    fn ended_before(&self, cutoff: DateTime<Utc>) -> Result<Vec<String>, Error> {
        let tx = self.db.begin_read().map_err(storage)?;
        let table = tx.open_table(RECORDS).map_err(storage)?;
        let mut doomed = Vec::new();
        for entry in table.iter().map_err(storage)? {
            let (k, v) = entry.map_err(storage)?;
            if Self::decode(k.value(), v.value())?.ended_before(cutoff) {
                doomed.push(k.value().to_owned());
            }
        }
        Ok(doomed)
    }

    /// Deletes those of `doomed` that still ended before `cutoff`, in
    /// small write transactions, so a transition waits for one batch at
    /// most. Each record is read again first: one may have been revived
    /// since the scan, and an open record is never deleted.
    fn remove_still_ended(&self, doomed: &[String], cutoff: DateTime<Utc>) -> Result<usize, Error> {
        let mut purged = 0;
        for batch in doomed.chunks(Self::PURGE_BATCH) {
            let tx = begin_write(&self.db)?;
            {
                let mut table = tx.open_table(RECORDS).map_err(storage)?;
                for k in batch {
                    let still = match table.get(k.as_str()).map_err(storage)? {
                        Some(v) => Self::decode(k, v.value())?.ended_before(cutoff),
                        None => false,
                    };
                    if still {
                        table.remove(k.as_str()).map_err(storage)?;
                        purged += 1;
                    }
                }
            }
            tx.commit().map_err(storage)?;
        }
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{
        Begin, Close, Config, Fingerprint, Ledger, State,
        clock::{Clock, ManualClock},
    };

    #[test]
    fn a_record_revived_between_the_purge_scan_and_its_delete_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RedbStore::open(dir.path().join("ledger.redb")).unwrap());
        let clock = ManualClock::default();
        let config = Config::default();
        let ledger =
            Ledger::with_clock(store.clone(), config, clock.clone()).expect("a valid config");
        let (key, fp) = (Key::new("t", "k"), Fingerprint("f".into()));
        let Begin::Started(lease) = ledger.begin(&key, &fp, "w1").unwrap() else {
            panic!("a new key starts")
        };
        ledger
            .close(&lease, Close::PreProvider("no credential".into()))
            .unwrap();
        clock.advance(config.retention + Duration::from_secs(1));
        let cutoff = clock.now() - chrono::TimeDelta::from_std(config.retention).unwrap();
        let doomed = store.ended_before(cutoff).unwrap();
        assert_eq!(doomed, [key.encode()], "ended past the retention");
        // A caller retries it (a revive) before the delete runs.
        ledger.revive(&key, &fp, "w1").unwrap();
        assert_eq!(store.remove_still_ended(&doomed, cutoff).unwrap(), 0);
        let kept = store
            .get(&key)
            .unwrap()
            .expect("an open record is never purged");
        assert_eq!(kept.state, State::InFlight);
    }
}
