//! The state machine over a [`Store`].

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::clock::{Clock, SystemClock};
use crate::{Error, Fingerprint, Key, Lease, Record, State, Store, Try, TryOutcome};

/// Ledger settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How long a lease lasts before recovery may take the attempt over.
    /// Default 30 s. `Duration::MAX` is a lease that never expires: its
    /// `expires_at` is the last time chrono holds (year 262,142).
    pub lease_ttl: Duration,
    /// How long ended records are kept (and so replayed) before
    /// [`Ledger::purge`] may delete them: at least as long as a client may
    /// retry a request, or a late retry executes again. Default 24 h; at
    /// least [`MIN_RETENTION`](Self::MIN_RETENTION). `Duration::MAX` keeps
    /// them forever: `purge` then deletes nothing.
    pub retention: Duration,
}

impl Config {
    /// The shortest retention a ledger accepts: one hour. Clients retry
    /// for minutes to hours (Stripe keeps keys 24 h); a shorter retention
    /// is a configuration error, not a choice.
    pub const MIN_RETENTION: Duration = Duration::from_secs(3600);
}

impl Default for Config {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// The answer of [`Ledger::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Begin {
    /// A new logical attempt and its first try: drive it with the lease.
    Started(Lease),
    /// The key already ended: replay this record instead of executing. If
    /// [`Record::is_revivable`], the caller may [`Ledger::revive`] it.
    Replay(Record),
}

/// How the caller closes a try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Close {
    /// The provider succeeded; `outcome` is replayed to repeats.
    Succeeded(String),
    /// The provider definitively rejected it; replayed to repeats.
    FailedAtProvider(String),
    /// Failed before dispatch (credentials, configuration). Only legal
    /// before [`Ledger::mark_dispatched`].
    PreProvider(String),
    /// Dispatched, then no answer (timeout, reset). Not revivable.
    ProviderUnavailable(String),
}

impl Close {
    /// How the try and the attempt end with it.
    fn ended(&self) -> (TryOutcome, State) {
        match self.clone() {
            Self::Succeeded(outcome) => (TryOutcome::Succeeded, State::Succeeded { outcome }),
            Self::FailedAtProvider(outcome) => (
                TryOutcome::FailedAtProvider,
                State::FailedAtProvider { outcome },
            ),
            Self::PreProvider(reason) => (
                TryOutcome::PreProviderFailure,
                State::FailedPreProvider { reason },
            ),
            Self::ProviderUnavailable(reason) => (
                TryOutcome::ProviderUnavailable,
                State::ProviderUnavailable { reason },
            ),
        }
    }
}

/// The error for the record of `key` that is in flight and lacks what
/// every in-flight record has (`detail`).
fn corrupt(key: &Key, detail: &str) -> Error {
    Error::Corrupt {
        what: format!("record {key}"),
        detail: detail.into(),
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// `at + d`, saturating at the last time chrono can hold (a `lease_ttl` of
/// `Duration::MAX`, "never expire", must not panic).
fn later(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    at.checked_add_signed(delta(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A record incarnation: 64 bits from std's per-process random hash keys
/// (seeded from the OS), mixed with the key, the time and a process-wide
/// count, so two records of one key (one purged, one begun again) differ
/// even when begun by two processes in the same nanosecond.
fn new_incarnation(key: &Key, now: DateTime<Utc>) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::hash::RandomState::new().build_hasher();
    key.hash(&mut h);
    now.timestamp_nanos_opt().hash(&mut h);
    COUNT.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    std::process::id().hash(&mut h);
    // 0 is what records from before incarnations read as.
    h.finish().max(1)
}

/// The attempt ledger.
#[derive(Debug)]
pub struct Ledger<S, C = SystemClock> {
    store: S,
    clock: C,
    config: Config,
}

/// How many times a transition re-reads after losing a version race.
const CAS_RETRIES: usize = 8;

impl<S: Store> Ledger<S, SystemClock> {
    /// A ledger over `store` with the default config and the system clock.
    pub fn new(store: S) -> Self {
        Self {
            store,
            clock: SystemClock,
            config: Config::default(),
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
        if config.retention < Config::MIN_RETENTION {
            return Err(Error::RetentionTooShort {
                retention: config.retention,
                floor: Config::MIN_RETENTION,
            });
        }
        Ok(Self {
            store,
            clock,
            config,
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

    /// The record for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the store cannot be reached, [`Error::Corrupt`]
    /// if it holds a record it cannot read.
    pub fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        self.store.get(key)
    }

    fn validate(key: &Key, fingerprint: &Fingerprint) -> Result<(), Error> {
        let bytes = key.scope.len() + key.id.len();
        if bytes > Key::MAX_BYTES {
            let shown: String = key.id.chars().take(32).collect();
            return Err(Error::InvalidKey(format!(
                "{:?}/{shown:?}...: scope and id hold {bytes} bytes; at most {} (Key::MAX_BYTES)",
                key.scope.chars().take(32).collect::<String>(),
                Key::MAX_BYTES
            )));
        }
        if key.scope.contains('\0') || key.id.is_empty() || key.id.contains('\0') {
            return Err(Error::InvalidKey(format!("{:?}/{:?}", key.scope, key.id)));
        }
        if fingerprint.0.is_empty() {
            return Err(Error::InvalidKey(format!("{key}: empty fingerprint")));
        }
        Ok(())
    }

    fn lease(&self, record: &Record, owner: &str, try_id: u32, now: DateTime<Utc>) -> Lease {
        Lease {
            key: record.key.clone(),
            owner: owner.to_owned(),
            expires_at: later(now, self.config.lease_ttl),
            token: record.version,
            try_id,
            incarnation: record.incarnation,
        }
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
        Self::validate(key, fingerprint)?;
        for _ in 0..CAS_RETRIES {
            let now = self.clock.now();
            match self.store.get(key)? {
                None => {
                    let mut record = Record {
                        key: key.clone(),
                        fingerprint: fingerprint.clone(),
                        state: State::InFlight,
                        version: 1,
                        lease: None,
                        tries: vec![Try {
                            id: 1,
                            started_at: now,
                            dispatched_at: None,
                            closed: None,
                        }],
                        created_at: now,
                        ended_at: None,
                        incarnation: new_incarnation(key, now),
                    };
                    let lease = self.lease(&record, owner, 1, now);
                    record.lease = Some(lease.clone());
                    match self.store.put(&record, None) {
                        Ok(()) => return Ok(Begin::Started(lease)),
                        Err(Error::VersionConflict { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Some(record) => {
                    if record.fingerprint != *fingerprint {
                        return Err(Error::FingerprintMismatch {
                            key: key.to_string(),
                        });
                    }
                    if record.state.is_closed() {
                        return Ok(Begin::Replay(record));
                    }
                    let lease = record
                        .lease
                        .as_ref()
                        .ok_or_else(|| corrupt(key, "in flight with no lease"))?;
                    if lease.expires_at > now {
                        return Err(Error::Conflict {
                            key: key.to_string(),
                            retry_after: (lease.expires_at - now).to_std().unwrap_or_default(),
                        });
                    }
                    match self.recover_record(record, now, "lease expired") {
                        Ok(_) | Err(Error::VersionConflict { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(Error::Contended {
            key: key.to_string(),
        })
    }

    /// Reads the record and checks the caller's lease still owns it.
    fn owned(&self, lease: &Lease) -> Result<Record, Error> {
        let record = self.store.get(&lease.key)?.ok_or_else(|| Error::NotFound {
            key: lease.key.to_string(),
        })?;
        let current = record
            .lease
            .as_ref()
            .map(|l| (l.incarnation, l.token, l.try_id));
        let presented = (lease.incarnation, lease.token, lease.try_id);
        if record.state.is_closed()
            || record.incarnation != lease.incarnation
            || current != Some(presented)
        {
            return Err(Error::StaleLease {
                key: lease.key.to_string(),
                token: lease.token,
            });
        }
        Ok(record)
    }

    fn open_try_mut<'r>(record: &'r mut Record, lease: &Lease) -> Result<&'r mut Try, Error> {
        record
            .tries
            .iter_mut()
            .find(|t| t.id == lease.try_id && t.is_open())
            .ok_or_else(|| Error::StaleLease {
                key: lease.key.to_string(),
                token: lease.token,
            })
    }

    /// Applies `change` to the record the lease owns and writes it back.
    /// `change` says whether there is anything to write, and what the
    /// transition answers.
    ///
    /// A lost version race is read again rather than taken as a lost lease:
    /// the write that won may have kept the lease (the same owner renewing
    /// it from another task while this one dispatches or closes), and
    /// failing then would lose a provider's answer. `change` runs again on
    /// the record as it now is; only once the lease no longer owns it is
    /// the answer [`Error::StaleLease`].
    fn update_owned<T>(
        &self,
        lease: &Lease,
        mut change: impl FnMut(&mut Record, DateTime<Utc>) -> Result<(bool, T), Error>,
    ) -> Result<(Record, T), Error> {
        for _ in 0..CAS_RETRIES {
            let now = self.clock.now();
            let mut record = self.owned(lease)?;
            let expected = record.version;
            let (write, answer) = change(&mut record, now)?;
            if !write {
                return Ok((record, answer));
            }
            record.version += 1;
            match self.store.put(&record, Some(expected)) {
                Ok(()) => return Ok((record, answer)),
                Err(Error::VersionConflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contended {
            key: lease.key.to_string(),
        })
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
    /// - [`Error::NotFound`]: no record for the lease's key.
    /// - [`Error::Contended`], and the store's errors as for
    ///   [`get`](Self::get); nothing was written, so nothing may be sent.
    pub fn mark_dispatched(&self, lease: &Lease) -> Result<(), Error> {
        self.update_owned(lease, |record, now| {
            let t = Self::open_try_mut(record, lease)?;
            if t.dispatched_at.is_some() {
                return Ok((false, ()));
            }
            t.dispatched_at = Some(now);
            Ok((true, ()))
        })
        .map(|_| ())
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
        self.update_owned(lease, |record, now| {
            let renewed = Lease {
                expires_at: later(now, self.config.lease_ttl),
                ..lease.clone()
            };
            record.lease = Some(renewed.clone());
            Ok((true, renewed))
        })
        .map(|(_, renewed)| renewed)
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
        let (outcome, state) = close.ended();
        let closed = self.update_owned(lease, |record, now| {
            let key = lease.key.to_string();
            let t = Self::open_try_mut(record, lease)?;
            let dispatched = t.dispatched_at.is_some();
            let pre_provider = matches!(close, Close::PreProvider(_));
            if pre_provider && dispatched {
                return Err(Error::IllegalTransition {
                    key,
                    detail: "a dispatched try cannot fail before the provider".into(),
                });
            }
            if !pre_provider && !dispatched {
                return Err(Error::IllegalTransition {
                    key,
                    detail: "a provider outcome needs the try marked dispatched first".into(),
                });
            }
            t.closed = Some((now, outcome));
            record.state = state.clone();
            record.lease = None;
            record.ended_at = Some(now);
            Ok((true, ()))
        });
        match closed {
            Ok((record, ())) => Ok(record),
            Err(stale @ Error::StaleLease { .. }) => {
                // Ended by this very close (its answer lost)?
                let record = self.store.get(&lease.key)?.filter(|r| {
                    r.state == state
                        && r.incarnation == lease.incarnation
                        && r.tries.last().is_some_and(|t| {
                            t.id == lease.try_id && t.closed.is_some_and(|(_, o)| o == outcome)
                        })
                });
                record.ok_or(stale)
            }
            Err(e) => Err(e),
        }
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
        Self::validate(key, fingerprint)?;
        let now = self.clock.now();
        let mut record = self.record_of(key, fingerprint)?;
        if !matches!(record.state, State::FailedPreProvider { .. }) {
            return Err(Error::NotRevivable {
                key: key.to_string(),
                reason: format!("its state is {}", record.state.name()),
            });
        }
        if record.ever_dispatched() {
            return Err(Error::NotRevivable {
                key: key.to_string(),
                reason: "a try was dispatched, so the provider may have seen it".into(),
            });
        }
        let expected = record.version;
        let try_id = record.tries.len() as u32 + 1;
        record.version += 1;
        let lease = self.lease(&record, owner, try_id, now);
        record.tries.push(Try {
            id: try_id,
            started_at: now,
            dispatched_at: None,
            closed: None,
        });
        record.state = State::InFlight;
        record.lease = Some(lease.clone());
        record.ended_at = None;
        match self.store.put(&record, Some(expected)) {
            Ok(()) => Ok(lease),
            Err(Error::VersionConflict { .. }) => Err(Error::Conflict {
                key: key.to_string(),
                retry_after: self.config.lease_ttl,
            }),
            Err(e) => Err(e),
        }
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
        Self::validate(key, fingerprint)?;
        for _ in 0..CAS_RETRIES {
            let now = self.clock.now();
            let mut record = self.record_of(key, fingerprint)?;
            if record.state.is_closed() {
                return Ok(None);
            }
            let held_by = record.lease.as_ref().map(|l| l.owner.as_str());
            if held_by.ok_or_else(|| corrupt(key, "in flight with no lease"))? != owner {
                return Ok(None);
            }
            let open = record
                .tries
                .iter()
                .find(|t| t.is_open())
                .ok_or_else(|| corrupt(key, "in flight with no open try"))?;
            if open.dispatched_at.is_some() {
                return Ok(None);
            }
            let try_id = open.id;
            let expected = record.version;
            record.version += 1;
            let lease = self.lease(&record, owner, try_id, now);
            record.lease = Some(lease.clone());
            match self.store.put(&record, Some(expected)) {
                Ok(()) => return Ok(Some(lease)),
                Err(Error::VersionConflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contended {
            key: key.to_string(),
        })
    }

    /// The record of `key`, made for the request `fingerprint`.
    fn record_of(&self, key: &Key, fingerprint: &Fingerprint) -> Result<Record, Error> {
        let record = self.store.get(key)?.ok_or_else(|| Error::NotFound {
            key: key.to_string(),
        })?;
        if record.fingerprint != *fingerprint {
            return Err(Error::FingerprintMismatch {
                key: key.to_string(),
            });
        }
        Ok(record)
    }

    /// Closes `record`'s open try by the dispatch rule; `lost` says how the
    /// worker was lost, for the recorded reason.
    fn recover_record(
        &self,
        mut record: Record,
        now: DateTime<Utc>,
        lost: &str,
    ) -> Result<Record, Error> {
        let expected = record.version;
        let key = record.key.clone();
        let Some(t) = record.tries.iter_mut().find(|t| t.is_open()) else {
            return Err(corrupt(&key, "in flight with no open try"));
        };
        let (outcome, state) = if t.dispatched_at.is_some() {
            (
                TryOutcome::ProviderUnavailable,
                State::ProviderUnavailable {
                    reason: format!("{lost} after dispatch (worker lost)"),
                },
            )
        } else {
            (
                TryOutcome::PreProviderFailure,
                State::FailedPreProvider {
                    reason: format!("{lost} before dispatch (worker lost)"),
                },
            )
        };
        t.closed = Some((now, outcome));
        record.state = state;
        record.lease = None;
        record.ended_at = Some(now);
        record.version += 1;
        self.store.put(&record, Some(expected))?;
        Ok(record)
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
        self.recover_where(|_| false)
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
        self.recover_where(|lease| lease.owner == owner)
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
        self.recover_where(|_| true)
    }

    /// Resolves the in-flight attempts whose lease has expired, and those
    /// whose live lease `also` accepts.
    fn recover_where(&self, also: impl Fn(&Lease) -> bool) -> Result<Vec<Record>, Error> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for record in self.store.open()? {
            let expired = record.lease.as_ref().is_none_or(|l| l.expires_at <= now);
            if !expired && !record.lease.as_ref().is_some_and(&also) {
                continue;
            }
            let lost = if expired {
                "lease expired"
            } else {
                "left open by an ended run"
            };
            match self.recover_record(record, now, lost) {
                Ok(r) => out.push(r),
                // Someone else moved it meanwhile: theirs wins.
                Err(Error::VersionConflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Deletes ended records older than the retention; never open ones.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the store cannot be reached.
    pub fn purge(&self) -> Result<usize, Error> {
        // A retention reaching back before the first time chrono can hold
        // ("keep forever"): nothing ended that long ago.
        match self
            .clock
            .now()
            .checked_sub_signed(delta(self.config.retention))
        {
            Some(cutoff) => self.store.purge(cutoff),
            None => Ok(0),
        }
    }
}
