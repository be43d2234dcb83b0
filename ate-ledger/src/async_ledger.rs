//! The ledger for async services (feature `tokio`): the same state machine
//! as [`Ledger`](crate::Ledger), awaited over an [`AsyncStore`], and the
//! whole idempotency protocol as one call, [`AsyncLedger::execute`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::clock::{Clock, SystemClock};
use crate::config::{Begin, Close, Config, check_config};
use crate::core::Core;
use crate::dispatch::Dispatch;
use crate::error::Error;
use crate::last_writes::LastWrites;
use crate::outcome::{Call, Executed, Response, Step};
use crate::store::AsyncStore;
use crate::{Fingerprint, Key, Lease, Record, State};

/// The attempt ledger, async: every call awaits the store, none blocks a
/// runtime worker. The rules are [`Ledger`](crate::Ledger)'s, from the
/// same code.
#[derive(Debug)]
pub struct AsyncLedger<S, C = SystemClock> {
    store: S,
    clock: C,
    config: Config,
    /// The records this ledger last wrote as an owner, for transitions of
    /// one round trip.
    written: LastWrites,
    /// The keys calls of this ledger are working on (from begin to close),
    /// with how many: a begin of this owner whose answer was lost is taken
    /// over only when none is.
    working: Mutex<HashMap<Key, usize>>,
    /// Tries this ledger knows it never sent but could not close (the
    /// store was away), with the reason: [`settle`](Self::settle) closes
    /// them as unsent while their lease lasts.
    unsent: Mutex<Vec<(Lease, String)>>,
    observer: Observer,
}

/// What [`AsyncLedger::observe`] was given.
#[derive(Clone, Default)]
struct Observer(Option<Arc<ObserveFn>>);

type ObserveFn = dyn Fn(&Key, Step) + Send + Sync;

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

impl Observer {
    fn tell(&self, key: &Key, step: Step) {
        if let Some(observe) = &self.0 {
            observe(key, step);
        }
    }
}

impl<S: AsyncStore> AsyncLedger<S, SystemClock> {
    /// A ledger over `store` with the default config and the system clock.
    pub fn new(store: S) -> Self {
        Self {
            store,
            clock: SystemClock,
            config: Config::default(),
            written: LastWrites::default(),
            working: Mutex::default(),
            unsent: Mutex::default(),
            observer: Observer::default(),
        }
    }
}

/// A claim on a key in [`AsyncLedger::working`], given back when dropped.
struct Working<'a> {
    working: &'a Mutex<HashMap<Key, usize>>,
    key: Key,
}

impl<'a> Working<'a> {
    fn on(working: &'a Mutex<HashMap<Key, usize>>, key: &Key) -> Self {
        *working.lock().entry(key.clone()).or_default() += 1;
        Self {
            working,
            key: key.clone(),
        }
    }

    fn alone(&self) -> bool {
        self.working.lock().get(&self.key) == Some(&1)
    }
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        let mut working = self.working.lock();
        if let Some(n) = working.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                working.remove(&self.key);
            }
        }
    }
}

impl<S: AsyncStore, C: Clock> AsyncLedger<S, C> {
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
            working: Mutex::default(),
            unsent: Mutex::default(),
            observer: Observer::default(),
        })
    }

    /// Tells `observer` each step [`execute`](Self::execute) takes, once
    /// it is durable: for metrics, say. It runs inline, so it must be
    /// quick (an atomic counter, not I/O).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use ate_ledger::{AsyncLedger, MemoryStore, Step};
    ///
    /// let dispatched = Arc::new(AtomicU64::new(0));
    /// let counter = dispatched.clone();
    /// let ledger = AsyncLedger::new(MemoryStore::new()).observe(move |_key, step| {
    ///     if step == Step::Dispatched {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// # drop(ledger);
    /// ```
    #[must_use]
    pub fn observe(mut self, observer: impl Fn(&Key, Step) + Send + Sync + 'static) -> Self {
        self.observer = Observer(Some(Arc::new(observer)));
        self
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

    fn core(&self) -> Core<'_, &S, C> {
        Core {
            store: &self.store,
            clock: &self.clock,
            config: &self.config,
            written: &self.written,
            pause: |d| Box::pin(tokio::time::sleep(d)),
        }
    }

    /// [`Ledger::get`](crate::Ledger::get).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::get`](crate::Ledger::get).
    pub async fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        self.core().get(key).await
    }

    /// [`Ledger::begin`](crate::Ledger::begin).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::begin`](crate::Ledger::begin).
    pub async fn begin(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Begin, Error> {
        self.core().begin(key, fingerprint, owner).await
    }

    /// [`Ledger::mark_dispatched`](crate::Ledger::mark_dispatched).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::mark_dispatched`](crate::Ledger::mark_dispatched).
    pub async fn mark_dispatched(&self, lease: &Lease) -> Result<(), Error> {
        self.core().mark_dispatched(lease).await
    }

    /// [`Ledger::renew`](crate::Ledger::renew).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::renew`](crate::Ledger::renew).
    pub async fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
        self.core().renew(lease).await
    }

    /// [`Ledger::close`](crate::Ledger::close).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::close`](crate::Ledger::close).
    pub async fn close(&self, lease: &Lease, close: Close) -> Result<Record, Error> {
        self.core().close(lease, close).await
    }

    /// [`close`](Self::close), taking the try's dispatch mark back first
    /// where `unsent` ([`Call::NotProcessed`]).
    async fn close_as(&self, lease: &Lease, close: Close, unsent: bool) -> Result<Record, Error> {
        self.core().close_as(lease, close, unsent).await
    }

    /// [`Ledger::revive`](crate::Ledger::revive).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::revive`](crate::Ledger::revive).
    pub async fn revive(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Lease, Error> {
        self.core().revive(key, fingerprint, owner).await
    }

    /// [`Ledger::adopt`](crate::Ledger::adopt).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::adopt`](crate::Ledger::adopt).
    pub async fn adopt(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
    ) -> Result<Option<Lease>, Error> {
        self.core().adopt(key, fingerprint, owner).await
    }

    /// [`Ledger::recover`](crate::Ledger::recover).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::recover`](crate::Ledger::recover).
    pub async fn recover(&self) -> Result<Vec<Record>, Error> {
        self.core().recover_where(|_| false).await
    }

    /// [`Ledger::recover_owner`](crate::Ledger::recover_owner).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::recover`](crate::Ledger::recover).
    pub async fn recover_owner(&self, owner: &str) -> Result<Vec<Record>, Error> {
        self.core()
            .recover_where(|lease| lease.owner == owner)
            .await
    }

    /// [`Ledger::recover_all`](crate::Ledger::recover_all).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::recover`](crate::Ledger::recover).
    pub async fn recover_all(&self) -> Result<Vec<Record>, Error> {
        self.core().recover_where(|_| true).await
    }

    /// [`Ledger::purge`](crate::Ledger::purge).
    ///
    /// # Errors
    ///
    /// As for [`Ledger::purge`](crate::Ledger::purge).
    pub async fn purge(&self) -> Result<usize, Error> {
        self.core().purge().await
    }

    /// Runs `call` at most once for `key` and answers every repeat with
    /// its recorded answer: the whole idempotency protocol.
    ///
    /// It begins the attempt, or: replays a recorded answer
    /// ([`Executed::Replayed`]); revives one that failed before the
    /// provider and runs `call` again; takes over this owner's own begin
    /// whose answer was lost (no call of this ledger works on the key);
    /// reports one dispatched without an answer
    /// ([`Executed::ProviderUnavailable`], never run again). While `call`
    /// runs, the lease is renewed every third of its TTL. `call` gets a
    /// [`Dispatch`] and must `send()` it right before contacting the
    /// provider; what it returns ([`Call`]) closes the attempt: a provider
    /// answer is recorded for replays, a failure before dispatch is
    /// revivable, one after it is ambiguous and final.
    ///
    /// ```
    /// use ate_ledger::{AsyncLedger, Call, Executed, Fingerprint, Key, MemoryStore, Response};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let ledger = AsyncLedger::new(MemoryStore::new());
    /// let key = Key::new("caller-7", "order-42");
    /// let fp = Fingerprint::of_json(&serde_json::json!({"amount": 5}));
    /// let run = || ledger.execute(&key, &fp, "pod-a", |mut dispatch| async move {
    ///     if dispatch.send().await.is_err() {
    ///         return Call::PreProvider("could not mark the try dispatched".into());
    ///     }
    ///     // ... the provider request ...
    ///     Call::Succeeded(Response::new(200, br#"{"receipt":"r-1"}"#.to_vec()))
    /// });
    /// let first = run().await?;
    /// assert!(matches!(first, Executed::Answered { recorded: true, .. }));
    /// // A repeat gets the same bytes, and the provider is not called.
    /// let again = run().await?;
    /// assert!(matches!(again, Executed::Replayed(ref r) if r.body == br#"{"receipt":"r-1"}"#));
    /// # Ok::<(), ate_ledger::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::Conflict`] (with `retry_after`): another call works on
    ///   the key now (answer 409 with [`Error::retry_after_secs`]).
    ///   Also when this call's attempt was taken over and revived
    ///   elsewhere while it ran without its lease (frozen past it).
    /// - [`Error::FingerprintMismatch`]: the key was used with another
    ///   request (422).
    /// - [`Error::InvalidKey`], and the store's errors (503): nothing was
    ///   sent. A store that fails at the dispatch mark is answered at
    ///   once, after a second of retries: the try is closed as revivable
    ///   if the store takes that within another second, and otherwise
    ///   taken over by this ledger's next call on the key (elsewhere it
    ///   ends with its lease).
    ///
    /// A call that lost its lease while it ran (frozen past it) and whose
    /// attempt another worker resolved answers what the ledger recorded
    /// ([`Executed::Replayed`], or [`Executed::ProviderUnavailable`] with
    /// `replayed`), as every repeat will.
    pub async fn execute<F, Fut>(
        &self,
        key: &Key,
        fingerprint: &Fingerprint,
        owner: &str,
        call: F,
    ) -> Result<Executed, Error>
    where
        F: FnOnce(Dispatch) -> Fut,
        Fut: Future<Output = Call>,
    {
        let working = Working::on(&self.working, key);
        let tell = |step| self.observer.tell(key, step);
        let mut revive_failures = 0;
        let lease = loop {
            // A store that fails (down, failing over) is asked again for up
            // to a second: a begin that landed and lost only its answer is
            // then found in flight under this owner's lease, and taken over
            // below.
            let begun = retry(key, "begin", STORE_RETRY, || {
                self.begin(key, fingerprint, owner)
            });
            match begun.await {
                Ok(Begin::Started(lease)) => {
                    tell(Step::Begun);
                    break lease;
                }
                Ok(Begin::Replay(record)) if record.is_revivable() => {
                    match self.revive(key, fingerprint, owner).await {
                        Ok(lease) => {
                            tell(Step::Revived);
                            break lease;
                        }
                        // It may have landed: begin again, which finds it in
                        // flight (and takes it over) or still revivable.
                        Err(Error::Storage(_) | Error::Contended { .. }) if revive_failures < 2 => {
                            revive_failures += 1;
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(Begin::Replay(record)) => {
                    tell(Step::Replayed);
                    return recorded_answer(record);
                }
                Err(conflict @ Error::Conflict { .. }) => {
                    // This owner's own begin whose answer was lost, and no
                    // call here works on it: take it over.
                    if !working.alone() {
                        return Err(conflict);
                    }
                    let adopt = retry(key, "take over the try", STORE_RETRY, || {
                        self.adopt(key, fingerprint, owner)
                    });
                    match adopt.await? {
                        Some(lease) => {
                            tell(Step::Adopted);
                            break lease;
                        }
                        None => return Err(conflict),
                    }
                }
                Err(e) => return Err(e),
            }
        };
        self.drive(lease, call).await
    }

    /// Runs `call` under `lease`: answers its dispatch requests, renews the
    /// lease, and closes with what it returns.
    async fn drive<F, Fut>(&self, lease: Lease, call: F) -> Result<Executed, Error>
    where
        F: FnOnce(Dispatch) -> Fut,
        Fut: Future<Output = Call>,
    {
        let key = lease.key.clone();
        let (request, mut requests) = oneshot::channel();
        let call = call(Dispatch::new(request, lease.fence()));
        tokio::pin!(call);
        let every = (self.config.lease_ttl / 3).max(Duration::from_millis(10));
        let mut renew = tokio::time::interval_at(after(every), every);
        let mut lease = lease;
        let mut dispatch = Marked::No;
        let mut requests_open = true;
        let answer = loop {
            tokio::select! {
                answer = &mut call => break answer,
                asked = &mut requests, if requests_open => {
                    requests_open = false;
                    if let Ok(reply) = asked {
                        // Marking again is a no-op if a write landed and
                        // only its answer was lost: an Ok is durable.
                        let marked = retry(&key, "mark the try dispatched", STORE_RETRY, || {
                            self.mark_dispatched(&lease)
                        })
                        .await;
                        dispatch = match &marked {
                            Ok(()) => {
                                self.observer.tell(&key, Step::Dispatched);
                                Marked::Yes
                            }
                            Err(e @ (Error::Storage(_) | Error::Contended { .. })) => {
                                Marked::StoreFailed(e.clone())
                            }
                            Err(_) => Marked::No,
                        };
                        let _ = reply.send(marked);
                    }
                }
                _ = renew.tick() => {
                    // A lease lost here (taken over) shows at the close.
                    match self.renew(&lease).await {
                        Ok(renewed) => lease = renewed,
                        Err(e) => tracing::warn!(key = %key, "cannot renew the lease: {e}"),
                    }
                }
            }
        };
        self.finish(&lease, dispatch, answer).await
    }

    /// Closes the attempt with the call's answer.
    async fn finish(
        &self,
        lease: &Lease,
        dispatch: Marked,
        answer: Call,
    ) -> Result<Executed, Error> {
        let key = &lease.key;
        let dispatched = matches!(dispatch, Marked::Yes);
        if let (Marked::StoreFailed(failed), Call::PreProvider(reason)) = (&dispatch, &answer) {
            return Err(self.close_undispatched(lease, reason, failed).await);
        }
        // The provider said it did not process it: the try is closed as
        // one that never reached it, its dispatch mark taken back.
        let unsent = matches!(answer, Call::NotProcessed(_));
        let (close, executed) = match answer {
            Call::NotProcessed(reason) => (
                Close::PreProvider(reason.clone()),
                Executed::FailedPreProvider { reason },
            ),
            Call::Succeeded(response) => (
                Close::Succeeded(response.encode()),
                Executed::Answered {
                    response,
                    recorded: true,
                },
            ),
            Call::Rejected(response) => (
                Close::FailedAtProvider(response.encode()),
                Executed::Answered {
                    response,
                    recorded: true,
                },
            ),
            Call::PreProvider(reason) if !dispatched => (
                Close::PreProvider(reason.clone()),
                Executed::FailedPreProvider { reason },
            ),
            // Failing "before the provider" after the dispatch mark is not
            // knowable: the request may have gone.
            Call::PreProvider(reason) | Call::Ambiguous(reason) => (
                Close::ProviderUnavailable(reason.clone()),
                Executed::ProviderUnavailable {
                    reason,
                    replayed: false,
                },
            ),
        };
        if !dispatched
            && !matches!(close, Close::PreProvider(_))
            && self.mark_dispatched(lease).await.is_ok()
        {
            // An answer without the dispatch mark (the call never sent it):
            // the answer is real, so record it, marking it first.
            self.observer.tell(key, Step::Dispatched);
        }
        // The outcome is known by now: a failing store is asked for as long
        // as a lease lasts rather than leaving the attempt open (and, once
        // dispatched, resolved as provider_unavailable when it expires).
        let budget = self.config.lease_ttl;
        let closed = retry(key, "close the attempt", budget, || {
            self.close_as(lease, close.clone(), unsent)
        });
        match closed.await {
            Ok(record) => {
                if let Some(step) = Step::closing(&record.state) {
                    self.observer.tell(key, step);
                }
                Ok(executed)
            }
            // This worker lost the attempt while it held it (frozen past the
            // lease: a VM pause, a long GC) and another resolved it: the
            // answer is what the ledger recorded, as every retry gets it.
            Err(Error::StaleLease { .. }) => match self.get(key).await {
                Ok(Some(record)) if record.state.is_closed() => {
                    tracing::warn!(
                        key = %key,
                        state = record.state.name(),
                        "lost the lease mid-call; answering what the ledger recorded"
                    );
                    recorded_answer(record)
                }
                // Taken over and revived elsewhere: in flight there.
                Ok(Some(_)) => Err(Error::Conflict {
                    key: key.to_string(),
                    retry_after: self.config.lease_ttl,
                }),
                _ => Ok(unrecorded(executed)),
            },
            // The answer stands; only its record is lost (the store failed
            // for a whole lease): the caller still gets it.
            Err(_) => Ok(unrecorded(executed)),
        }
    }

    /// A try whose dispatch mark the store failed: nothing was sent. It is
    /// closed as a pre-provider failure (revivable) if the store takes that
    /// within [`STORE_RETRY`]; if not, this ledger's next call on the key
    /// takes it over, and elsewhere it ends with its lease. Either way the
    /// answer is the store's failure, at once (503: retry), rather than
    /// waiting out the store.
    async fn close_undispatched(&self, lease: &Lease, reason: &str, failed: &Error) -> Error {
        let close = Close::PreProvider(reason.to_owned());
        let closed = retry(
            &lease.key,
            "close the undispatched try",
            STORE_RETRY,
            // Unsent, whatever the record says: a mark that timed out may
            // land before this close does (a statement that sat in a
            // stalled connection), and this worker knows it sent nothing.
            || self.close_as(lease, close.clone(), true),
        );
        match closed.await {
            Ok(record) => {
                if let Some(step) = Step::closing(&record.state) {
                    self.observer.tell(&lease.key, step);
                }
            }
            Err(e) => {
                tracing::warn!(
                    key = %lease.key,
                    "cannot close the undispatched try ({e}); settle() closes it while its \
                     lease lasts, a retry here takes it over, elsewhere it ends with its lease"
                );
                self.unsent.lock().push((lease.clone(), reason.to_owned()));
            }
        }
        failed.clone()
    }

    /// Closes, as unsent, each try whose dispatch mark the store failed and
    /// whose close it failed too, while its lease lasts: a mark that timed
    /// out may still land once the store is back (a statement that sat in a
    /// stalled connection), and left so the try would read as dispatched,
    /// every retry a final `provider_unavailable` for a request never sent.
    /// Call it periodically (the example service does, with its
    /// reconciler); it answers how many tries still wait. One store call
    /// per try, each bounded by the store's own timeout; a try whose lease
    /// has ended (or that another worker resolved) is dropped.
    pub async fn settle(&self) -> usize {
        let pending = std::mem::take(&mut *self.unsent.lock());
        let mut keep = Vec::new();
        for (lease, reason) in pending {
            if self.clock.now() >= lease.expires_at {
                continue;
            }
            match self
                .close_as(&lease, Close::PreProvider(reason.clone()), true)
                .await
            {
                Ok(record) => {
                    if let Some(step) = Step::closing(&record.state) {
                        self.observer.tell(&lease.key, step);
                    }
                }
                Err(Error::Storage(_) | Error::Contended { .. }) => keep.push((lease, reason)),
                Err(_) => {}
            }
        }
        let mut unsent = self.unsent.lock();
        unsent.extend(keep);
        unsent.len()
    }
}

/// Whether [`Dispatch::send`] marked the try.
enum Marked {
    /// Not asked, or refused for a reason of the ledger's (a stale lease).
    No,
    Yes,
    /// The store failed (down, contended): nothing may have been sent.
    StoreFailed(Error),
}

/// `executed` whose answer could not be recorded.
fn unrecorded(executed: Executed) -> Executed {
    match executed {
        Executed::Answered { response, .. } => Executed::Answered {
            response,
            recorded: false,
        },
        other => other,
    }
}

/// What a closed `record` answers every repeat.
fn recorded_answer(record: Record) -> Result<Executed, Error> {
    match record.state {
        State::Succeeded { outcome } | State::FailedAtProvider { outcome } => {
            Response::decode(&record.key, &outcome).map(Executed::Replayed)
        }
        // A pre-provider failure that is not revivable had a try that may
        // have reached the provider: as ambiguous as one unanswered.
        State::ProviderUnavailable { reason } | State::FailedPreProvider { reason } => {
            Ok(Executed::ProviderUnavailable {
                reason,
                replayed: true,
            })
        }
        State::InFlight => Err(Error::Corrupt {
            what: format!("record {}", record.key),
            detail: "replayed while in flight".into(),
        }),
    }
}

/// How long a begin, revive, adoption or dispatch mark is retried while
/// the store fails.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// `d` from now, saturating about a century ahead: a `lease_ttl` of
/// `Duration::MAX` ("never expire") must not overflow an `Instant`.
fn after(d: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = tokio::time::Instant::now();
    now.checked_add(d.min(FAR))
        .unwrap_or(now + Duration::from_secs(3600))
}

/// `op` again, backing off from 50 ms to a second, while it fails with a
/// storage error or contention, until `budget` has passed: the last answer.
/// Each wait is logged, saying `what` cannot be done yet.
async fn retry<T, Fut>(
    key: &Key,
    what: &str,
    budget: Duration,
    mut op: impl FnMut() -> Fut,
) -> Result<T, Error>
where
    Fut: Future<Output = Result<T, Error>>,
{
    let give_up = after(budget);
    let mut pause = Duration::from_millis(50);
    loop {
        match op().await {
            Err(e @ (Error::Storage(_) | Error::Contended { .. })) if after(pause) < give_up => {
                tracing::warn!(key = %key, "cannot {what} yet ({e}); retrying in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            answer => return answer,
        }
    }
}
