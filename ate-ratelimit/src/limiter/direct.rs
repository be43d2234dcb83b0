//! [`Limiter`]: one trailing window for every caller. It allows an
//! attempt iff fewer than N attempts counted in `(t - W, t]` (every attempt
//! under `CountDenied`, the allowed ones under `AllowedOnly`), so no
//! trailing window ever holds more than N allowed.

use std::fmt;
use std::num::NonZeroU32;

use super::decide::{Mode, decision, decision_n};
use super::quota::{Policy, Quota};
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::Decision;
use crate::error::Error;
use crate::lock::Lock;
use crate::ring::{MAX_HELD, Timeline};

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
    pub(super) quota: Quota,
    pub(super) policy: Policy,
    pub(super) clock: C,
    /// The window in nanoseconds (at least 1).
    pub(super) window: u64,
    pub(super) timeline: Lock<Timeline>,
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

    pub(super) fn fits(&self, cost: NonZeroU32) -> Result<(), Error> {
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
        super::decide::retry_until_allowed(|| self.run(None, Mode::OnlyIfAllowed)).await
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
