//! The gate itself.
//!
//! All hot-path state lives in ONE atomic word: the draining bit, a
//! "someone is waiting for idle" bit, and the in-flight count. Admission is a
//! single `fetch_add` that also reads the draining bit, so admission and
//! drain are ordered by that one word: a wait for idle that starts after
//! `begin_drain()` sees every guard admitted before it. Only the cold paths
//! (drain, registering callbacks, waiting, the last guard leaving while
//! someone waits) take a lock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use parking_lot::{Condvar, Mutex};

use crate::clock::{Clock, SystemClock};
use crate::{CLOSE_GOING_AWAY, Error};

const DRAINING: u64 = 1 << 63;
const WAITERS: u64 = 1 << 62;
const STARTING: u64 = 1 << 61;
const COUNT_MASK: u64 = STARTING - 1;

/// The states of a gate, in the only order they come in: Starting ->
/// Serving -> Draining (a drain while starting goes straight to Draining).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum State {
    /// Not ready yet: the service is still getting its stores reachable
    /// and its caches warm ([`GateBuilder::starting`]); `/ready` answers
    /// 503 until [`Gate::mark_ready`]. Work that arrives is served.
    Starting,
    /// Ready for new work.
    Serving,
    /// Draining: not ready, finishing admitted work. One-way.
    Draining,
}

/// What admission does with new work while draining.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdmissionPolicy {
    /// Serve it, and tell the handler to answer with `Connection: close`
    /// (load balancers keep routing for seconds after readiness fails).
    #[default]
    LameDuck,
    /// Refuse it with [`Error::Draining`] (answer 503 with `Retry-After`).
    Strict {
        /// The `Retry-After` to suggest, in whole seconds.
        retry_after_secs: u64,
    },
}

/// How a bounded wait for idle ended.
///
/// With `serde`: `{"outcome": "completed"}` or
/// `{"outcome": "timed_out", "in_flight": 3}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "outcome", rename_all = "snake_case"))]
#[must_use]
pub enum WaitOutcome {
    /// In-flight work reached zero.
    Completed,
    /// The timeout passed first.
    TimedOut {
        /// Work still in flight when the wait gave up.
        in_flight: u64,
    },
}

impl WaitOutcome {
    /// Whether the wait completed.
    pub fn is_completed(self) -> bool {
        matches!(self, Self::Completed)
    }
}

/// The answer of [`Gate::begin_drain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum BeginDrain {
    /// This call flipped the gate to draining (and ran the callbacks).
    Started {
        /// When the drain began.
        at: DateTime<Utc>,
    },
    /// A drain was already under way; nothing changed.
    AlreadyDraining {
        /// When the drain began (the first call's time).
        since: DateTime<Utc>,
    },
}

impl BeginDrain {
    /// Whether this call started the drain.
    pub fn started(self) -> bool {
        matches!(self, Self::Started { .. })
    }

    /// When the drain began.
    pub fn since(self) -> DateTime<Utc> {
        match self {
            Self::Started { at } | Self::AlreadyDraining { since: at } => at,
        }
    }
}

/// A cheap view of a gate for metrics. Each field is read atomically on
/// its own (the last wait's outcome and its count together); fields may
/// come from instants a few nanoseconds apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// Current state.
    pub state: State,
    /// When the drain began, if it has.
    pub drain_started_at: Option<DateTime<Utc>>,
    /// Admitted work not yet finished.
    pub in_flight: u64,
    /// How the last bounded wait ended, if any finished.
    pub last_wait: Option<WaitOutcome>,
    /// Requests admitted while draining (the lame-duck policy serves them
    /// with `Connection: close`): a counter, for a metric showing how long
    /// the load balancer kept routing to the pod.
    pub admitted_while_draining: u64,
    /// Work turned away while draining: requests refused under the strict
    /// policy, and sessions told to close at once (1001). A counter.
    pub refused_while_draining: u64,
}

impl Snapshot {
    /// `1` while serving, else `0` (a `ready` gauge).
    pub fn ready_gauge(&self) -> i64 {
        i64::from(self.state == State::Serving)
    }

    /// `1` while draining, else `0` (a `drain_in_progress` gauge).
    pub fn drain_in_progress_gauge(&self) -> i64 {
        i64::from(self.state == State::Draining)
    }
}

/// The answer of [`Gate::admit_session`] for long-lived sessions.
#[derive(Debug)]
#[must_use]
pub enum SessionAdmission {
    /// Serving: open the session; it stays counted until the guard drops.
    Open(OwnedGuard),
    /// Draining: ACCEPT the upgrade, then close with `close_code` (1001).
    /// Refusing before the upgrade is a failed HTTP upgrade, which client
    /// circuit breakers count as a server failure.
    AcceptThenClose {
        /// The WebSocket close code to send: 1001, going away.
        close_code: u16,
    },
}

type Callback = Box<dyn FnOnce() + Send + 'static>;

struct DrainInfo {
    started_at: Option<DateTime<Utc>>,
    callbacks: Vec<Callback>,
}

struct Inner {
    word: AtomicU64,
    // The last wait's outcome and count in one word, so a reader never
    // pairs one wait's outcome with another's count: 0 = none,
    // 1 = completed, 2 + n = timed out with n in flight (n < 2^62).
    last_wait: AtomicU64,
    // Counters for the snapshot, touched only while draining.
    admitted_while_draining: AtomicU64,
    refused_while_draining: AtomicU64,
    /// How long `/ready` still answers 200 once the drain has begun.
    ready_while_draining: std::time::Duration,
    policy: AdmissionPolicy,
    clock: Box<dyn Clock>,
    drain: Mutex<DrainInfo>,
    // Waiters for idle: the number of them, guarded with the condvar.
    waiters: Mutex<usize>,
    idle: Condvar,
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
    // Woken once, when the drain begins.
    #[cfg(feature = "tokio")]
    drain_begun: tokio::sync::Notify,
}

/// A readiness gate. Clones share the same gate.
///
/// `Send + Sync`; clone it into every handler.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("policy", &self.inner.policy)
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

/// The state a gate's word says.
#[inline]
fn state_of(word: u64) -> State {
    if word & DRAINING != 0 {
        State::Draining
    } else if word & STARTING != 0 {
        State::Starting
    } else {
        State::Serving
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

/// A registered async waiter, unregistered when dropped.
#[cfg(feature = "tokio")]
struct Waiting<'a>(&'a Gate);

#[cfg(feature = "tokio")]
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut waiters = self.0.inner.waiters.lock();
        self.0.remove_waiter(&mut waiters);
    }
}

/// Builds a [`Gate`] with a policy and a clock.
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct GateBuilder {
    policy: AdmissionPolicy,
    clock: Option<Box<dyn Clock>>,
    starting: bool,
    ready_while_draining: std::time::Duration,
}

impl GateBuilder {
    /// Sets the admission policy while draining (default: lame duck).
    pub fn policy(mut self, policy: AdmissionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the clock the drain start time is read from.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// Starts the gate in [`State::Starting`]: not ready until
    /// [`Gate::mark_ready`], so a pod joins the load balancer only once
    /// its stores answer (default: serving at once).
    pub fn starting(mut self) -> Self {
        self.starting = true;
        self
    }

    /// Keeps readiness (`/ready`) at 200 for `grace` after the drain
    /// begins (default: none, 503 at once), while every response carries
    /// `Connection: close` (lame duck) so keep-alive clients move away.
    ///
    /// Which to choose depends on what follows `/ready`:
    ///
    /// - A load balancer that health-checks pods itself (AWS ALB or NLB
    ///   target groups, GCP NEGs, HAProxy): keep the default. `/ready`
    ///   failing at once takes the pod out before its process stops.
    /// - kube-proxy alone (a `Service` without such a balancer, or an
    ///   ingress controller that routes to `EndpointSlices`): since
    ///   Kubernetes 1.26 (KEP-1669), when a Service has no ready endpoint
    ///   left, traffic goes to endpoints that are terminating but still
    ///   `serving`, which is the pod's readiness. A `/ready` that fails at
    ///   the first SIGTERM marks such a pod not serving, and during a
    ///   rollout that terminates every old pod before new ones are ready
    ///   (or a scale to zero) traffic is dropped (kubernetes/ingress-nginx
    ///   #13689). A grace of a few seconds less than the drain's bounded
    ///   wait keeps the pod serving as that fallback while the endpoint
    ///   controller removes it from the ready set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ate_readiness::{Gate, clock::ManualClock};
    ///
    /// let clock = ManualClock::default();
    /// let gate = Gate::builder()
    ///     .clock(clock.clone())
    ///     .ready_while_draining(Duration::from_secs(10))
    ///     .build();
    /// let _ = gate.begin_drain();
    /// assert_eq!(gate.readiness_status(), 200);
    /// clock.advance(chrono::TimeDelta::seconds(9));
    /// assert_eq!(gate.readiness_status(), 200);
    /// clock.advance(chrono::TimeDelta::seconds(1));
    /// assert_eq!(gate.readiness_status(), 503);
    /// ```
    pub fn ready_while_draining(mut self, grace: std::time::Duration) -> Self {
        self.ready_while_draining = grace;
        self
    }

    /// Builds the gate: `Serving`, or `Starting` if asked.
    pub fn build(self) -> Gate {
        Gate {
            inner: Arc::new(Inner {
                word: AtomicU64::new(if self.starting { STARTING } else { 0 }),
                last_wait: AtomicU64::new(0),
                admitted_while_draining: AtomicU64::new(0),
                refused_while_draining: AtomicU64::new(0),
                ready_while_draining: self.ready_while_draining,
                policy: self.policy,
                clock: self.clock.unwrap_or_else(|| Box::new(SystemClock)),
                drain: Mutex::new(DrainInfo {
                    started_at: None,
                    callbacks: Vec::new(),
                }),
                waiters: Mutex::new(0),
                idle: Condvar::new(),
                #[cfg(feature = "tokio")]
                notify: tokio::sync::Notify::new(),
                #[cfg(feature = "tokio")]
                drain_begun: tokio::sync::Notify::new(),
            }),
        }
    }
}

impl Gate {
    /// A serving gate with the lame-duck policy and the system clock.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for a policy or clock other than the defaults.
    pub fn builder() -> GateBuilder {
        GateBuilder::default()
    }

    /// A serving gate reading time from `clock`.
    pub fn with_clock(clock: impl Clock) -> Self {
        Self::builder().clock(clock).build()
    }

    /// The admission policy.
    pub fn policy(&self) -> AdmissionPolicy {
        self.inner.policy
    }

    /// The current state: one atomic load.
    #[inline]
    pub fn state(&self) -> State {
        state_of(self.inner.word.load(Ordering::Acquire))
    }

    /// Whether the gate is serving (ready, not draining): one atomic load.
    #[inline]
    pub fn is_serving(&self) -> bool {
        self.state() == State::Serving
    }

    /// Whether a drain has begun: one atomic load.
    #[inline]
    pub fn is_draining(&self) -> bool {
        self.inner.word.load(Ordering::Acquire) & DRAINING != 0
    }

    /// Ends [`State::Starting`]: the gate serves, and `/ready` answers 200.
    /// Returns whether this call moved it; a later call, or one on a gate
    /// that was never starting or is draining, changes nothing (the order
    /// is one-way).
    ///
    /// ```
    /// use ate_readiness::{Gate, State};
    ///
    /// let gate = Gate::builder().starting().build();
    /// assert_eq!(gate.readiness_status(), 503); // stores not checked yet
    /// assert!(gate.mark_ready());
    /// assert_eq!(gate.state(), State::Serving);
    /// assert!(!gate.mark_ready());
    /// ```
    pub fn mark_ready(&self) -> bool {
        let before = self.inner.word.fetch_and(!STARTING, Ordering::AcqRel);
        before & STARTING != 0 && before & DRAINING == 0
    }

    /// Liveness: 200 while the process is alive, whatever the state.
    pub fn liveness_status(&self) -> u16 {
        200
    }

    /// Readiness: 200 while serving, 503 while starting or draining (but
    /// for the first [`ready_while_draining`](GateBuilder::ready_while_draining)
    /// of a drain, if set).
    #[inline]
    pub fn readiness_status(&self) -> u16 {
        if self.is_serving() || self.in_ready_grace() {
            200
        } else {
            503
        }
    }

    /// Whether the drain began less than the ready grace ago.
    fn in_ready_grace(&self) -> bool {
        let grace = self.inner.ready_while_draining;
        if grace.is_zero() || !self.is_draining() {
            return false;
        }
        let Some(since) = self.inner.drain.lock().started_at else {
            return false;
        };
        let elapsed = self.inner.clock.now().signed_duration_since(since);
        // A clock that stepped back counts as no time passed.
        elapsed.to_std().unwrap_or_default() < grace
    }

    /// Flips the gate to draining. Idempotent and thread-safe.
    ///
    /// The first call records the start time from the clock and runs the
    /// registered drain callbacks, once, on the calling thread; every later
    /// call changes nothing and reports [`BeginDrain::AlreadyDraining`] with
    /// the first call's time.
    ///
    /// # Panics
    ///
    /// If a callback panics: the gate is draining by then, and every other
    /// callback still runs (one that stops a consumer is not skipped for a
    /// faulty one that exports a metric); then the first panic goes on to
    /// the caller.
    pub fn begin_drain(&self) -> BeginDrain {
        let mut info = self.inner.drain.lock();
        if let Some(since) = info.started_at {
            return BeginDrain::AlreadyDraining { since };
        }
        let at = self.inner.clock.now();
        info.started_at = Some(at);
        self.inner.word.fetch_or(DRAINING, Ordering::AcqRel);
        let callbacks = std::mem::take(&mut info.callbacks);
        drop(info);
        #[cfg(feature = "tokio")]
        self.inner.drain_begun.notify_waiters();
        let mut first_panic = None;
        for callback in callbacks {
            // The callback is consumed: nothing it touched is observed
            // again through it after a panic.
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(callback)) {
                first_panic.get_or_insert(panic);
            }
        }
        if let Some(panic) = first_panic {
            std::panic::resume_unwind(panic);
        }
        BeginDrain::Started { at }
    }

    /// Registers a callback run once when the drain begins (for example to
    /// stop a background consumer). If the gate is already draining it runs
    /// now, on this thread.
    pub fn on_drain(&self, callback: impl FnOnce() + Send + 'static) {
        let mut info = self.inner.drain.lock();
        if info.started_at.is_some() {
            drop(info);
            callback();
        } else {
            info.callbacks.push(Box::new(callback));
        }
    }

    /// Admits one piece of work, counted in flight until the guard drops.
    ///
    /// Lock-free: one atomic read-modify-write (and one to release). The
    /// guard borrows the gate; use [`admit_owned`](Self::admit_owned) to
    /// move it into a spawned task. While draining, the default policy still
    /// admits (the guard says so); [`AdmissionPolicy::Strict`] refuses with
    /// [`Error::Draining`].
    ///
    /// # Errors
    ///
    /// [`Error::Draining`] (with the policy's `Retry-After`) only under
    /// [`AdmissionPolicy::Strict`], while draining; nothing is counted then.
    #[inline]
    pub fn admit(&self) -> Result<Guard<'_>, Error> {
        let before = self.inner.word.fetch_add(1, Ordering::AcqRel);
        let guard = Guard {
            gate: self,
            admitted_while_draining: before & DRAINING != 0,
        };
        if guard.admitted_while_draining {
            return self.admit_draining(guard);
        }
        Ok(guard)
    }

    /// [`admit`](Self::admit) while draining: counted, and refused under
    /// the strict policy.
    #[cold]
    fn admit_draining<'a>(&self, guard: Guard<'a>) -> Result<Guard<'a>, Error> {
        if let AdmissionPolicy::Strict { retry_after_secs } = self.inner.policy {
            drop(guard);
            self.inner
                .refused_while_draining
                .fetch_add(1, Ordering::Relaxed);
            return Err(Error::Draining { retry_after_secs });
        }
        self.inner
            .admitted_while_draining
            .fetch_add(1, Ordering::Relaxed);
        Ok(guard)
    }

    /// Like [`admit`](Self::admit), with a `'static` guard that owns a
    /// handle to the gate (one more reference-count update).
    ///
    /// # Errors
    ///
    /// As for [`admit`](Self::admit).
    pub fn admit_owned(&self) -> Result<OwnedGuard, Error> {
        self.admit().map(Guard::into_owned)
    }

    /// Admits a long-lived session (a WebSocket). While serving it is counted
    /// like [`admit`](Self::admit); while draining the caller must accept
    /// the upgrade and close with 1001, whatever the policy.
    pub fn admit_session(&self) -> SessionAdmission {
        let before = self.inner.word.fetch_add(1, Ordering::AcqRel);
        let guard = Guard {
            gate: self,
            admitted_while_draining: before & DRAINING != 0,
        };
        if guard.admitted_while_draining {
            drop(guard);
            self.inner
                .refused_while_draining
                .fetch_add(1, Ordering::Relaxed);
            SessionAdmission::AcceptThenClose {
                close_code: CLOSE_GOING_AWAY,
            }
        } else {
            SessionAdmission::Open(guard.into_owned())
        }
    }

    /// Ends one piece of admitted work.
    #[inline]
    fn release(&self) {
        let before = self.inner.word.fetch_sub(1, Ordering::AcqRel);
        if before & COUNT_MASK == 1 && before & WAITERS != 0 {
            self.wake_waiters();
        }
    }

    /// Admitted work not yet finished.
    pub fn in_flight(&self) -> u64 {
        self.inner.word.load(Ordering::Acquire) & COUNT_MASK
    }

    /// A snapshot for metrics.
    pub fn snapshot(&self) -> Snapshot {
        let word = self.inner.word.load(Ordering::Acquire);
        let drain_started_at = if word & DRAINING != 0 {
            self.inner.drain.lock().started_at
        } else {
            None
        };
        Snapshot {
            state: state_of(word),
            drain_started_at,
            in_flight: word & COUNT_MASK,
            last_wait: self.last_wait(),
            admitted_while_draining: self.inner.admitted_while_draining.load(Ordering::Relaxed),
            refused_while_draining: self.inner.refused_while_draining.load(Ordering::Relaxed),
        }
    }

    fn last_wait(&self) -> Option<WaitOutcome> {
        match self.inner.last_wait.load(Ordering::Acquire) {
            0 => None,
            1 => Some(WaitOutcome::Completed),
            n => Some(WaitOutcome::TimedOut { in_flight: n - 2 }),
        }
    }

    fn record_wait(&self, outcome: WaitOutcome) -> WaitOutcome {
        let word = match outcome {
            WaitOutcome::Completed => 1,
            // In flight is below 2^62 (the gate's count mask).
            WaitOutcome::TimedOut { in_flight } => in_flight.min(COUNT_MASK) + 2,
        };
        self.inner.last_wait.store(word, Ordering::Release);
        outcome
    }

    /// Registers as a waiter: from now on the guard that brings the count to
    /// zero wakes waiters. Called with the `waiters` lock held.
    fn add_waiter(&self, waiters: &mut usize) {
        *waiters += 1;
        self.inner.word.fetch_or(WAITERS, Ordering::AcqRel);
    }

    fn remove_waiter(&self, waiters: &mut usize) {
        *waiters -= 1;
        if *waiters == 0 {
            self.inner.word.fetch_and(!WAITERS, Ordering::AcqRel);
        }
    }

    /// Blocks until in-flight work reaches zero or `timeout` passes. Does
    /// not spin: it sleeps on a condition variable that the last guard
    /// signals. Usually called after [`begin_drain`](Self::begin_drain).
    pub fn wait_idle(&self, timeout: Duration) -> WaitOutcome {
        let deadline = Instant::now().checked_add(timeout);
        let mut waiters = self.inner.waiters.lock();
        self.add_waiter(&mut waiters);
        let outcome = loop {
            let count = self.in_flight();
            if count == 0 {
                break WaitOutcome::Completed;
            }
            let timed_out = match deadline {
                Some(deadline) => self
                    .inner
                    .idle
                    .wait_until(&mut waiters, deadline)
                    .timed_out(),
                None => {
                    self.inner.idle.wait(&mut waiters);
                    false
                }
            };
            if timed_out {
                let in_flight = self.in_flight();
                break if in_flight == 0 {
                    WaitOutcome::Completed
                } else {
                    WaitOutcome::TimedOut { in_flight }
                };
            }
        };
        self.remove_waiter(&mut waiters);
        drop(waiters);
        self.record_wait(outcome)
    }

    /// Resolves when the drain begins (at once if it has), with its start
    /// time: for async work that is not a request, such as a queue consumer
    /// or a scheduler, to stop taking new work then. Cancel-safe, and it
    /// registers nothing that outlives it, so it can sit in a `select!`
    /// that runs in a loop.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ate_readiness::Gate;
    ///
    /// let gate = Gate::new();
    /// let (tx, mut jobs) = tokio::sync::mpsc::channel::<u32>(8);
    /// let consumer = tokio::spawn({
    ///     let gate = gate.clone();
    ///     async move {
    ///         let mut done = 0;
    ///         loop {
    ///             tokio::select! {
    ///                 _ = gate.drain_begun() => break done, // take no more
    ///                 Some(_job) = jobs.recv() => done += 1,
    ///             }
    ///         }
    ///     }
    /// });
    /// tx.send(1).await.unwrap();
    /// tokio::task::yield_now().await;
    /// let _ = gate.begin_drain(); // the preStop hook
    /// assert_eq!(consumer.await.unwrap(), 1);
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn drain_begun(&self) -> DateTime<Utc> {
        loop {
            let begun = self.inner.drain_begun.notified();
            tokio::pin!(begun);
            // Registered BEFORE the check, so a drain that begins in
            // between cannot be missed.
            begun.as_mut().enable();
            if let Some(at) = self.inner.drain.lock().started_at {
                return at;
            }
            begun.await;
        }
    }

    /// Waits (async) until in-flight work reaches zero or `timeout` passes.
    /// Uses tokio time, so tests can pause it. Cancel-safe: dropped before
    /// it resolves (a `select!` on a second signal, a `timeout`), it leaves
    /// nothing registered, and records no outcome.
    #[cfg(feature = "tokio")]
    pub async fn wait_idle_async(&self, timeout: Duration) -> WaitOutcome {
        let sleep = tokio::time::sleep(timeout);
        tokio::pin!(sleep);
        {
            let mut waiters = self.inner.waiters.lock();
            self.add_waiter(&mut waiters);
        }
        // Unregisters on every way out, a cancellation too: a waiter left
        // registered would make every last guard's drop take the lock.
        let _waiting = Waiting(self);
        let outcome = loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Register for the wake-up BEFORE checking the count, so a guard
            // dropped in between cannot be missed.
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                break WaitOutcome::Completed;
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = &mut sleep => {
                    let in_flight = self.in_flight();
                    break if in_flight == 0 {
                        WaitOutcome::Completed
                    } else {
                        WaitOutcome::TimedOut { in_flight }
                    };
                }
            }
        };
        self.record_wait(outcome)
    }

    /// Whether a waiter is registered (for tests).
    #[cfg(all(test, feature = "tokio"))]
    fn has_waiters(&self) -> bool {
        self.inner.word.load(Ordering::Acquire) & WAITERS != 0
    }

    #[cold]
    fn wake_waiters(&self) {
        // Taking the lock orders this wake after a blocking waiter's check.
        let _waiters = self.inner.waiters.lock();
        self.inner.idle.notify_all();
        #[cfg(feature = "tokio")]
        self.inner.notify.notify_waiters();
    }

    /// Test-only: puts the gate back to `Serving` with no drain time and no
    /// last wait. Not compiled into a normal build; production code has no
    /// undrain. Guards still alive stay counted.
    #[cfg(any(test, feature = "test-util"))]
    pub fn reset_for_tests(&self) {
        let mut info = self.inner.drain.lock();
        info.started_at = None;
        self.inner.word.fetch_and(!DRAINING, Ordering::AcqRel);
        self.inner.last_wait.store(0, Ordering::Release);
        self.inner
            .admitted_while_draining
            .store(0, Ordering::Relaxed);
        self.inner
            .refused_while_draining
            .store(0, Ordering::Relaxed);
    }
}

/// Work in flight, borrowing the gate. Dropping it ends the work.
#[must_use = "work is counted in flight only while the guard lives"]
pub struct Guard<'a> {
    gate: &'a Gate,
    admitted_while_draining: bool,
}

/// Work in flight, owning a handle to the gate (`'static`: move it into a
/// spawned task). Dropping it ends the work.
#[must_use = "work is counted in flight only while the guard lives"]
pub struct OwnedGuard {
    gate: Gate,
    admitted_while_draining: bool,
}

impl<'a> Guard<'a> {
    /// Turns this guard into an [`OwnedGuard`]; the work stays counted.
    pub fn into_owned(self) -> OwnedGuard {
        let owned = OwnedGuard {
            gate: self.gate.clone(),
            admitted_while_draining: self.admitted_while_draining,
        };
        // The count moves to the owned guard: do not release it here.
        std::mem::forget(self);
        owned
    }

    /// The gate this guard belongs to.
    pub fn gate(&self) -> &'a Gate {
        self.gate
    }
}

impl OwnedGuard {
    /// The gate this guard belongs to.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Another guard for work this admitted request hands to a task of its
    /// own (a call that must finish even if the client hangs up): counted
    /// in flight until dropped, so the drain waits for it too. Never
    /// refused: the request it extends was admitted.
    pub fn extend(&self) -> OwnedGuard {
        Admitted::of(self).hold()
    }
}

/// The admission of the request being served, which the HTTP layers
/// (features `tower` and `actix`) put in the request's extensions: a
/// handler that hands work to a task of its own takes a guard for it with
/// [`hold`](Self::hold), so the drain waits for that work as well.
#[derive(Debug, Clone)]
pub struct Admitted {
    gate: Gate,
    admitted_while_draining: bool,
}

impl Admitted {
    pub(crate) fn of(guard: &OwnedGuard) -> Self {
        Self {
            gate: guard.gate.clone(),
            admitted_while_draining: guard.admitted_while_draining,
        }
    }

    /// A guard for work that outlives the request (see
    /// [`OwnedGuard::extend`]).
    pub fn hold(&self) -> OwnedGuard {
        self.gate.inner.word.fetch_add(1, Ordering::AcqRel);
        OwnedGuard {
            gate: self.gate.clone(),
            admitted_while_draining: self.admitted_while_draining,
        }
    }
}

/// What both guards share: the lame-duck question, `Debug`, and the
/// release on drop.
macro_rules! guard_common {
    ($ty:ty, $name:literal) => {
        impl $ty {
            /// Whether the gate was already draining when this work was
            /// admitted.
            pub fn admitted_while_draining(&self) -> bool {
                self.admitted_while_draining
            }

            /// Whether the response should carry `Connection: close`: the
            /// gate is draining now (one atomic load), so a keep-alive
            /// client should reconnect elsewhere.
            ///
            /// That header is HTTP/1.1's. HTTP/2 forbids it (hyper drops
            /// it from an HTTP/2 response): there, the server moves its
            /// clients by sending each connection a GOAWAY frame when the
            /// drain begins (hyper's `graceful_shutdown` on the
            /// connection), which lets the requests already on it finish.
            #[inline]
            pub fn should_close_connection(&self) -> bool {
                !self.gate.is_serving()
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct($name)
                    .field("admitted_while_draining", &self.admitted_while_draining)
                    .finish()
            }
        }

        impl Drop for $ty {
            #[inline]
            fn drop(&mut self) {
                self.gate.release();
            }
        }
    };
}

guard_common!(Guard<'_>, "Guard");
guard_common!(OwnedGuard, "OwnedGuard");

/// Waits for SIGTERM (Unix) or Ctrl-C, then begins the drain.
///
/// Call it at startup, before the server accepts work, and spawn the
/// future: it resolves with the drain answer. On Unix, called inside a
/// Tokio runtime, it listens from the call on (see [`next_signal`]), so a
/// SIGTERM that comes before the spawned task first runs drains the gate
/// instead of killing the process.
/// If no signal handler can be installed, it drains right away and says so
/// through the `Err` (failing open would leave a pod that never drains).
///
/// Tokio keeps its signal handlers installed for the rest of the process, so
/// once this has been called a second SIGTERM or Ctrl-C no longer stops the
/// process by itself: race the bounded in-flight wait against
/// [`next_signal`] to let a second signal cut it short.
///
/// # Errors
///
/// The OS error if no signal handler could be installed; the gate has
/// drained by then.
#[cfg(feature = "tokio")]
pub fn drain_on_signal(
    gate: Gate,
) -> impl Future<Output = Result<BeginDrain, std::io::Error>> + Send + 'static {
    let heard = next_signal();
    async move {
        // Drains on a signal, and at once if none can be heard.
        let heard = heard.await;
        let begun = gate.begin_drain();
        heard.map(|()| begun)
    }
}

/// Waits for the next SIGTERM (Unix) or Ctrl-C (SIGINT).
///
/// On Unix, called inside a Tokio runtime, it listens from the call on,
/// not from the first poll: a service that calls it before it starts
/// serving, then spawns it, is not killed by a SIGTERM that arrives before
/// the spawned task first runs. Called outside a runtime (or on other
/// systems), it listens from the first poll on.
///
/// For a second signal during the drain: after [`drain_on_signal`] the
/// process ignores further signals unless someone listens for them, so a
/// developer pressing Ctrl-C twice, or an operator sending SIGTERM again,
/// would still wait out the whole in-flight timeout. (The kubelet sends one
/// SIGTERM, then SIGKILL after the grace period.)
///
/// ```no_run
/// # async fn run(gate: ate_readiness::Gate) {
/// use std::time::Duration;
///
/// let _ = ate_readiness::drain_on_signal(gate.clone()).await;
/// tokio::select! {
///     outcome = gate.wait_idle_async(Duration::from_secs(20)) => {
///         println!("in-flight wait: {outcome:?}");
///     }
///     _ = ate_readiness::next_signal() => {
///         eprintln!("second signal: exiting without waiting for in-flight work");
///         std::process::exit(1);
///     }
/// }
/// # }
/// ```
///
/// # Errors
///
/// The OS error if no handler could be installed.
#[cfg(feature = "tokio")]
pub fn next_signal() -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        fn listen() -> Result<(Signal, Signal), std::io::Error> {
            Ok((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ))
        }
        // Installing a handler needs a runtime; outside one (a future made
        // before `block_on`), it waits for the first poll.
        let now = tokio::runtime::Handle::try_current().ok().map(|_| listen());
        async move {
            let (mut term, mut int) = now.unwrap_or_else(listen)?;
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            Ok(())
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c()
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_async_wait_leaves_no_waiter_registered() {
        let gate = Gate::new();
        let guard = gate.admit().unwrap();
        let _ = gate.begin_drain();
        // A wait that is pending is registered (so the last guard wakes it).
        let pending = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait_idle_async(Duration::MAX).await }
        });
        tokio::task::yield_now().await;
        assert!(gate.has_waiters(), "a pending wait is not registered");
        pending.abort();
        let _ = pending.await;
        assert!(!gate.has_waiters(), "an aborted wait is still registered");
        // Cancelled mid-wait, as a second signal's `select!` branch does.
        let cancelled =
            tokio::time::timeout(Duration::from_secs(1), gate.wait_idle_async(Duration::MAX)).await;
        assert!(cancelled.is_err(), "the wait ended: {cancelled:?}");
        assert!(
            !gate.has_waiters(),
            "the cancelled wait is still registered"
        );
        // A finished wait unregisters too.
        drop(guard);
        assert_eq!(
            gate.wait_idle_async(Duration::from_secs(1)).await,
            WaitOutcome::Completed
        );
        assert!(!gate.has_waiters());
    }
}
