//! The blocking ledger: the state machine over a [`Store`]. Every
//! transition is one conditional write on the key's record, so two
//! workers never both hold a try, and a try marked dispatched is never
//! revived (its key is never executed twice).

use crate::clock::{Clock, SystemClock};
use crate::config::{Begin, Close, Config, check_config};
use crate::core::{self, Core};
use crate::error::Error;
use crate::last_writes::LastWrites;
use crate::store::{AsAsync, run_ready};
use crate::{Fingerprint, Key, Lease, Record, store::Store};

/// The attempt ledger.
#[derive(Debug)]
pub struct Ledger<S, C = SystemClock> {
    store: S,
    clock: C,
    config: Config,
    /// The records this ledger last wrote as an owner, for transitions of
    /// one round trip.
    pub(crate) written: LastWrites,
}

impl<S: Store> Ledger<S, SystemClock> {
    /// A ledger over `store` with the default config and the system clock.
    pub fn new(store: S) -> Self {
        Self {
            store,
            clock: SystemClock,
            config: Config::default(),
            written: LastWrites::default(),
        }
    }
}

impl<S: Store, C: Clock> Ledger<S, C> {
    /// A ledger with an explicit config and clock.
    ///
    /// # Errors
    ///
    /// [`Error::RetentionTooShort`] for a retention under
    /// [`Config::MIN_RETENTION`], naming it.
    pub fn with_clock(store: S, config: Config, clock: C) -> Result<Self, Error> {
        check_config(&config)?;
        Ok(Self {
            store,
            clock,
            config,
            written: LastWrites::default(),
        })
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The config.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    fn core(&self) -> Core<'_, AsAsync<'_, S>, C> {
        Core {
            store: AsAsync(&self.store),
            clock: &self.clock,
            config: &self.config,
            written: &self.written,
            pause: core::sleep_thread,
        }
    }

    /// The record for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the store cannot be reached, [`Error::Corrupt`]
    /// if it holds a record it cannot read.
    pub fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        run_ready(self.core().get(key))
    }

    /// Begins a logical attempt for `key`.
    ///
    /// New key: a new logical attempt and its first try ([`Begin::Started`]).
    /// Same key in flight under a live lease: [`Error::Conflict`] with a
    /// retry-after. In flight under an EXPIRED lease: recovered first (see
    /// [`recover`](Self::recover)), then answered as ended. Same key with a
    /// different fingerprint: [`Error::FingerprintMismatch`]. Ended:
    /// [`Begin::Replay`] (no new try).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidKey`]: an empty id, a NUL byte, a key over
    ///   [`Key::MAX_BYTES`], or an empty fingerprint; nothing is stored.
    /// - [`Error::Conflict`]: in flight under a live lease (answer 409 with
    ///   its `retry_after`).
    /// - [`Error::FingerprintMismatch`]: the key was used with another
    ///   request (answer 422).
    /// - [`Error::Contended`]: lost the store's version race eight times.
    /// - [`Error::Storage`] if the store cannot be reached, [`Error::Corrupt`]
    ///   if it holds a record it cannot read.
    pub fn begin(&self, key: &Key, fingerprint: &Fingerprint, owner: &str) -> Result<Begin, Error> {
        run_ready(self.core().begin(key, fingerprint, owner))
    }

    /// Durably marks the lease's try dispatched. Call it BEFORE sending
    /// anything to the provider: from then on the key is never revivable,
    /// and a crash is classified as provider-unavailable. Marking it again
    /// changes nothing.
    ///
    /// # Errors
    ///
    /// - [`Error::StaleLease`]: the lease no longer owns the attempt (it
    ///   expired and was taken over, or the attempt was closed): do not
    ///   send.
    /// - [`Error::LeaseExpired`]: the mark reached the store after the
    ///   lease ended by the store's clock (on a store that tells it, with
    ///   a clock that defers to it): nothing was written; do not send.
    /// - [`Error::NotFound`]: no record for the lease's key.
    /// - [`Error::Contended`], and the store's errors as for
    ///   [`get`](Self::get); nothing was written, so nothing may be sent.
    pub fn mark_dispatched(&self, lease: &Lease) -> Result<(), Error> {
        run_ready(self.core().mark_dispatched(lease))
    }

    /// Extends the lease (long provider calls): it now expires the lease
    /// TTL from now. Safe to call from another task of the owner while
    /// this one dispatches or closes (each re-reads if the other wrote
    /// first).
    ///
    /// # Errors
    ///
    /// As for [`mark_dispatched`](Self::mark_dispatched): a
    /// [`Error::StaleLease`] means another worker has taken the attempt
    /// over.
    pub fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
        run_ready(self.core().renew(lease))
    }

    /// Closes the lease's try AND the logical attempt, in one store write.
    ///
    /// Provider outcomes ([`Close::Succeeded`], [`Close::FailedAtProvider`],
    /// [`Close::ProviderUnavailable`]) require the try to be dispatched;
    /// [`Close::PreProvider`] requires it NOT to be.
    ///
    /// Closing again with the same `close` once it has landed writes
    /// nothing and returns the record: a close whose answer was lost (the
    /// store wrote it, then the connection failed) can be retried.
    ///
    /// # Errors
    ///
    /// - [`Error::IllegalTransition`]: a provider outcome on a try not
    ///   marked dispatched, or a pre-provider failure on one that was.
    /// - [`Error::StaleLease`]: the lease no longer owns the attempt, and
    ///   did not end it as `close` says; [`get`](Self::get) shows what it
    ///   was resolved to.
    /// - [`Error::NotFound`], [`Error::Contended`], and the store's errors
    ///   as for [`get`](Self::get).
    pub fn close(&self, lease: &Lease, close: Close) -> Result<Record, Error> {
        run_ready(self.core().close(lease, close))
    }

    /// Opens a new try under the same logical attempt and key, iff it
    /// failed before the provider and NO try of it was ever dispatched.
    /// Anything else is [`Error::NotRevivable`] saying why.
    ///
    /// # Errors
    ///
    /// - [`Error::NotRevivable`]: it is in flight, succeeded, failed at
    ///   the provider, is provider-unavailable, or a try of it was
    ///   dispatched; the reason says which.
    /// - [`Error::Conflict`]: another caller revived it first (in flight
    ///   now).
    /// - [`Error::NotFound`]: no record for `key`.
    /// - [`Error::InvalidKey`] and [`Error::FingerprintMismatch`] as for
    ///   [`begin`](Self::begin); the store's errors as for
    ///   [`get`](Self::get).
    pub fn revive(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Lease, Error> {
        run_ready(self.core().revive(key, fingerprint, owner))
    }

    /// Takes over the open try of `key` that `owner` began and lost track
    /// of: a begin whose answer was lost (the store wrote it, then the
    /// connection failed before it said so), after which the key answers
    /// [`Error::Conflict`] until the lease expires. Only a try that was not
    /// dispatched is taken over, under a new lease for `owner` (its expiry
    /// the lease TTL from now).
    ///
    /// The lease it had is fenced off (a new token): a task that still held
    /// it can no longer dispatch, renew or close the try
    /// ([`Error::StaleLease`]), so taking over never lets two tasks send the
    /// request. Call it only where no task of `owner` still works on the
    /// key, or that task's request fails.
    ///
    /// ```
    /// use ate_ledger::{Begin, Error, Fingerprint, Key, Ledger, MemoryStore};
    ///
    /// let ledger = Ledger::new(MemoryStore::new());
    /// let (key, fp) = (Key::new("payments", "req-1"), Fingerprint("sha256:ab".into()));
    /// // The begin lands, but its answer is lost on the way back.
    /// let _lost = ledger.begin(&key, &fp, "pod-a")?;
    /// assert!(matches!(ledger.begin(&key, &fp, "pod-a"), Err(Error::Conflict { .. })));
    /// // No task of pod-a holds the key: take the try over and go on.
    /// let lease = ledger.adopt(&key, &fp, "pod-a")?.expect("pod-a's, not dispatched");
    /// ledger.mark_dispatched(&lease)?;
    /// // Another owner's try, or a dispatched one, is never taken over.
    /// assert_eq!(ledger.adopt(&key, &fp, "pod-b")?, None);
    /// assert_eq!(ledger.adopt(&key, &fp, "pod-a")?, None);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// - `Ok(None)`, not an error: nothing to take over (the attempt ended,
    ///   its lease is another owner's, or its try was dispatched).
    /// - [`Error::NotFound`]: no record for `key`.
    /// - [`Error::InvalidKey`] and [`Error::FingerprintMismatch`] as for
    ///   [`begin`](Self::begin); [`Error::Contended`] and the store's
    ///   errors as for [`get`](Self::get).
    pub fn adopt(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Option<Lease>, Error> {
        run_ready(self.core().adopt(key, fingerprint, owner))
    }

    /// Resolves every in-flight attempt whose lease has expired (a crashed
    /// worker): not dispatched → pre-provider failure (revivable);
    /// dispatched → provider unavailable (not revivable). Returns the
    /// resolved records.
    ///
    /// # Errors
    ///
    /// The store's errors as for [`get`](Self::get); the attempts resolved
    /// before the error stay resolved.
    pub fn recover(&self) -> Result<Vec<Record>, Error> {
        run_ready(self.core().recover_where(|_| false))
    }

    /// Resolves, by the same rule as [`recover`](Self::recover), every
    /// in-flight attempt whose lease has expired or is held by `owner`,
    /// live or not.
    ///
    /// For a worker that restarts under the same owner name on a store
    /// that live workers share (a Kubernetes pod whose container restarted
    /// keeps its name): the attempts its previous run left open are
    /// resolved at start instead of keeping their callers on 409 until
    /// those leases expire, while other workers' live attempts are left
    /// alone. The owner name must be unique among live workers. If it is
    /// not, nothing runs twice (the other worker's later transitions fail
    /// with [`Error::StaleLease`] and a dispatched attempt is closed as not
    /// revivable), but that worker's outcomes are lost.
    ///
    /// # Errors
    ///
    /// As for [`recover`](Self::recover).
    pub fn recover_owner(&self, owner: &str) -> Result<Vec<Record>, Error> {
        run_ready(self.core().recover_where(|lease| lease.owner == owner))
    }

    /// Resolves every in-flight attempt by the same rule as
    /// [`recover`](Self::recover), whether or not its lease has expired.
    ///
    /// For a process that has just opened a store no other worker can use
    /// (a `RedbStore`, feature `redb`, holds an exclusive lock on its
    /// file), every attempt found open was left by a run that has ended:
    /// waiting out its lease would only keep its callers on 409 for the
    /// lease's length. Do not call it on a store that other live workers
    /// share: it closes their attempts under them. Even then nothing runs
    /// twice (their later transitions fail with [`Error::StaleLease`] and a
    /// dispatched attempt is closed as not revivable), but their outcomes
    /// are lost.
    ///
    /// # Errors
    ///
    /// As for [`recover`](Self::recover).
    pub fn recover_all(&self) -> Result<Vec<Record>, Error> {
        run_ready(self.core().recover_where(|_| true))
    }

    /// Deletes ended records older than the retention; never open ones.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the store cannot be reached.
    pub fn purge(&self) -> Result<usize, Error> {
        run_ready(self.core().purge())
    }
}
