//! The limiters: one window ([`Limiter`]), one window per key
//! ([`KeyedLimiter`]), and several named keyed limits checked together
//! ([`LimitSet`]).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::Error;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::{Combined, Decision};
use crate::lock::Lock;
use crate::ring::{MAX_HELD, Record, Step, Timeline};
use crate::window::{Geometry, Window};

/// N attempts per trailing window W.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU32,
    window: Duration,
}

impl Quota {
    /// The default window: 60 seconds.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

    /// `limit` attempts per minute.
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self {
            limit,
            window: Self::DEFAULT_WINDOW,
        }
    }

    /// The longest window a quota may have: 2^31 - 1 seconds, about 68
    /// years. Keyed limiters keep a window in `u32` offsets of 1 s ticks at
    /// that length, and a shortened window would make the limit looser;
    /// [`Quota::new`] refuses a longer one instead.
    pub const MAX_WINDOW: Duration = Duration::from_secs((1 << 31) - 1);

    /// `limit` attempts per trailing `window`. A zero window is taken as the
    /// smallest the limiter can represent (1 ns for [`Limiter`], one 1 µs
    /// tick for keyed limiters).
    ///
    /// # Errors
    ///
    /// [`Error::WindowTooLong`](crate::Error::WindowTooLong) for a window
    /// longer than [`MAX_WINDOW`](Self::MAX_WINDOW).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use ate_ratelimit::{Error, Quota};
    ///
    /// let ten = NonZeroU32::new(10).unwrap();
    /// let quota = Quota::new(ten, Duration::from_secs(3600))?;
    /// assert_eq!(quota.window(), Duration::from_secs(3600));
    /// assert!(matches!(
    ///     Quota::new(ten, Quota::MAX_WINDOW + Duration::from_secs(1)),
    ///     Err(Error::WindowTooLong { .. })
    /// ));
    /// # Ok::<(), Error>(())
    /// ```
    pub const fn new(limit: NonZeroU32, window: Duration) -> Result<Self, crate::Error> {
        if window.as_secs() > Self::MAX_WINDOW.as_secs()
            || (window.as_secs() == Self::MAX_WINDOW.as_secs() && window.subsec_nanos() > 0)
        {
            return Err(crate::Error::WindowTooLong {
                window,
                max: Self::MAX_WINDOW,
            });
        }
        Ok(Self { limit, window })
    }

    /// The attempts allowed per window.
    pub const fn limit(&self) -> NonZeroU32 {
        self.limit
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        self.window
    }
}

/// What is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Policy {
    /// Every attempt, allowed or DENIED, is recorded and counts. A caller
    /// that keeps arriving above the limit stays throttled for as long as it
    /// keeps arriving; once it slows below the limit, it is allowed again
    /// within one window. The default.
    #[default]
    CountDenied,
    /// Only allowed attempts are recorded (a classic sliding log): a caller
    /// hammering above the limit still gets N per window through.
    AllowedOnly,
}

/// What a check does with the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Record per the policy.
    Policy,
    /// Record only if allowed (waiting loops).
    OnlyIfAllowed,
    /// Record nothing.
    Peek,
    /// Record whatever the decision (an audit-trail record).
    Record,
}

impl Mode {
    /// Which verdicts record the attempt under `policy`.
    #[inline]
    fn record(self, policy: Policy) -> Record {
        match self {
            Self::Policy => Record {
                allowed: true,
                denied: policy == Policy::CountDenied,
            },
            Self::OnlyIfAllowed => Record {
                allowed: true,
                denied: false,
            },
            Self::Peek => Record::NONE,
            Self::Record => Record::ALL,
        }
    }
}

/// Repeats `attempt` (which records only an allowed attempt), sleeping
/// with tokio time for each denial's exact `retry_after`, until it is
/// allowed.
#[cfg(feature = "tokio")]
async fn retry_until_allowed(mut attempt: impl FnMut() -> Decision) -> Decision {
    loop {
        let decision = attempt();
        match decision.retry_after() {
            None => return decision,
            Some(wait) => tokio::time::sleep(wait.max(Duration::from_micros(1))).await,
        }
    }
}

/// One check of a key's window, whose shard lock the caller holds.
#[inline]
fn decide_in(g: &Geometry, policy: Policy, mode: Mode, w: &mut Window, now: Timestamp) -> Decision {
    let (now_tick, at_tick) = g.ticks(now.as_nanos());
    let step = w.step(g, now_tick, at_tick, mode.record(policy));
    decision(g.limit, step, g.window, g.tick_nanos, now)
}

/// One check of `cost` attempts at once in a key's window (a weighted
/// check: kept off the single attempt's path).
#[cold]
#[inline(never)]
fn decide_n_in(
    g: &Geometry,
    policy: Policy,
    mode: Mode,
    w: &mut Window,
    now: Timestamp,
    cost: u32,
) -> Decision {
    let (now_tick, at_tick) = g.ticks(now.as_nanos());
    let step = w.step_n(g, now_tick, at_tick, cost, mode.record(policy));
    decision_n(g.limit, step, g.window, g.tick_nanos, now, cost)
}

/// The decision for a window's step, whose front and `window` are in units
/// of `unit` nanoseconds (ticks, or 1 for the single window).
#[inline]
fn decision(limit: u32, step: Step<u64>, window: u64, unit: u64, now: Timestamp) -> Decision {
    if step.allowed {
        Decision::Allowed {
            remaining: limit - step.count - u32::from(step.recorded),
        }
    } else {
        denial(step, window, unit, now)
    }
}

/// [`decision`] for a step of `cost` attempts.
fn decision_n(
    limit: u32,
    step: Step<u64>,
    window: u64,
    unit: u64,
    now: Timestamp,
    cost: u32,
) -> Decision {
    if step.allowed {
        Decision::Allowed {
            remaining: limit - step.count - if step.recorded { cost } else { 0 },
        }
    } else {
        denial(step, window, unit, now)
    }
}

/// A denial: the window holds more than N - cost, so it has a front;
/// allowed again once that attempt leaves.
#[inline]
fn denial(step: Step<u64>, window: u64, unit: u64, now: Timestamp) -> Decision {
    let at = step
        .front
        .map_or(0, |front| front.saturating_add(window))
        .saturating_mul(unit);
    Decision::Denied {
        retry_after: Duration::from_nanos(at.saturating_sub(now.as_nanos())),
    }
}

/// One trailing window, for a limit with no key (a whole process, one
/// upstream).
///
/// Times are exact to the nanosecond. The window keeps the attempts inside
/// it (at most N) as `u64` nanoseconds in a ring that grows with them and
/// shrinks (to at most four times what it holds) once it has stayed at
/// most a quarter used for a whole window, so a window that drains and
/// refills keeps its storage; a check holds a short lock around that ring. A window holds
/// at most 2^31 attempts (16 GiB of times): a larger limit acts as 2^31.
/// `Send + Sync`.
pub struct Limiter<C: Clock = MonotonicClock> {
    quota: Quota,
    policy: Policy,
    clock: C,
    /// The window in nanoseconds (at least 1).
    window: u64,
    timeline: Lock<Timeline>,
}

impl<C: Clock> fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("quota", &self.quota)
            .field("policy", &self.policy)
            .field("in_window", &self.timeline.lock().len())
            .finish()
    }
}

impl Limiter<MonotonicClock> {
    /// A limiter with the default policy and the monotonic clock.
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> Limiter<C> {
    /// A limiter reading time from `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Self::with_policy(quota, Policy::default(), clock)
    }

    /// A limiter with an explicit policy.
    pub fn with_policy(quota: Quota, policy: Policy, clock: C) -> Self {
        Self {
            quota,
            policy,
            clock,
            window: u64::try_from(quota.window.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            timeline: Lock::new(Timeline::new(quota.limit.get())),
        }
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Checks (and records, per the policy) an attempt now.
    #[inline]
    pub fn check(&self) -> Decision {
        self.run(None, Mode::Policy)
    }

    /// Checks (and records, per the policy) an attempt at `now`, a time
    /// read from the same clock by the caller. Earlier times than already
    /// recorded are taken as the latest recorded time.
    #[inline]
    pub fn check_at(&self, now: Timestamp) -> Decision {
        self.run(Some(now), Mode::Policy)
    }

    /// Checks `cost` attempts at once, now: allowed iff all of them fit in
    /// the window, and then all are recorded; denied, they are recorded as
    /// the policy says for a denial (all `cost` of them under
    /// [`Policy::CountDenied`]). A denial's `retry_after` is when the same
    /// cost would fit, if nothing else is recorded. For a request that
    /// weighs more than one attempt (a batch, a heavy route).
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`] when `cost` exceeds the quota's limit: such
    /// a check could never be allowed.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use ate_ratelimit::{Limiter, Quota, clock::ManualClock};
    ///
    /// let quota = Quota::new(NonZeroU32::new(10).unwrap(), Duration::from_secs(60))?;
    /// let l = Limiter::with_clock(quota, ManualClock::default());
    /// let four = NonZeroU32::new(4).unwrap();
    /// assert_eq!(l.check_n(four)?.remaining(), 6);
    /// assert_eq!(l.check_n(four)?.remaining(), 2);
    /// assert!(!l.check_n(four)?.is_allowed()); // 2 left, 4 asked
    /// assert!(l.check_n(NonZeroU32::new(11).unwrap()).is_err());
    /// # Ok::<(), ate_ratelimit::Error>(())
    /// ```
    pub fn check_n(&self, cost: NonZeroU32) -> Result<Decision, Error> {
        self.fits(cost)?;
        Ok(self.run_n(None, Mode::Policy, cost.get()))
    }

    /// [`check_n`](Self::check_n) at `now`, a time read from the same clock
    /// by the caller.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`] when `cost` exceeds the quota's limit.
    pub fn check_n_at(&self, cost: NonZeroU32, now: Timestamp) -> Result<Decision, Error> {
        self.fits(cost)?;
        Ok(self.run_n(Some(now), Mode::Policy, cost.get()))
    }

    fn fits(&self, cost: NonZeroU32) -> Result<(), Error> {
        let limit = self.quota.limit.get().min(MAX_HELD);
        if cost.get() > limit {
            return Err(Error::CostOverLimit {
                name: String::new(),
                cost: cost.get(),
                limit,
            });
        }
        Ok(())
    }

    /// What an attempt now would get, without recording it.
    pub fn peek(&self) -> Decision {
        self.run(None, Mode::Peek)
    }

    /// What an attempt at `now` would get, without recording it.
    pub fn peek_at(&self, now: Timestamp) -> Decision {
        self.run(Some(now), Mode::Peek)
    }

    /// Records an attempt only if it is allowed at `now`.
    pub fn try_acquire_at(&self, now: Timestamp) -> Decision {
        self.run(Some(now), Mode::OnlyIfAllowed)
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Seeds the window from an audit trail of attempt times, so a restart
    /// does not hand the next callers a fresh burst. Records are sorted by
    /// time first; each counts as an attempt whatever the policy, and only
    /// the last N are kept. Seed before serving: a record earlier than an
    /// attempt already recorded is taken as that attempt's time. An audit
    /// trail keeps wall-clock times; [`Clock::at_wall_time`] places them on
    /// the limiter's timeline.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use ate_ratelimit::{Limiter, Quota, clock::{ManualClock, Timestamp}};
    ///
    /// let quota = Quota::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(60)).unwrap();
    /// let l = Limiter::with_clock(quota, ManualClock::new(Timestamp::from_secs(100)));
    /// l.seed([Timestamp::from_secs(90), Timestamp::from_secs(70)]);
    /// // Both still count at t = 100 s; the one at 70 s leaves at 130 s.
    /// assert_eq!(l.peek().retry_after(), Some(Duration::from_secs(30)));
    /// // A denied check counts too (the default policy): it replaces the
    /// // attempt at 70 s, so the next slot opens when 90 s leaves, at 150 s.
    /// assert_eq!(l.check().retry_after(), Some(Duration::from_secs(50)));
    /// ```
    pub fn seed(&self, times: impl IntoIterator<Item = Timestamp>) {
        let mut times: Vec<Timestamp> = times.into_iter().collect();
        times.sort_unstable();
        for at in times {
            let _ = self.run(Some(at), Mode::Record);
        }
    }

    /// Waits until an attempt is allowed, then records that one attempt.
    ///
    /// While it sleeps nothing is recorded (the wait itself is not an
    /// attempt), so waiting never extends the throttling, and a wait given
    /// up (the future dropped, by `tokio::time::timeout` or a client
    /// hanging up) leaves the window as it found it. Sleeps with tokio
    /// time for the exact `retry_after` of each denial, so the limiter's
    /// clock must move with tokio time: [`MonotonicClock`] in a service,
    /// [`TokioClock`](crate::clock::TokioClock) in a test with paused time. With a
    /// [`ManualClock`](crate::clock::ManualClock) nothing advances the clock during
    /// the sleep, and the wait never ends.
    #[cfg(feature = "tokio")]
    pub async fn until_allowed(&self) -> Decision {
        retry_until_allowed(|| self.run(None, Mode::OnlyIfAllowed)).await
    }

    /// One check. With `now: None` the clock is read under the lock:
    /// attempts are then timestamped in the order they take it, and under
    /// contention the holder keeps the lock's cache line for the whole
    /// check, instead of losing it while it reads the clock.
    #[inline(always)]
    fn run(&self, now: Option<Timestamp>, mode: Mode) -> Decision {
        let limit = self.quota.limit.get().min(MAX_HELD);
        let record = mode.record(self.policy);
        let mut timeline = self.timeline.lock();
        let now = now.unwrap_or_else(|| self.clock.now());
        let step = timeline.step(limit, self.window, now.as_nanos(), record);
        drop(timeline);
        // The timeline's front is when its attempt leaves the window.
        decision(limit, step, 0, 1, now)
    }

    /// One check of `cost` attempts (at most the limit).
    fn run_n(&self, now: Option<Timestamp>, mode: Mode, cost: u32) -> Decision {
        let limit = self.quota.limit.get().min(MAX_HELD);
        let record = mode.record(self.policy);
        let mut timeline = self.timeline.lock();
        let now = now.unwrap_or_else(|| self.clock.now());
        let step = timeline.step_n(limit, self.window, now.as_nanos(), cost, record);
        drop(timeline);
        decision_n(limit, step, 0, 1, now, cost)
    }
}

struct Shard<K> {
    table: HashTable<(K, Window)>,
}

/// The cap on a keyed limiter's keys ([`KeyedBuilder::max_keys`]): one
/// count over every shard, so the table is refused a new key exactly when
/// it holds `max` keys none of which has drained. Only adding and evicting
/// keys touch it; a check of a key already held does not.
#[derive(Debug)]
struct Cap {
    max: usize,
    /// Keys in the table, plus slots taken for keys about to be added.
    keys: AtomicUsize,
    /// No key in the table drains before this tick. A lower bound: adding
    /// a key lowers it at once (a key seeded or checked at an older time
    /// drains sooner than those held), and only a sweep raises it.
    full_until: AtomicU64,
    /// Held by a sweep, and by a refusal while it reads `full_until`.
    /// Taken with no shard lock held, so a sweep can lock every shard.
    sweep: Mutex<()>,
}

impl Cap {
    fn new(max: usize) -> Self {
        Self {
            max,
            keys: AtomicUsize::new(0),
            full_until: AtomicU64::new(u64::MAX),
            sweep: Mutex::new(()),
        }
    }

    /// Takes a slot for a new key; `false` when the table is at its cap.
    fn reserve(&self) -> bool {
        self.keys
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
                (k < self.max).then_some(k + 1)
            })
            .is_ok()
    }

    /// Gives back `n` slots (keys evicted, or slots taken and not used).
    fn release(&self, n: usize) {
        self.keys.fetch_sub(n, Ordering::AcqRel);
    }

    fn is_full(&self) -> bool {
        self.keys.load(Ordering::Acquire) >= self.max
    }
}

/// A new key found its table at the cap, at this time: the caller releases
/// its shard locks and calls [`KeyedLimiter::make_room`].
#[derive(Debug, Clone, Copy)]
struct NoRoom(Timestamp);

/// Whether a new key still needs a slot under the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Take one (a single limiter's check).
    Take,
    /// Taken already (a combined check takes every limit's slot before it
    /// records anything, and gives back what it did not use).
    Taken,
}

/// What [`KeyedLimiter::seed`] restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use = "records a full key table refused are lost: look at `refused`"]
pub struct Seeded {
    restored: usize,
    refused: usize,
}

impl Seeded {
    /// Records restored into a window.
    pub fn restored(&self) -> usize {
        self.restored
    }

    /// Records not restored because the table was at its key cap
    /// ([`KeyedBuilder::max_keys`]) and none of its keys had drained at the
    /// record's time.
    pub fn refused(&self) -> usize {
        self.refused
    }

    /// Whether every record was restored.
    pub fn is_complete(&self) -> bool {
        self.refused == 0
    }
}

/// Builds a [`KeyedLimiter`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedBuilder {
    quota: Quota,
    policy: Policy,
    max_keys: Option<usize>,
    shards: Option<usize>,
}

impl KeyedBuilder {
    /// The most lock shards a keyed limiter has: 65,536, far more than
    /// threads contend for a table, and an empty shard costs its lock and
    /// table header (about 48 bytes).
    pub const MAX_SHARDS: usize = 1 << 16;

    /// Sets the policy (default [`Policy::CountDenied`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Bounds the number of keys in the whole table. When it holds
    /// `max_keys` keys, a new key first evicts every key whose window has
    /// drained (in any shard); if none has, the new key gets
    /// [`Decision::KeyTableFull`] instead of growing the table, with the
    /// earliest time a key may drain as its `retry_after`. Checks of keys
    /// already held cost the same with or without a bound; adding a key
    /// updates one shared count.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys.max(1));
        self
    }

    /// Sets the number of lock shards (rounded up to a power of two, at
    /// most [`MAX_SHARDS`](Self::MAX_SHARDS)). Default: 4 x the available
    /// parallelism, at least 16.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards.max(1));
        self
    }

    /// Builds with the monotonic clock.
    pub fn build<K: Hash + Eq + Clone>(self) -> KeyedLimiter<K> {
        self.build_with_clock(MonotonicClock::new())
    }

    /// Builds with `clock`.
    pub fn build_with_clock<K: Hash + Eq + Clone, C: Clock>(self, clock: C) -> KeyedLimiter<K, C> {
        self.build_with_hasher(clock, DefaultHashBuilder::default())
    }

    fn build_with_hasher<K: Hash + Eq + Clone, C: Clock>(
        self,
        clock: C,
        hasher: DefaultHashBuilder,
    ) -> KeyedLimiter<K, C> {
        let shards = self
            .shards
            .unwrap_or_else(|| {
                4 * std::thread::available_parallelism().map_or(4, std::num::NonZero::get)
            })
            .clamp(
                if self.shards.is_some() { 1 } else { 16 },
                KeyedBuilder::MAX_SHARDS,
            )
            .next_power_of_two();
        KeyedLimiter {
            geometry: Geometry::new(self.quota.limit.get(), self.quota.window),
            quota: self.quota,
            policy: self.policy,
            clock,
            hasher,
            cap: self.max_keys.map(Cap::new),
            mask: shards - 1,
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        table: HashTable::new(),
                    })
                })
                .collect(),
        }
    }
}

/// A trailing window per key, for any `K: Hash + Eq + Clone`.
///
/// Concurrent: keys are spread over lock shards; a key is hashed once, and
/// that hash picks both the shard and the slot. `Send + Sync`.
pub struct KeyedLimiter<K, C: Clock = MonotonicClock> {
    geometry: Geometry,
    quota: Quota,
    policy: Policy,
    clock: C,
    hasher: DefaultHashBuilder,
    cap: Option<Cap>,
    mask: usize,
    shards: Box<[Mutex<Shard<K>>]>,
}

impl<K, C: Clock> fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota)
            .field("policy", &self.policy)
            .field("shards", &self.shards.len())
            .field("max_keys", &self.cap.as_ref().map(|c| c.max))
            .finish_non_exhaustive()
    }
}

impl KeyedLimiter<(), MonotonicClock> {
    /// A builder for a keyed limiter with `quota`.
    pub fn builder(quota: Quota) -> KeyedBuilder {
        KeyedBuilder {
            quota,
            policy: Policy::default(),
            max_keys: None,
            shards: None,
        }
    }
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K, MonotonicClock> {
    /// A keyed limiter with the default policy and the monotonic clock.
    pub fn new(quota: Quota) -> Self {
        KeyedLimiter::builder(quota).build()
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// A keyed limiter with the default policy reading `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        KeyedLimiter::builder(quota).build_with_clock(clock)
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Mutex<Shard<K>> {
        // hashbrown uses the low bits for the slot and the top 7 for its
        // tag; the shard comes from bits in between.
        &self.shards[(hash >> 32) as usize & self.mask]
    }

    /// Checks (and records, per the policy) an attempt by `key` now.
    ///
    /// `key` is anything `K` borrows as (as with `HashMap::get`): a
    /// `KeyedLimiter<String>` takes a `&str`, and only a key not yet in the
    /// table is copied into an owned `K`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use ate_ratelimit::{KeyedLimiter, Quota};
    ///
    /// let limiter: KeyedLimiter<String> =
    ///     KeyedLimiter::new(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let caller: &str = "tenant-a"; // say, from a request header
    /// assert!(limiter.check(caller).is_allowed());
    /// assert!(!limiter.check(&"tenant-a".to_owned()).is_allowed());
    /// ```
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, None, Mode::Policy, 1)
    }

    /// Checks (and records) an attempt by `key` at `now`, a time read from
    /// the same clock by the caller. A time earlier than the key's newest
    /// recorded attempt is taken as that attempt's time.
    #[inline]
    pub fn check_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, Some(now), Mode::Policy, 1)
    }

    /// What an attempt by `key` now would get, without recording it (a key
    /// not yet seen is not added).
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, None, Mode::Peek, 1)
    }

    /// [`peek`](Self::peek) at an explicit time.
    pub fn peek_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, Some(now), Mode::Peek, 1)
    }

    /// Records the attempt only if allowed (used by waiting loops).
    pub fn try_acquire_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, Some(now), Mode::OnlyIfAllowed, 1)
    }

    /// Checks `cost` attempts by `key` at once, now: allowed iff all of
    /// them fit in the key's window, and then all are recorded; denied,
    /// they are recorded as the policy says for a denial (all `cost` of
    /// them under [`Policy::CountDenied`]). A denial's `retry_after` is when
    /// the same cost would fit, if nothing else is recorded.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`] when `cost` exceeds the quota's limit: such
    /// a check could never be allowed.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use ate_ratelimit::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::new(Quota::per_minute(NonZeroU32::new(10).unwrap()));
    /// let export = NonZeroU32::new(4).unwrap(); // a route that weighs 4
    /// assert_eq!(limiter.check_n(&"alice", export)?.remaining(), 6);
    /// assert_eq!(limiter.check(&"alice").remaining(), 5);
    /// # Ok::<(), ate_ratelimit::Error>(())
    /// ```
    pub fn check_n<Q>(&self, key: &Q, cost: NonZeroU32) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.fits(cost, "")?;
        Ok(self.run(key, None, Mode::Policy, cost.get()))
    }

    /// [`check_n`](Self::check_n) at `now`, a time read from the same clock
    /// by the caller.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`] when `cost` exceeds the quota's limit.
    pub fn check_n_at<Q>(
        &self,
        key: &Q,
        cost: NonZeroU32,
        now: Timestamp,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.fits(cost, "")?;
        Ok(self.run(key, Some(now), Mode::Policy, cost.get()))
    }

    fn fits(&self, cost: NonZeroU32, name: &str) -> Result<(), Error> {
        if cost > self.quota.limit {
            return Err(Error::CostOverLimit {
                name: name.to_owned(),
                cost: cost.get(),
                limit: self.quota.limit.get(),
            });
        }
        Ok(())
    }

    /// One check of `cost` attempts by `key`. With `now: None` the clock is
    /// read once the key's window is found, under the shard lock: on a large
    /// table that lets the clock read overlap the lookup's cache misses
    /// instead of adding to them, and it timestamps a key's attempts in the
    /// order they take the lock.
    #[inline]
    fn run<Q>(&self, key: &Q, now: Option<Timestamp>, mode: Mode, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash).lock();
        if let Some((_, window)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            let now = now.unwrap_or_else(|| self.clock.now());
            if cost != 1 {
                return decide_n_in(&self.geometry, self.policy, mode, window, now, cost);
            }
            return decide_in(&self.geometry, self.policy, mode, window, now);
        }
        self.run_absent(shard, hash, key, now, mode, cost)
    }

    /// [`run`](Self::run) for a key not in the table, whose shard the
    /// caller locked.
    #[cold]
    #[inline(never)]
    fn run_absent<Q>(
        &self,
        mut shard: MutexGuard<'_, Shard<K>>,
        hash: u64,
        key: &Q,
        now: Option<Timestamp>,
        mode: Mode,
        cost: u32,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = now.unwrap_or_else(|| self.clock.now());
        match self.run_new_key(&mut shard, hash, key, now, mode, cost, Slot::Take) {
            Ok(decision) => decision,
            Err(NoRoom(now)) => {
                drop(shard);
                self.run_when_full(hash, key, now, mode, cost)
            }
        }
    }

    /// One check in a shard whose lock the caller holds. `Err` only for a
    /// new key under [`Slot::Take`] that found the table at its cap.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn run_in<Q>(
        &self,
        shard: &mut Shard<K>,
        hash: u64,
        key: &Q,
        now: Option<Timestamp>,
        mode: Mode,
        cost: u32,
        slot: Slot,
    ) -> Result<Decision, NoRoom>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let g = &self.geometry;
        if let Some((_, window)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            let now = now.unwrap_or_else(|| self.clock.now());
            if cost != 1 {
                return Ok(decide_n_in(g, self.policy, mode, window, now, cost));
            }
            return Ok(decide_in(g, self.policy, mode, window, now));
        }
        let now = now.unwrap_or_else(|| self.clock.now());
        self.run_new_key(shard, hash, key, now, mode, cost, slot)
    }

    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn run_new_key<Q>(
        &self,
        shard: &mut Shard<K>,
        hash: u64,
        key: &Q,
        now: Timestamp,
        mode: Mode,
        cost: u32,
        slot: Slot,
    ) -> Result<Decision, NoRoom>
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let g = &self.geometry;
        let mut window = Window::default();
        let decision = if cost == 1 {
            decide_in(g, self.policy, mode, &mut window, now)
        } else {
            decide_n_in(g, self.policy, mode, &mut window, now, cost)
        };
        let keep = window.len() > 0;
        if let Some(cap) = &self.cap {
            // A new key needs a slot even for a peek, which says what a
            // check would get: a full table's refusal.
            if slot == Slot::Take && !(if keep { cap.reserve() } else { !cap.is_full() }) {
                return Err(NoRoom(now));
            }
            if keep {
                cap.full_until
                    .fetch_min(window.drained_at(g), Ordering::AcqRel);
            }
        }
        if keep {
            let hasher = &self.hasher;
            shard
                .table
                .insert_unique(hash, (key.to_owned(), window), |(k, _)| hasher.hash_one(k));
        }
        Ok(decision)
    }

    /// How long after `now` the oldest attempt `key`'s window holds leaves
    /// (zero for a key not held), in a shard the caller locked.
    fn oldest_leaves_in<Q>(&self, shard: &Shard<K>, hash: u64, key: &Q, now: Timestamp) -> Duration
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let g = &self.geometry;
        shard
            .table
            .find(hash, |(k, _)| k.borrow() == key)
            .and_then(|(_, w)| w.oldest_leaves(g))
            .map_or(Duration::ZERO, |tick| {
                Duration::from_nanos(
                    tick.saturating_mul(g.tick_nanos)
                        .saturating_sub(now.as_nanos()),
                )
            })
    }

    /// A new key found the table at its cap (no shard lock held): makes
    /// room and checks again, until the check is done or refused.
    #[cold]
    #[inline(never)]
    fn run_when_full<Q>(
        &self,
        hash: u64,
        key: &Q,
        now: Timestamp,
        mode: Mode,
        cost: u32,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        loop {
            if let Some(refusal) = self.make_room(now) {
                return refusal;
            }
            // Room was made; another thread may take it first.
            let mut shard = self.shard(hash).lock();
            if let Ok(decision) =
                self.run_in(&mut shard, hash, key, Some(now), mode, cost, Slot::Take)
            {
                return decision;
            }
        }
    }

    /// With the table at its cap, and no shard lock held by the caller:
    /// evicts every key drained at `now`, in every shard, unless no key can
    /// have drained yet. `None` if there is room now; else the refusal,
    /// whose `retry_after` runs to the earliest time a key drains.
    fn make_room(&self, now: Timestamp) -> Option<Decision> {
        let cap = self.cap.as_ref()?;
        let _sweep = cap.sweep.lock();
        if !cap.is_full() {
            return None;
        }
        let g = &self.geometry;
        let (tick, _) = g.ticks(now.as_nanos());
        if tick >= cap.full_until.load(Ordering::Acquire) {
            // Keys added while the sweep runs lower the bound below this
            // mark; the sweep's own minimum is folded in at the end.
            cap.full_until.store(u64::MAX, Ordering::Release);
            let mut soonest = u64::MAX;
            for shard in self.shards.iter() {
                let mut shard = shard.lock();
                let before = shard.table.len();
                shard.table.retain(|(_, w)| !w.is_drained(g, tick));
                cap.release(before - shard.table.len());
                soonest = shard
                    .table
                    .iter()
                    .map(|(_, w)| w.drained_at(g))
                    .fold(soonest, u64::min);
            }
            cap.full_until.fetch_min(soonest, Ordering::AcqRel);
            if !cap.is_full() {
                return None;
            }
        }
        let at = cap
            .full_until
            .load(Ordering::Acquire)
            .saturating_mul(g.tick_nanos);
        Some(Decision::KeyTableFull {
            retry_after: Duration::from_nanos(at.saturating_sub(now.as_nanos())),
        })
    }

    /// Drops every key whose window has drained (its newest attempt is at
    /// least one window old). Decisions do not change: a drained key is
    /// indistinguishable from a new one.
    pub fn retain_recent(&self) {
        self.retain_recent_at(self.clock.now());
    }

    /// [`retain_recent`](Self::retain_recent) at an explicit time.
    pub fn retain_recent_at(&self, now: Timestamp) {
        let g = &self.geometry;
        let (tick, _) = g.ticks(now.as_nanos());
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.table.len();
            shard.table.retain(|(_, w)| !w.is_drained(g, tick));
            if let Some(cap) = &self.cap {
                cap.release(before - shard.table.len());
            }
            shard.table.shrink_to_fit(|(k, _)| self.hasher.hash_one(k));
        }
    }

    /// Keys in the table (drained keys count until evicted).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().table.len()).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate heap bytes held: table slots plus rings.
    pub fn heap_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock();
                s.table.capacity() * (std::mem::size_of::<(K, Window)>() + 1)
                    + s.table.iter().map(|(_, w)| w.heap_bytes()).sum::<usize>()
            })
            .sum()
    }

    /// Seeds windows from an audit trail of `(key, time)` records, so a
    /// restart does not hand every caller a fresh burst. Records are sorted
    /// by time first; each counts as an attempt whatever the policy, and
    /// only the last N per key are kept. With [`KeyedBuilder::max_keys`],
    /// the cap holds here too: a record of a new key that finds the table
    /// full of keys that have not drained at the record's time is not
    /// restored, and the result counts it. An audit trail keeps wall-clock
    /// times; [`Clock::at_wall_time`] places them on the limiter's timeline
    /// (see its example).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use ate_ratelimit::{KeyedLimiter, Quota, clock::{ManualClock, Timestamp}};
    ///
    /// let quota = Quota::per_minute(NonZeroU32::new(5).unwrap());
    /// let limiter = KeyedLimiter::builder(quota)
    ///     .max_keys(2)
    ///     .build_with_clock(ManualClock::new(Timestamp::from_secs(100)));
    /// let at = Timestamp::from_secs(90);
    /// let seeded = limiter.seed([("a", at), ("b", at), ("c", at), ("a", at)]);
    /// assert_eq!((seeded.restored(), seeded.refused()), (3, 1)); // "c": no room
    /// ```
    pub fn seed(&self, records: impl IntoIterator<Item = (K, Timestamp)>) -> Seeded {
        let mut records: Vec<_> = records.into_iter().collect();
        records.sort_by_key(|(_, t)| *t);
        let mut seeded = Seeded::default();
        for (key, at) in records {
            match self.run(&key, Some(at), Mode::Record, 1) {
                Decision::KeyTableFull { .. } => seeded.refused += 1,
                _ => seeded.restored += 1,
            }
        }
        seeded
    }

    /// Waits until `key` is allowed, then records that one attempt.
    ///
    /// While it sleeps nothing is recorded (the wait itself is not an
    /// attempt), so waiting never extends the throttling, and a wait given
    /// up (the future dropped, by `tokio::time::timeout` or a client
    /// hanging up) leaves the window as it found it. Sleeps with tokio
    /// time for the exact `retry_after` of each denial, so the limiter's
    /// clock must move with tokio time: [`MonotonicClock`] in a service,
    /// [`TokioClock`](crate::clock::TokioClock) in a test with paused time. With a
    /// [`ManualClock`](crate::clock::ManualClock) nothing advances the clock during
    /// the sleep, and the wait never ends.
    #[cfg(feature = "tokio")]
    pub async fn until_allowed<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        retry_until_allowed(|| self.run(key, None, Mode::OnlyIfAllowed, 1)).await
    }
}

/// Several named keyed limits over the same key type, checked together.
///
/// The combined decision denies if any limit denies and names the limits
/// that did. Under [`Policy::CountDenied`] the attempt is recorded in EVERY
/// limit it touched, allowed or not (it was an attempt against each), so a
/// caller blocked by one limit also uses up the others. Under
/// [`Policy::AllowedOnly`] the check is all-or-nothing: nothing is recorded
/// anywhere unless every limit allows. Each check holds the touched shards
/// together, so it is atomic with respect to other checks.
pub struct LimitSet<K, C: Clock + Clone = MonotonicClock> {
    /// Which set its [`LimitId`]s belong to.
    set: usize,
    clock: C,
    policy: Policy,
    limits: Vec<(String, KeyedLimiter<K, C>)>,
    hasher: DefaultHashBuilder,
}

impl<K, C: Clock + Clone> fmt::Debug for LimitSet<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitSet")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish()
    }
}

/// A limit in a [`LimitSet`], resolved once from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LimitId {
    set: usize,
    index: usize,
}

/// A combined check's decisions (in lock order), its wait, and each
/// limit's reset.
type Outcome = (SmallVec<[Decision; 4]>, Duration, SmallVec<[Duration; 4]>);

/// Numbers sets, so an id given to another set is caught.
static NEXT_SET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl<K: Hash + Eq + Clone, C: Clock + Clone> LimitSet<K, C> {
    /// An empty set.
    pub fn new(policy: Policy, clock: C) -> Self {
        Self {
            set: NEXT_SET.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            clock,
            policy,
            limits: Vec::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Adds a named limit; returns its id. A name added twice replaces the
    /// quota of the first.
    pub fn add(&mut self, name: impl Into<String>, quota: Quota) -> LimitId {
        self.add_with(name, KeyedLimiter::builder(quota))
    }

    /// Adds a named limit from a builder (for `max_keys` or `shards`; the
    /// set's policy wins over the builder's).
    pub fn add_with(&mut self, name: impl Into<String>, builder: KeyedBuilder) -> LimitId {
        let name = name.into();
        let limiter = builder
            .policy(self.policy)
            .build_with_hasher(self.clock.clone(), self.hasher.clone());
        if let Some(i) = self.limits.iter().position(|(n, _)| *n == name) {
            self.limits[i].1 = limiter;
            return self.limit_id(i);
        }
        self.limits.push((name, limiter));
        self.limit_id(self.limits.len() - 1)
    }

    fn limit_id(&self, index: usize) -> LimitId {
        LimitId {
            set: self.set,
            index,
        }
    }

    /// Where `id` is in this set.
    ///
    /// # Panics
    ///
    /// If `id` is another set's.
    #[inline]
    fn index(&self, id: LimitId) -> usize {
        assert!(
            id.set == self.set,
            "{id:?} belongs to another LimitSet (this one is set {})",
            self.set
        );
        id.index
    }

    /// The id of the limit called `name`.
    pub fn id(&self, name: &str) -> Option<LimitId> {
        self.limits
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| self.limit_id(i))
    }

    /// The limiter behind `id`.
    ///
    /// # Panics
    ///
    /// If `id` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn limiter(&self, id: LimitId) -> &KeyedLimiter<K, C> {
        &self.limits[self.index(id)].1
    }

    /// The name of `id`.
    ///
    /// # Panics
    ///
    /// If `id` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn name(&self, id: LimitId) -> &str {
        &self.limits[self.index(id)].0
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The policy every limit of the set records by.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Drops, in every limit, the keys whose window has drained (see
    /// [`KeyedLimiter::retain_recent`]); no decision changes. Call it
    /// periodically, say every tenth of a window, so memory is bounded by
    /// the keys active in about the last window.
    pub fn retain_recent(&self) {
        self.retain_recent_at(self.clock.now());
    }

    /// [`retain_recent`](Self::retain_recent) at an explicit time.
    pub fn retain_recent_at(&self, now: Timestamp) {
        for (_, limiter) in &self.limits {
            limiter.retain_recent_at(now);
        }
    }

    /// Keys held, summed over the limits (drained keys count until
    /// evicted): a gauge of what the set's memory follows.
    pub fn keys_held(&self) -> usize {
        self.limits.iter().map(|(_, l)| l.len()).sum()
    }

    /// Checks one attempt by `key` against the limits `ids`, now. As with
    /// [`KeyedLimiter::check`], `key` is anything `K` borrows as.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn check<Q>(&self, ids: &[LimitId], key: &Q) -> Combined<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_at(ids, key, self.clock.now())
    }

    /// Checks one attempt by `key` against the limits `ids` at `now`.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn check_at<Q>(&self, ids: &[LimitId], key: &Q, now: Timestamp) -> Combined<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.combined(ids, key, now, 1)
    }

    /// Checks `cost` attempts by `key` at once against the limits `ids`,
    /// now (a request that weighs more than one attempt). Each limit
    /// decides as [`KeyedLimiter::check_n`] does, and the set records as
    /// [`check`](Self::check) does: under [`Policy::CountDenied`] the
    /// `cost` attempts are recorded in every limit touched, under
    /// [`Policy::AllowedOnly`] in all or none.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`], naming the limit, when `cost` exceeds the
    /// limit of one of `ids`: that check could never be allowed.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's.
    pub fn check_n<Q>(
        &self,
        ids: &[LimitId],
        key: &Q,
        cost: NonZeroU32,
    ) -> Result<Combined<'_>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_n_at(ids, key, cost, self.clock.now())
    }

    /// [`check_n`](Self::check_n) at `now`.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`], naming the limit, when `cost` exceeds the
    /// limit of one of `ids`.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's.
    pub fn check_n_at<Q>(
        &self,
        ids: &[LimitId],
        key: &Q,
        cost: NonZeroU32,
        now: Timestamp,
    ) -> Result<Combined<'_>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        for id in ids {
            let (name, limiter) = &self.limits[self.index(*id)];
            limiter.fits(cost, name)?;
        }
        Ok(self.combined(ids, key, now, cost.get()))
    }

    pub(crate) fn combined<Q>(
        &self,
        ids: &[LimitId],
        key: &Q,
        now: Timestamp,
        cost: u32,
    ) -> Combined<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        // The touched limits, each once, in ascending order: the locking
        // order, so checks of different sets never deadlock. Inline (no
        // allocation) for up to four limits.
        let mut order: SmallVec<[usize; 4]> = SmallVec::new();
        for id in ids {
            order.push(self.index(*id));
        }
        order.sort_unstable();
        order.dedup();
        // Limits whose full key table refused the key, with the refusal.
        let mut full: SmallVec<[(usize, Decision); 4]> = SmallVec::new();
        let (decided, wait, resets) = loop {
            match self.try_combined(&order, hash, key, now, cost, &full) {
                Ok(done) => break done,
                // No shard is held here: make room, or learn the refusal.
                Err(i) => {
                    if let Some(refusal) = self.limits[i].1.make_room(now) {
                        full.push((i, refusal));
                    }
                }
            }
        };
        let mut decisions = SmallVec::new();
        let mut reset_of = SmallVec::new();
        for id in ids {
            let at = order
                .binary_search(&id.index)
                .expect("every id was checked");
            decisions.push((self.limits[id.index].0.as_str(), decided[at]));
            reset_of.push(resets[at]);
        }
        Combined {
            decisions,
            wait,
            resets: reset_of,
            scope: crate::decision::Scope::Process,
            store_error: None,
        }
    }

    /// One try at a combined check, holding the touched shards together.
    /// `Err(i)`: limit `i`'s key table was full and `full` does not say
    /// what it refuses; nothing was recorded and no shard is held.
    fn try_combined<Q>(
        &self,
        order: &[usize],
        hash: u64,
        key: &Q,
        now: Timestamp,
        cost: u32,
        full: &[(usize, Decision)],
    ) -> Result<Outcome, usize>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let limiter = |i: usize| &self.limits[i].1;
        let mut shards: SmallVec<[MutexGuard<'_, Shard<K>>; 4]> = SmallVec::new();
        for &i in order {
            shards.push(limiter(i).shard(hash).lock());
        }
        // A slot for the key in every capped table that lacks it, taken
        // before anything is recorded: a full table is known before any
        // limit records, so an all-or-nothing check stays that.
        let mut refused: SmallVec<[Option<Decision>; 4]> = SmallVec::from_elem(None, order.len());
        let mut taken: SmallVec<[bool; 4]> = SmallVec::from_elem(false, order.len());
        for (j, (&i, shard)) in order.iter().zip(shards.iter()).enumerate() {
            let Some(cap) = &limiter(i).cap else { continue };
            if shard.table.find(hash, |(k, _)| k.borrow() == key).is_some() {
                continue;
            }
            if cap.reserve() {
                taken[j] = true;
            } else if let Some((_, refusal)) = full.iter().find(|(f, _)| *f == i) {
                refused[j] = Some(*refusal);
            } else {
                for (j, _) in taken.iter().enumerate().filter(|(_, t)| **t) {
                    if let Some(cap) = &limiter(order[j]).cap {
                        cap.release(1);
                    }
                }
                return Err(i);
            }
        }
        let run = |i: usize, shard: &mut Shard<K>, mode: Mode| {
            // Every new key holds a slot here, so no run is refused.
            limiter(i)
                .run_in(shard, hash, key, Some(now), mode, cost, Slot::Taken)
                .unwrap_or(Decision::KeyTableFull {
                    retry_after: Duration::ZERO,
                })
        };
        let mode = match self.policy {
            Policy::CountDenied => Mode::Policy,
            // First look without recording; record below only if all allow.
            Policy::AllowedOnly => Mode::Peek,
        };
        let mut decided: SmallVec<[Decision; 4]> = SmallVec::new();
        for ((&i, shard), refusal) in order.iter().zip(shards.iter_mut()).zip(&refused) {
            decided.push(refusal.unwrap_or_else(|| run(i, shard, mode)));
        }
        if self.policy == Policy::AllowedOnly && decided.iter().all(Decision::is_allowed) {
            for ((&i, shard), d) in order.iter().zip(shards.iter_mut()).zip(decided.iter_mut()) {
                *d = run(i, shard, Mode::Policy);
            }
        }
        // Until every touched limit would allow the same cost again, given
        // what was recorded, and no sooner than any decision's own wait (a
        // full key table's is not in the key's window, which a refused key
        // does not have). An allowed decision with `cost` or more left
        // means the next check (same time, locks held) is allowed too, and
        // a denial's wait is already counted from what was recorded.
        let mut wait = Duration::ZERO;
        for ((&i, shard), d) in order.iter().zip(shards.iter_mut()).zip(decided.iter()) {
            let until = match d {
                Decision::Allowed { remaining } if *remaining < cost => {
                    run(i, shard, Mode::Peek).retry_after()
                }
                _ => d.retry_after(),
            };
            wait = wait.max(until.unwrap_or_default());
        }
        let resets = order
            .iter()
            .zip(shards.iter())
            .map(|(&i, shard)| limiter(i).oldest_leaves_in(shard, hash, key, now))
            .collect();
        // Give back the slots of keys that were not added (nothing recorded).
        for ((&i, shard), _) in order
            .iter()
            .zip(shards.iter())
            .zip(&taken)
            .filter(|(_, t)| **t)
        {
            if shard.table.find(hash, |(k, _)| k.borrow() == key).is_none()
                && let Some(cap) = &limiter(i).cap
            {
                cap.release(1);
            }
        }
        Ok((decided, wait, resets))
    }
}
