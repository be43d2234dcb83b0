//! The state machine, written once over [`AsyncStore`]: the synchronous
//! [`Ledger`](crate::Ledger) drives it over a [`Store`] (whose calls
//! answer at once, so one poll finishes it), the asynchronous
//! `AsyncLedger` (feature `tokio`) awaits it. The two fronts cannot drift.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::clock::Clock;
use crate::clock::delta;
use crate::config::{Begin, Close, Config};
use crate::error::Error;
use crate::last_writes::LastWrites;
use crate::model::owns;
use crate::store::{AsyncStore, Cutoff};
use crate::{Fingerprint, Key, Lease, Record, State, Try, TryOutcome};

/// How many times a transition re-reads after losing a version race.
const CAS_RETRIES: usize = 8;

/// The error for the record of `key` that is in flight and lacks what
/// every in-flight record has (`detail`).
fn corrupt(key: &Key, detail: &str) -> Error {
    Error::Corrupt {
        what: format!("record {key}"),
        detail: detail.into(),
    }
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

/// Checks a key and a fingerprint before anything is stored.
pub(crate) fn validate(key: &Key, fingerprint: &Fingerprint) -> Result<(), Error> {
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

/// The state machine over one store, clock and config.
pub(crate) struct Core<'a, S, C> {
    pub(crate) store: S,
    pub(crate) clock: &'a C,
    pub(crate) config: &'a Config,
    pub(crate) written: &'a LastWrites,
    /// How the front waits between two tries of a contended write: a
    /// thread sleep for the blocking ledger, a timer for the async one.
    pub(crate) pause: fn(Duration) -> Pause,
}

/// A wait of [`Core::pause`].
pub(crate) type Pause = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The blocking front's pause: sleeps the thread, then is ready.
pub(crate) fn sleep_thread(d: Duration) -> Pause {
    std::thread::sleep(d);
    Box::pin(std::future::ready(()))
}

/// A wait before the `retry`th try (from 1) of a write that lost its
/// version race: random within `[0, min(2^(retry-1) ms, 16 ms)]`, so two
/// writers of one record (an owner's renewal task beside its close) stop
/// meeting at the same instant; at most about 60 ms over all tries.
fn backoff(retry: usize) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let ceiling = 1_000u64 << retry.saturating_sub(1).min(4);
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    Duration::from_micros(h.finish() % (ceiling + 1))
}

/// When a record was read: the time leases are judged at, the clock's
/// time, and the store's time minus the clock's (zero where the clock does
/// not defer to the store).
#[derive(Clone, Copy)]
struct At {
    now: DateTime<Utc>,
    local: DateTime<Utc>,
    offset: TimeDelta,
}

impl<S: AsyncStore, C: Clock> Core<'_, S, C> {
    /// The time leases are granted, checked and taken over at: the
    /// store's own (PostgreSQL's `now()`, one clock for every replica)
    /// where it tells it and the clock defers to it, else the clock's.
    fn time(&self, store_now: Option<DateTime<Utc>>) -> DateTime<Utc> {
        self.at(store_now).now
    }

    fn at(&self, store_now: Option<DateTime<Utc>>) -> At {
        let local = self.clock.now();
        let now = match store_now {
            Some(t) if self.clock.defers_to_store() => t,
            _ => local,
        };
        At {
            now,
            local,
            offset: now.signed_duration_since(local),
        }
    }

    async fn read_at(&self, key: &Key) -> Result<(Option<Record>, At), Error> {
        let read = self.store.get(key).await?;
        Ok((read.record, self.at(read.now)))
    }

    async fn read(&self, key: &Key) -> Result<(Option<Record>, DateTime<Utc>), Error> {
        let (record, at) = self.read_at(key).await?;
        Ok((record, at.now))
    }

    pub(crate) async fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        Ok(self.store.get(key).await?.record)
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

    pub(crate) async fn begin(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Begin, Error> {
        validate(key, fingerprint)?;
        for _ in 0..CAS_RETRIES {
            let (found, at) = self.read_at(key).await?;
            let now = at.now;
            match found {
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
                    match self.store.put(&record, None).await {
                        Ok(()) => {
                            self.written
                                .remember(&record, at.offset, at.local, self.config);
                            return Ok(Begin::Started(lease));
                        }
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
                    match self.recover_record(record, now, "lease expired").await {
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
    async fn owned(&self, lease: &Lease) -> Result<(Record, At), Error> {
        let (record, at) = self.read_at(&lease.key).await?;
        let record = record.ok_or_else(|| Error::NotFound {
            key: lease.key.to_string(),
        })?;
        if !owns(&record, lease) {
            return Err(Error::StaleLease {
                key: lease.key.to_string(),
                token: lease.token,
            });
        }
        Ok((record, at))
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
    ///
    /// First, if this ledger wrote the record last and remembers it
    /// ([`LastWrites`]), the change is written at once on that record: one
    /// round trip when nothing else wrote meanwhile.
    ///
    /// With `fenced`, each write is made only while the record's lease
    /// lasts by the store's clock ([`AsyncStore::put_until`]), where the
    /// lease was granted on that clock.
    async fn update_owned<T>(
        &self,
        lease: &Lease,
        fenced: bool,
        mut change: impl FnMut(&mut Record, DateTime<Utc>) -> Result<(bool, T), Error>,
    ) -> Result<(Record, T), Error> {
        let local = self.clock.now();
        if let Some((mut record, offset, read_at)) = self.written.owned(lease, local, self.config) {
            let expected = record.version;
            // Anything but a write to make (nothing to change, or a check
            // that fails) is decided on the stored record instead.
            if let Ok((true, answer)) = change(&mut record, local + offset) {
                record.version += 1;
                match self.put_owned(&record, expected, fenced).await {
                    Ok(()) => {
                        self.written.remember(&record, offset, read_at, self.config);
                        return Ok((record, answer));
                    }
                    Err(Error::VersionConflict { .. }) => {}
                    Err(e) => {
                        self.written.forget(&lease.key, expected);
                        return Err(e);
                    }
                }
            }
            self.written.forget(&lease.key, expected);
        }
        for retry in 0..CAS_RETRIES {
            if retry > 0 {
                // Lost a race: wait a little, never past the lease (by
                // this clock), whose holder must not lose it waiting.
                let pause = backoff(retry);
                if self.clock.now() + delta(pause) < lease.expires_at {
                    (self.pause)(pause).await;
                }
            }
            let (mut record, at) = self.owned(lease).await?;
            let expected = record.version;
            let (write, answer) = change(&mut record, at.now)?;
            if !write {
                return Ok((record, answer));
            }
            record.version += 1;
            match self.put_owned(&record, expected, fenced).await {
                Ok(()) => {
                    self.written
                        .remember(&record, at.offset, at.local, self.config);
                    return Ok((record, answer));
                }
                Err(Error::VersionConflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contended {
            key: lease.key.to_string(),
        })
    }

    /// Writes `record` over version `expected`; with `fenced`, only while
    /// its lease lasts by the store's clock, where the lease was granted
    /// on it (the clock defers to the store's).
    async fn put_owned(&self, record: &Record, expected: u64, fenced: bool) -> Result<(), Error> {
        match &record.lease {
            Some(l) if fenced && self.clock.defers_to_store() => {
                self.store
                    .put_until(record, Some(expected), l.expires_at)
                    .await
            }
            _ => self.store.put(record, Some(expected)).await,
        }
    }

    /// Marks the lease's try dispatched: fenced, so a mark that reaches
    /// the store after the lease ended (it sat in a stalled connection
    /// while its worker, told it failed, sent nothing) is refused there.
    pub(crate) async fn mark_dispatched(&self, lease: &Lease) -> Result<(), Error> {
        self.update_owned(lease, true, |record, now| {
            let t = open_try_mut(record, lease)?;
            if t.dispatched_at.is_some() {
                return Ok((false, ()));
            }
            t.dispatched_at = Some(now);
            Ok((true, ()))
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
        let ttl = self.config.lease_ttl;
        self.update_owned(lease, false, |record, now| {
            let renewed = Lease {
                expires_at: later(now, ttl),
                ..lease.clone()
            };
            record.lease = Some(renewed.clone());
            Ok((true, renewed))
        })
        .await
        .map(|(_, renewed)| renewed)
    }

    pub(crate) async fn close(&self, lease: &Lease, close: Close) -> Result<Record, Error> {
        self.close_as(lease, close, false).await
    }

    /// [`close`](Self::close); with `unsent`, the try's dispatch mark is
    /// taken back first: the provider answered that it did not process the
    /// request (429, 408, 503 with `Retry-After`), so the try counts as
    /// one that never reached it, and a pre-provider close is legal. Only
    /// the lease's holder can, and only it knows what the provider said.
    pub(crate) async fn close_as(
        &self,
        lease: &Lease,
        close: Close,
        unsent: bool,
    ) -> Result<Record, Error> {
        let (outcome, state) = close.ended();
        let closed = self
            .update_owned(lease, false, |record, now| {
                let key = lease.key.to_string();
                let t = open_try_mut(record, lease)?;
                if unsent {
                    t.dispatched_at = None;
                }
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
            })
            .await;
        match closed {
            Ok((record, ())) => Ok(record),
            Err(stale @ Error::StaleLease { .. }) => {
                // Ended by this very close (its answer lost)?
                let record = self.get(&lease.key).await?.filter(|r| {
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

    pub(crate) async fn revive(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Lease, Error> {
        validate(key, fingerprint)?;
        let (mut record, now) = self.record_of(key, fingerprint).await?;
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
        match self.store.put(&record, Some(expected)).await {
            Ok(()) => Ok(lease),
            Err(Error::VersionConflict { .. }) => Err(Error::Conflict {
                key: key.to_string(),
                retry_after: self.config.lease_ttl,
            }),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn adopt(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Option<Lease>, Error> {
        validate(key, fingerprint)?;
        for _ in 0..CAS_RETRIES {
            let (mut record, now) = self.record_of(key, fingerprint).await?;
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
            match self.store.put(&record, Some(expected)).await {
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
    async fn record_of(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
    ) -> Result<(Record, DateTime<Utc>), Error> {
        let (record, now) = self.read(key).await?;
        let record = record.ok_or_else(|| Error::NotFound {
            key: key.to_string(),
        })?;
        if record.fingerprint != *fingerprint {
            return Err(Error::FingerprintMismatch {
                key: key.to_string(),
            });
        }
        Ok((record, now))
    }

    /// Closes `record`'s open try by the dispatch rule; `lost` says how the
    /// worker was lost, for the recorded reason.
    async fn recover_record(
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
        self.store.put(&record, Some(expected)).await?;
        Ok(record)
    }

    /// Resolves the in-flight attempts whose lease has expired, and those
    /// whose live lease `also` accepts.
    pub(crate) async fn recover_where(
        &self,
        also: impl Fn(&Lease) -> bool,
    ) -> Result<Vec<Record>, Error> {
        let (open, store_now) = self.store.open().await?;
        let now = self.time(store_now);
        let mut out = Vec::new();
        for record in open {
            let expired = record.lease.as_ref().is_none_or(|l| l.expires_at <= now);
            if !expired && !record.lease.as_ref().is_some_and(&also) {
                continue;
            }
            let lost = if expired {
                "lease expired"
            } else {
                "left open by an ended run"
            };
            match self.recover_record(record, now, lost).await {
                Ok(r) => out.push(r),
                // Someone else moved it meanwhile: theirs wins.
                Err(Error::VersionConflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    pub(crate) async fn purge(&self) -> Result<usize, Error> {
        let age = Cutoff::Age {
            retention: self.config.retention,
            now: self.clock.now(),
        };
        // Judged by the clock that stamped `ended_at`: the store's, where
        // this clock defers to it (a replica whose clock runs fast must not
        // purge early), else this one.
        if self.clock.defers_to_store() {
            return self.store.purge(age).await;
        }
        match age.local() {
            Some(at) => self.store.purge(Cutoff::Before(at)).await,
            // A retention reaching back before the first time chrono can
            // hold ("keep forever"): nothing ended that long ago.
            None => Ok(0),
        }
    }
}
