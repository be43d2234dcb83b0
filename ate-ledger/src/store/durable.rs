//! The durable store on redb (feature `redb`). A write that answers `Ok`
//! is on disk (committed with fsync, alone or in a group commit), and one
//! that answers an error wrote nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use chrono::{DateTime, Utc};
use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition,
    WriteTransaction,
};

use super::{Cutoff, Store, check_write, decode_stored};
#[cfg(feature = "tokio")]
use super::{Read, StoreFuture};
use crate::error::Error;
use crate::{Key, Record};

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

/// A durable store on redb: every write is committed with fsync before
/// the call returns.
///
/// Concurrent writes share commits (group commit): a write that finds no
/// commit under way commits at once, on the caller's thread; writes that
/// arrive while one is under way wait together, and the store's committer
/// thread commits them all in the next one. Each caller is answered only
/// once the commit holding its write is durable, and concurrent
/// transitions share its two fsyncs instead of queueing for a commit
/// each. Each write keeps its own compare-and-swap: a batch applies its
/// writes in the order they came, as if one after another, and a write
/// that conflicts is refused alone.
pub struct RedbStore {
    db: Db,
    group: Arc<Group>,
    committer: Option<std::thread::JoinHandle<()>>,
}

/// The writes waiting for a commit, and who may commit.
#[derive(Default)]
struct Group {
    queue: Mutex<Queue>,
    /// Tells the committer there may be a batch to take (or the store is
    /// closing).
    wake: Condvar,
    commits: AtomicU64,
    writes: AtomicU64,
}

#[derive(Default)]
struct Queue {
    writes: Vec<Write>,
    /// A commit is under way (a caller's own, or the committer's).
    committing: bool,
    /// The store is being dropped: the committer ends once idle.
    closed: bool,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("commits", &self.group.commits.load(Ordering::Relaxed))
            .field("writes", &self.group.writes.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The file is closed (its lock released) when the store is dropped: the
/// committer finishes the writes it holds, then ends.
impl Drop for RedbStore {
    fn drop(&mut self) {
        self.group.queue.lock().closed = true;
        self.group.wake.notify_all();
        if let Some(committer) = self.committer.take() {
            let _ = committer.join();
        }
    }
}

/// One write: the record, as stored, and the version it expects.
struct Pending {
    record: Record,
    bytes: Vec<u8>,
    expected: Option<u64>,
}

/// A write waiting for the committer, and where its answer goes.
struct Write {
    pending: Pending,
    reply: Reply,
}

/// Where a write's answer goes.
enum Reply {
    Blocking(mpsc::SyncSender<Result<(), Error>>),
    #[cfg(feature = "tokio")]
    Async(tokio::sync::oneshot::Sender<Result<(), Error>>),
}

impl Reply {
    fn send(self, answer: Result<(), Error>) {
        // A caller that stopped waiting (a dropped future) needs no answer.
        match self {
            Self::Blocking(to) => drop(to.send(answer)),
            #[cfg(feature = "tokio")]
            Self::Async(to) => drop(to.send(answer)),
        }
    }
}

/// The most writes one commit takes (a bound on one commit's time).
const MAX_BATCH: usize = 1_024;

fn stopped() -> Error {
    Error::Storage("the redb committer has stopped".into())
}

impl Group {
    /// Commits `batch` and counts it. When the engine failed the whole
    /// batch and the file is latched by that I/O error (redb refuses
    /// every write after one until the database is reopened), the store
    /// reopens it, with the same integrity check as [`RedbStore::open`],
    /// and answers each write by what the reopened file holds: a write
    /// whose commit reached the disk before the error is answered `Ok`, so
    /// an error still means nothing was written.
    fn commit(&self, db: &Db, batch: &[&Pending]) -> Vec<Result<(), Error>> {
        let answers = match db.database() {
            Ok(database) => commit(&database, batch),
            Err(e) => vec![Err(e); batch.len()],
        };
        let engine_failed =
            !batch.is_empty() && answers.iter().all(|a| matches!(a, Err(Error::Storage(_))));
        let answers = if engine_failed && db.recover() {
            batch
                .iter()
                .zip(answers)
                .map(|(w, answer)| match db.get(&w.record.key) {
                    Ok(Some(stored))
                        if stored.version == w.record.version && stored == w.record =>
                    {
                        Ok(())
                    }
                    _ => answer,
                })
                .collect()
        } else {
            answers
        };
        // Shown while writes fail for the engine's reasons, cleared by the
        // first commit that lands.
        let engine_error = answers.first().and_then(|a| match a {
            Err(Error::Storage(why))
                if answers.iter().all(|a| matches!(a, Err(Error::Storage(_)))) =>
            {
                Some(why.clone())
            }
            _ => None,
        });
        let mut fault = db.0.fault.lock();
        if let Some(why) = engine_error {
            fault.get_or_insert(why);
        } else if answers.iter().any(Result::is_ok) {
            *fault = None;
        }
        drop(fault);
        let landed = answers.iter().filter(|a| a.is_ok()).count() as u64;
        if landed > 0 {
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.writes.fetch_add(landed, Ordering::Relaxed);
        }
        answers
    }

    /// Gives up the right to commit; wakes the committer if writes came
    /// meanwhile.
    fn done_committing(&self) {
        let mut queue = self.queue.lock();
        queue.committing = false;
        let more = !queue.writes.is_empty();
        drop(queue);
        if more {
            self.wake.notify_one();
        }
    }

    /// Queues `pending` for the committer, which answers through `reply`
    /// (at once with an error if the store is closing).
    #[cfg(any(feature = "tokio", test))]
    fn queue(&self, pending: Pending, reply: Reply) {
        let mut queue = self.queue.lock();
        if queue.closed {
            drop(queue);
            reply.send(Err(stopped()));
            return;
        }
        queue.writes.push(Write { pending, reply });
        drop(queue);
        self.wake.notify_one();
    }

    /// The blocking caller's write: committed at once on this thread when
    /// no commit is under way, else left to the committer.
    fn write_now(&self, db: &Db, pending: Pending) -> Result<(), Error> {
        let mut queue = self.queue.lock();
        if queue.closed {
            return Err(stopped());
        }
        if !queue.committing && queue.writes.is_empty() {
            queue.committing = true;
            drop(queue);
            let answer = self
                .commit(db, &[&pending])
                .pop()
                .unwrap_or_else(|| Err(stopped()));
            self.done_committing();
            return answer;
        }
        let (reply, answer) = mpsc::sync_channel(1);
        queue.writes.push(Write {
            pending,
            reply: Reply::Blocking(reply),
        });
        drop(queue);
        self.wake.notify_one();
        answer.recv().unwrap_or_else(|_| Err(stopped()))
    }

    /// The committer: takes the writes waiting whenever no commit is under
    /// way, commits them together and answers each; until the store closes.
    fn commit_loop(&self, db: &Db) {
        loop {
            let batch: Vec<Write> = {
                let mut queue = self.queue.lock();
                loop {
                    if !queue.committing && !queue.writes.is_empty() {
                        break;
                    }
                    if queue.closed && !queue.committing && queue.writes.is_empty() {
                        return;
                    }
                    self.wake.wait(&mut queue);
                }
                queue.committing = true;
                let n = queue.writes.len().min(MAX_BATCH);
                queue.writes.drain(..n).collect()
            };
            let pending: Vec<&Pending> = batch.iter().map(|w| &w.pending).collect();
            let answers = self.commit(db, &pending);
            self.done_committing();
            for (w, answer) in batch.into_iter().zip(answers) {
                w.reply.send(answer);
            }
        }
    }
}

/// Applies `batch` in one write transaction and commits it: one answer per
/// write. A write refused by its compare-and-swap (or whose stored record
/// is corrupt) changes nothing and is answered alone; a failure of the
/// engine fails the whole batch, and nothing of it is written.
fn commit(db: &Database, batch: &[&Pending]) -> Vec<Result<(), Error>> {
    let all = |e: Error| vec![Err(e); batch.len()];
    let tx = match begin_write(db) {
        Ok(tx) => tx,
        Err(e) => return all(e),
    };
    let mut answers = Vec::with_capacity(batch.len());
    {
        let mut table = match tx.open_table(RECORDS) {
            Ok(t) => t,
            Err(e) => return all(storage(e)),
        };
        for w in batch {
            match apply(&mut table, w) {
                Err(e @ Error::Storage(_)) => return all(e),
                answer => answers.push(answer),
            }
        }
    }
    // redb's default durability fsyncs on commit.
    match tx.commit() {
        Ok(()) => answers,
        Err(e) => all(storage(e)),
    }
}

/// One write's compare-and-swap inside the batch's transaction.
fn apply(table: &mut redb::Table<'_, &str, &[u8]>, w: &Pending) -> Result<(), Error> {
    let k = w.record.key.encode();
    let stored = match table.get(k.as_str()).map_err(storage)? {
        None => None,
        Some(v) => {
            let stored = RedbStore::decode(&k, v.value())?;
            Some((stored.version, stored.incarnation))
        }
    };
    check_write(&w.record, stored, w.expected)?;
    table
        .insert(k.as_str(), w.bytes.as_slice())
        .map_err(storage)?;
    Ok(())
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
        let owned: PathBuf = path.to_owned();
        Self::open_with(Box::new(move || {
            Database::builder()
                .set_check_integrity_on_open(true)
                .create(&owned)
                .map_err(|e| open_error(&owned, e))
        }))
    }

    /// Opens the store with `opener`, which [`open`](Self::open) calls
    /// again to reopen the file after an I/O error.
    fn open_with(opener: Opener) -> Result<Self, Error> {
        let db = prepare(opener()?)?;
        let db = Db(Arc::new(Shared {
            current: RwLock::new(Some(Arc::new(db))),
            opener,
            fault: Mutex::new(None),
        }));
        let group = Arc::new(Group::default());
        let committer = {
            let (db, group) = (db.clone(), group.clone());
            std::thread::Builder::new()
                .name("ate-ledger-redb-commit".into())
                .spawn(move || group.commit_loop(&db))
                .map_err(|e| Error::Storage(format!("cannot start the redb committer: {e}")))?
        };
        Ok(Self {
            db,
            group,
            committer: Some(committer),
        })
    }

    /// The I/O error that keeps the store from writing, while it lasts:
    /// redb refuses every write after one (a disk that filled, a failed
    /// fsync) until the file is reopened. The store reopens it at the next
    /// write (and read) and this turns `None` again once that succeeds.
    /// Meanwhile every write fails with [`Error::Storage`]: show it where
    /// the operator looks (the example service exports it as the
    /// `ate_ledger_store_fault` metric).
    pub fn fault(&self) -> Option<String> {
        self.db.0.fault.lock().clone()
    }
}

/// Opens the database (again).
type Opener = Box<dyn Fn() -> Result<Database, Error> + Send + Sync>;

/// Checks a freshly opened database's schema (writing it to a new one) and
/// makes sure its tables exist.
fn prepare(db: Database) -> Result<Database, Error> {
    {
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
    }
    Ok(db)
}

impl RedbStore {
    /// The record stored under `key` (`Key::encode`'s form).
    fn decode(key: &str, bytes: &[u8]) -> Result<Record, Error> {
        let (scope, id) = key.split_once('\0').ok_or_else(|| Error::Corrupt {
            what: format!("record {key:?}"),
            detail: "a stored key without its scope".into(),
        })?;
        decode_stored(&Key::new(scope, id), bytes)
    }
}

/// The database, shared by the store (reads, purges) and its committer
/// (writes): cheap to clone into a blocking task. It can be reopened in
/// place after an I/O error latched it.
#[derive(Clone)]
struct Db(Arc<Shared>);

struct Shared {
    /// The open database; `None` while a reopen has not succeeded.
    current: RwLock<Option<Arc<Database>>>,
    opener: Opener,
    /// Why the store cannot write, while it cannot.
    fault: Mutex<Option<String>>,
}

/// How long a reopen waits for reads still holding the old database.
const REOPEN_WAIT: Duration = Duration::from_secs(5);

/// Whether `e` is redb's latch after an I/O error: every write refused
/// until the database is reopened.
fn latched(e: redb::TransactionError) -> bool {
    matches!(redb::Error::from(e), redb::Error::PreviousIo)
}

impl Db {
    /// The open database, reopening it first if an earlier reopen failed.
    fn database(&self) -> Result<Arc<Database>, Error> {
        if let Some(db) = self.0.current.read().as_ref() {
            return Ok(db.clone());
        }
        self.reopen()?;
        self.0
            .current
            .read()
            .clone()
            .ok_or_else(|| Error::Storage("the redb file is not open".into()))
    }

    /// After a failed commit: if redb has latched the file, reopens it.
    /// Whether the store can write again.
    fn recover(&self) -> bool {
        let Some(db) = self.0.current.read().clone() else {
            return self.reopen().is_ok();
        };
        let probe = db.begin_write();
        drop(db);
        match probe {
            Ok(_) => true,
            Err(e) => latched(e) && self.reopen().is_ok(),
        }
    }

    /// Closes the database and opens it again (the same integrity check as
    /// the first open), once reads still using the old one are done. Notes
    /// the fault while it cannot.
    fn reopen(&self) -> Result<(), Error> {
        let mut current = self.0.current.write();
        if let Some(old) = current.take() {
            // The file's lock is released only when the last handle goes.
            let deadline = Instant::now() + REOPEN_WAIT;
            let mut old = old;
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(still) if Instant::now() < deadline => {
                        old = still;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(still) => {
                        *current = Some(still);
                        let why =
                            "redb latched an I/O error and reads still hold the file".to_owned();
                        *self.0.fault.lock() = Some(why.clone());
                        return Err(Error::Storage(why));
                    }
                }
            }
        }
        match (self.0.opener)().and_then(prepare) {
            Ok(db) => {
                *current = Some(Arc::new(db));
                *self.0.fault.lock() = None;
                Ok(())
            }
            Err(e) => {
                *self.0.fault.lock() = Some(format!(
                    "redb latched an I/O error and the file cannot be reopened yet: {e}"
                ));
                Err(e)
            }
        }
    }

    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        let tx = self.database()?.begin_read().map_err(storage)?;
        let table = tx.open_table(RECORDS).map_err(storage)?;
        let k = key.encode();
        match table.get(k.as_str()).map_err(storage)? {
            None => Ok(None),
            Some(v) => RedbStore::decode(&k, v.value()).map(Some),
        }
    }

    fn open(&self) -> Result<Vec<Record>, Error> {
        let tx = self.database()?.begin_read().map_err(storage)?;
        let table = tx.open_table(RECORDS).map_err(storage)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(storage)? {
            let (k, v) = entry.map_err(storage)?;
            let record = RedbStore::decode(k.value(), v.value())?;
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

    /// The stored keys of records that ended before `cutoff`, found in
    /// a read transaction: a snapshot that does not hold up writers
    /// (scanning in the write transaction held every transition for
    /// the whole scan: 720 ms at 200,000 records).
    fn ended_before(&self, cutoff: DateTime<Utc>) -> Result<Vec<String>, Error> {
        let tx = self.database()?.begin_read().map_err(storage)?;
        let table = tx.open_table(RECORDS).map_err(storage)?;
        let mut doomed = Vec::new();
        for entry in table.iter().map_err(storage)? {
            let (k, v) = entry.map_err(storage)?;
            if RedbStore::decode(k.value(), v.value())?.ended_before(cutoff) {
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
        for batch in doomed.chunks(RedbStore::PURGE_BATCH) {
            let tx = begin_write(&*self.database()?)?;
            {
                let mut table = tx.open_table(RECORDS).map_err(storage)?;
                for k in batch {
                    let still = match table.get(k.as_str()).map_err(storage)? {
                        Some(v) => RedbStore::decode(k, v.value())?.ended_before(cutoff),
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

impl Store for RedbStore {
    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        self.db.get(key)
    }

    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
        let pending = pending(record, expected)?;
        self.group.write_now(&self.db, pending)
    }

    fn open(&self) -> Result<Vec<Record>, Error> {
        self.db.open()
    }

    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error> {
        self.db.purge(cutoff)
    }
}

/// The async front (feature `tokio`) on redb without a blocking thread per
/// write: a write awaits the committer's answer; reads and purges run on
/// tokio's blocking pool (they may touch the disk).
#[cfg(feature = "tokio")]
impl crate::store::AsyncStore for RedbStore {
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
        let (db, key) = (self.db.clone(), key.clone());
        Box::pin(async move {
            let record = blocking(move || db.get(&key)).await?;
            Ok(Read { record, now: None })
        })
    }

    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            // Never a commit on a runtime worker: the committer's, always.
            let (reply, answer) = tokio::sync::oneshot::channel();
            self.group
                .queue(pending(record, expected)?, Reply::Async(reply));
            answer.await.unwrap_or_else(|_| Err(stopped()))
        })
    }

    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)> {
        let db = self.db.clone();
        Box::pin(async move { Ok((blocking(move || db.open()).await?, None)) })
    }

    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
        let db = self.db.clone();
        Box::pin(blocking(move || db.purge(cutoff)))
    }
}

/// `f` on tokio's blocking pool.
#[cfg(feature = "tokio")]
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Storage(format!("a redb read failed: {e}")))?
}

/// A write of `record`, encoded as stored.
fn pending(record: &Record, expected: Option<u64>) -> Result<Pending, Error> {
    Ok(Pending {
        bytes: serde_json::to_vec(record).map_err(storage)?,
        record: record.clone(),
        expected,
    })
}

#[cfg(test)]
mod tests;
