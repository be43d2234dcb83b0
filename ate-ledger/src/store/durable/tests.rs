//! The redb store: group commit, compare-and-swap in a batch, the file
//! lock, purges racing revives, and recovery from a latched I/O error.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::{
    Begin, Close, Config, Fingerprint, Ledger, State,
    clock::{Clock, ManualClock},
};

fn record(id: &str, version: u64, owner: &str) -> Record {
    let key = Key::new("t", id);
    let now = chrono::DateTime::<Utc>::UNIX_EPOCH;
    Record {
        key: key.clone(),
        fingerprint: Fingerprint("f".into()),
        state: State::InFlight,
        version,
        lease: Some(crate::Lease {
            key,
            owner: owner.into(),
            expires_at: now,
            token: 1,
            try_id: 1,
            incarnation: 1,
        }),
        tries: vec![crate::Try {
            id: 1,
            started_at: now,
            dispatched_at: None,
            closed: None,
        }],
        created_at: now,
        ended_at: None,
        incarnation: 1,
    }
}

/// Runs `writes` on threads of their own while redb's write lock is
/// held, so they all queue for the committer (which takes the first
/// and waits for the lock); then releases it. Answers each write's
/// result and how many commits the store made for them.
fn queued(
    store: &Arc<RedbStore>,
    writes: Vec<(Record, Option<u64>)>,
) -> (Vec<Result<(), Error>>, u64) {
    let held = store.db.database().unwrap().begin_write().unwrap();
    let before = store.group.commits.load(Ordering::SeqCst);
    let submitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = writes
        .into_iter()
        .map(|(record, expected)| {
            let (store, submitted) = (store.clone(), submitted.clone());
            std::thread::spawn(move || {
                let (reply, answer) = mpsc::sync_channel(1);
                let write = pending(&record, expected).unwrap();
                store.group.queue(write, Reply::Blocking(reply));
                submitted.fetch_add(1, Ordering::SeqCst);
                answer.recv().unwrap()
            })
        })
        .collect();
    let n = threads.len() as u64;
    while submitted.load(Ordering::SeqCst) < n {
        std::thread::yield_now();
    }
    drop(held);
    let answers = threads.into_iter().map(|t| t.join().unwrap()).collect();
    (answers, store.group.commits.load(Ordering::SeqCst) - before)
}

#[test]
fn writes_that_wait_together_share_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("l.redb")).unwrap());
    let writes = (0..16)
        .map(|i| (record(&format!("k{i}"), 1, "w"), None))
        .collect();
    let (answers, commits) = queued(&store, writes);
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    // The committer took what had come when it began (at least the
    // first write) and waited for the lock; everything that came
    // meanwhile goes in the next commit: two at most, not sixteen.
    assert!((1..=2).contains(&commits), "{commits} commits: {store:?}");
    for i in 0..16 {
        assert!(
            store
                .get(&Key::new("t", format!("k{i}")))
                .unwrap()
                .is_some()
        );
    }
}

#[test]
fn two_writes_of_one_version_in_one_commit_land_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("l.redb")).unwrap());
    store.put(&record("k", 1, "w"), None).unwrap();
    let (answers, _) = queued(
        &store,
        vec![
            (record("k", 2, "a"), Some(1)),
            (record("k", 2, "b"), Some(1)),
            (record("k", 2, "c"), Some(1)),
        ],
    );
    let won: Vec<usize> = (0..3).filter(|&i| answers[i].is_ok()).collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    assert!(answers.iter().filter(|a| a.is_err()).all(|a| matches!(
        a,
        Err(Error::VersionConflict {
            expected: Some(1),
            found: Some(2),
            ..
        })
    )));
    let stored = store.get(&Key::new("t", "k")).unwrap().unwrap();
    let owner = ["a", "b", "c"][won[0]];
    assert_eq!(stored.lease.unwrap().owner, owner);
}

/// Storage in memory that outlives each database opened on it, whose
/// writes and syncs fail while `full` is set (a disk that filled).
#[derive(Debug, Clone, Default)]
struct Disk {
    bytes: Arc<Mutex<Vec<u8>>>,
    full: Arc<std::sync::atomic::AtomicBool>,
    opens: Arc<AtomicU64>,
}

impl Disk {
    fn failing(&self) -> std::io::Result<()> {
        if self.full.load(Ordering::SeqCst) {
            Err(std::io::Error::other("no space left on device"))
        } else {
            Ok(())
        }
    }

    fn store(&self) -> RedbStore {
        let disk = self.clone();
        RedbStore::open_with(Box::new(move || {
            disk.opens.fetch_add(1, Ordering::SeqCst);
            Database::builder()
                .set_check_integrity_on_open(true)
                .create_with_backend(disk.clone())
                .map_err(|e| Error::Storage(e.to_string()))
        }))
        .unwrap()
    }
}

impl redb::StorageBackend for Disk {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.bytes.lock().len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let bytes = self.bytes.lock();
        let start = offset as usize;
        let src = bytes
            .get(start..start + out.len())
            .ok_or_else(|| std::io::Error::other("read past the end"))?;
        out.copy_from_slice(src);
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.failing()?;
        self.bytes.lock().resize(len as usize, 0);
        Ok(())
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.failing()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.failing()?;
        let mut bytes = self.bytes.lock();
        let end = offset as usize + data.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[offset as usize..end].copy_from_slice(data);
        Ok(())
    }
}

#[test]
fn a_disk_error_is_recovered_from_once_the_disk_has_room() {
    let disk = Disk::default();
    let store = disk.store();
    store.put(&record("before", 1, "w"), None).unwrap();
    disk.full.store(true, Ordering::SeqCst);
    // The failed write reports an error, and nothing was written.
    assert!(matches!(
        store.put(&record("during", 1, "w"), None),
        Err(Error::Storage(_))
    ));
    assert!(store.fault().is_some(), "the fault is shown while it lasts");
    assert!(store.put(&record("during2", 1, "w"), None).is_err());
    disk.full.store(false, Ordering::SeqCst);
    // redb latched the error (PreviousIo); without a reopen every
    // write would fail until the process restarts.
    store.put(&record("after", 1, "w"), None).unwrap();
    assert!(store.fault().is_none());
    assert!(disk.opens.load(Ordering::SeqCst) >= 2, "reopened");
    for (k, there) in [
        ("before", true),
        ("during", false),
        ("during2", false),
        ("after", true),
    ] {
        assert_eq!(
            store.get(&Key::new("t", k)).unwrap().is_some(),
            there,
            "{k}"
        );
    }
    // What the reopened file holds is what a fresh open reads.
    drop(store);
    let again = disk.store();
    assert!(again.get(&Key::new("t", "after")).unwrap().is_some());
    assert!(again.get(&Key::new("t", "during")).unwrap().is_none());
}

#[test]
fn a_dropped_store_releases_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let store = RedbStore::open(&path).unwrap();
    store.put(&record("k", 1, "w"), None).unwrap();
    drop(store);
    let again = RedbStore::open(&path).unwrap();
    assert!(again.get(&Key::new("t", "k")).unwrap().is_some());
}

#[test]
fn a_record_revived_between_the_purge_scan_and_its_delete_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("ledger.redb")).unwrap());
    let clock = ManualClock::default();
    let config = Config::default();
    let ledger = Ledger::with_clock(store.clone(), config, clock.clone()).expect("a valid config");
    let (key, fp) = (Key::new("t", "k"), Fingerprint("f".into()));
    let Begin::Started(lease) = ledger.begin(&key, &fp, "w1").unwrap() else {
        panic!("a new key starts")
    };
    ledger
        .close(&lease, Close::PreProvider("no credential".into()))
        .unwrap();
    clock.advance(config.retention + Duration::from_secs(1));
    let cutoff = clock.now() - chrono::TimeDelta::from_std(config.retention).unwrap();
    let doomed = store.db.ended_before(cutoff).unwrap();
    assert_eq!(doomed, [key.encode()], "ended past the retention");
    // A caller retries it (a revive) before the delete runs.
    ledger.revive(&key, &fp, "w1").unwrap();
    assert_eq!(store.db.remove_still_ended(&doomed, cutoff).unwrap(), 0);
    let kept = store
        .get(&key)
        .unwrap()
        .expect("an open record is never purged");
    assert_eq!(kept.state, State::InFlight);
}
