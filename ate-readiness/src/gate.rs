//! The gate. Its drain begins once and never ends (every later
//! `begin_drain` is a no-op), and a wait for idle that starts after the
//! drain sees every guard admitted before it.
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

use crate::CLOSE_GOING_AWAY;
use crate::clock::Clock;
use crate::error::Error;

mod answers;
mod builder;
mod guard;
#[cfg(feature = "tokio")]
mod signal;
pub use answers::{AdmissionPolicy, BeginDrain, SessionAdmission, Snapshot, State, WaitOutcome};
pub use builder::GateBuilder;
pub use guard::{Admitted, Guard, OwnedGuard};
#[cfg(feature = "tokio")]
pub use signal::{drain_on_signal, next_signal};

const DRAINING: u64 = 1 << 63;

const WAITERS: u64 = 1 << 62;

const STARTING: u64 = 1 << 61;

const COUNT_MASK: u64 = STARTING - 1;

type Callback = Box<dyn FnOnce() + Send + 'static>;

struct DrainInfo {
    started_at: Option<DateTime<Utc>>,
    /// The clock's monotonic time when the drain began: the ready grace
    /// is measured from it.
    started_mono: std::time::Duration,
    /// Whether the gate was serving (marked ready) when the drain began:
    /// only such a gate keeps `/ready` at 200 for the grace.
    was_serving: bool,
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
    /// The secret the drain endpoint asks for; none: it refuses all.
    drain_token: Option<crate::DrainToken>,
    /// Capabilities whose required ones `/ready` also needs.
    capabilities: Option<crate::Capabilities>,
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

    /// The secret the drain endpoint asks of its callers
    /// ([`GateBuilder::drain_token`]), if one was set.
    #[must_use]
    pub fn drain_token(&self) -> Option<&crate::DrainToken> {
        self.inner.drain_token.as_ref()
    }

    /// Liveness: 200 while the process is alive, whatever the state.
    pub fn liveness_status(&self) -> u16 {
        200
    }

    /// Readiness: 200 while serving, 503 while starting or draining (but
    /// for the first [`ready_while_draining`](GateBuilder::ready_while_draining)
    /// of a drain, if set), and 503 while a capability declared required
    /// ([`GateBuilder::capabilities`]) is not ready.
    #[inline]
    pub fn readiness_status(&self) -> u16 {
        if (self.is_serving() || self.in_ready_grace()) && self.required_ready() {
            200
        } else {
            503
        }
    }

    /// The capabilities beside the gate, if any.
    #[must_use]
    pub fn capabilities(&self) -> Option<&crate::Capabilities> {
        self.inner.capabilities.as_ref()
    }

    #[inline]
    fn required_ready(&self) -> bool {
        self.inner
            .capabilities
            .as_ref()
            .is_none_or(crate::Capabilities::required_ready)
    }

    /// Whether a drain of a gate that was serving began less than the
    /// ready grace ago, on the clock's monotonic time: a gate never marked
    /// ready never becomes ready by being told to stop, and a wall clock
    /// stepped back never brings the grace back.
    fn in_ready_grace(&self) -> bool {
        let grace = self.inner.ready_while_draining;
        if grace.is_zero() || !self.is_draining() {
            return false;
        }
        let info = self.inner.drain.lock();
        if info.started_at.is_none() || !info.was_serving {
            return false;
        }
        let started = info.started_mono;
        drop(info);
        self.inner.clock.monotonic().saturating_sub(started) < grace
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
        info.started_mono = self.inner.clock.monotonic();
        let before = self.inner.word.fetch_or(DRAINING, Ordering::AcqRel);
        info.was_serving = before & STARTING == 0;
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
        // During the ready grace `/ready` still invites work: refusing it
        // would answer "ready" and 503 at once.
        if let AdmissionPolicy::Strict { retry_after_secs } = self.inner.policy
            && !self.in_ready_grace()
        {
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

    /// Admits a long-lived session (a WebSocket). While serving, and
    /// during the ready grace ([`GateBuilder::ready_while_draining`], when
    /// `/ready` still invites work), it is counted like
    /// [`admit`](Self::admit); once draining otherwise the caller must
    /// accept the upgrade and close with 1001, whatever the policy.
    pub fn admit_session(&self) -> SessionAdmission {
        let before = self.inner.word.fetch_add(1, Ordering::AcqRel);
        let guard = Guard {
            gate: self,
            admitted_while_draining: before & DRAINING != 0,
        };
        if guard.admitted_while_draining && !self.in_ready_grace() {
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
