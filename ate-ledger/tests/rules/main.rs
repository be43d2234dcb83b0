//! Every rule of the state machine, named after the behaviour.

use std::time::Duration;

use ate_ledger::{
    Begin, Close, Config, Error, Fingerprint, Key, Lease, Ledger, MemoryStore, State, Try,
    TryOutcome,
    clock::{Clock, ManualClock},
    store::Store,
};

fn setup() -> (Ledger<MemoryStore, ManualClock>, ManualClock) {
    let clock = ManualClock::default();
    let ledger = Ledger::with_clock(MemoryStore::new(), Config::default(), clock.clone())
        .expect("a valid config");
    (ledger, clock)
}

fn k() -> Key {
    Key::new("t", "idem-1")
}

fn fp() -> Fingerprint {
    Fingerprint("body-a".into())
}

fn start(ledger: &Ledger<MemoryStore, ManualClock>) -> Lease {
    match ledger.begin(&k(), &fp(), "w1").unwrap() {
        Begin::Started(lease) => lease,
        Begin::Replay(r) => panic!("expected a new attempt, got replay of {:?}", r.state),
    }
}

/// A store that runs `before_put` once, just before the next write reaches
/// the shared store: another task's write landing between a transition's
/// read and its write.
struct Interleave {
    inner: std::sync::Arc<MemoryStore>,
    #[allow(clippy::type_complexity)]
    before_put: parking_lot::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Interleave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleave").finish_non_exhaustive()
    }
}

impl ate_ledger::store::Store for Interleave {
    fn get(&self, key: &Key) -> Result<Option<ate_ledger::Record>, Error> {
        self.inner.get(key)
    }
    fn put(&self, record: &ate_ledger::Record, expected: Option<u64>) -> Result<(), Error> {
        let hook = self.before_put.lock().take();
        if let Some(hook) = hook {
            hook();
        }
        self.inner.put(record, expected)
    }
    fn open(&self) -> Result<Vec<ate_ledger::Record>, Error> {
        self.inner.open()
    }
    fn purge(&self, cutoff: ate_ledger::store::Cutoff) -> Result<usize, Error> {
        self.inner.purge(cutoff)
    }
}

/// A ledger whose next write is preceded by a hook (`Interleave`), and a
/// second ledger (another worker) on the same store and clock.
fn two_workers() -> (
    Ledger<Interleave, ManualClock>,
    Ledger<std::sync::Arc<MemoryStore>, ManualClock>,
) {
    let clock = ManualClock::default();
    let shared = std::sync::Arc::new(MemoryStore::new());
    let other = Ledger::with_clock(shared.clone(), Config::default(), clock.clone())
        .expect("a valid config");
    let worker = Ledger::with_clock(
        Interleave {
            inner: shared,
            before_put: parking_lot::Mutex::new(None),
        },
        Config::default(),
        clock,
    )
    .expect("a valid config");
    (worker, other)
}

mod housekeeping;
mod leases;
mod outcomes;
mod recovery;
