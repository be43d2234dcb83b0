//! Time injection: a one-method [`Clock`] trait, a fast monotonic default and
//! a [`ManualClock`] whose clones share time.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// A point on a limiter's timeline: nanoseconds since the clock's origin.
///
/// Limiters only compare timestamps from the same clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin.
    pub const ZERO: Self = Self(0);

    /// From nanoseconds since the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// From milliseconds since the origin (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis.saturating_mul(1_000_000))
    }

    /// From seconds since the origin (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating.
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `self - d`, saturating at the origin.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// A source of monotonic time for a limiter.
///
/// Limiters call [`now`](Self::now) while holding the lock of the window
/// being checked (so attempts are timestamped in the order they take it):
/// it must be cheap, must not block, and must not call back into the
/// limiter.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time. Must never go backwards.
    fn now(&self) -> Timestamp;

    /// Where a wall-clock time `at` falls on this clock's timeline, given
    /// that the wall clock reads `wall_now` at this clock's
    /// [`now`](Self::now): `now() - (wall_now - at)`, saturating at the
    /// origin. A time after `wall_now` is taken as now.
    ///
    /// This is how records of an audit trail (which must carry wall-clock
    /// times to outlive the process) become the [`Timestamp`]s that
    /// `seed` takes after a restart. [`MonotonicClock`]'s timeline starts
    /// [`MonotonicClock::HEADROOM`] in, so records up to that old land
    /// exactly instead of being clamped to the origin.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::{Duration, SystemTime};
    /// use ate_ratelimit::{Clock, KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::new(Quota::per_minute(NonZeroU32::new(2).unwrap()));
    /// // From the audit trail of the previous run: two attempts by alice,
    /// // 50 s and 20 s ago.
    /// let wall_now = SystemTime::now();
    /// let trail = [("alice", 50), ("alice", 20)].map(|(key, secs_ago)| {
    ///     let at = wall_now - Duration::from_secs(secs_ago);
    ///     (key, limiter.clock().at_wall_time(at, wall_now))
    /// });
    /// limiter.seed(trail);
    /// // The one from 50 s ago leaves the minute in (just under) 10 s.
    /// let wait = limiter.peek(&"alice").retry_after().unwrap();
    /// assert!(wait <= Duration::from_secs(10) && wait > Duration::from_secs(9));
    /// ```
    fn at_wall_time(&self, at: SystemTime, wall_now: SystemTime) -> Timestamp {
        let age = wall_now.duration_since(at).unwrap_or(Duration::ZERO);
        self.now().saturating_sub(age)
    }
}

/// The default clock: monotonic, read through `quanta` (a TSC read where the
/// CPU has a reliable one, about 2x cheaper than `std::time::Instant::now`).
///
/// Its origin is [`HEADROOM`](Self::HEADROOM) before the clock was created,
/// so that attempts from before the process started (an audit trail, see
/// [`Clock::at_wall_time`]) have a place on its timeline.
#[derive(Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

impl fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonotonicClock").finish_non_exhaustive()
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl MonotonicClock {
    /// How far into its timeline a new clock starts: 2^55 ns, about 417
    /// days. A seeded record older than that is placed at the origin,
    /// which can only make the limit stricter. The timeline then lasts
    /// another 580 years.
    pub const HEADROOM: Duration = Duration::from_nanos(Self::HEADROOM_NANOS);
    const HEADROOM_NANOS: u64 = 1 << 55;

    /// A clock that reads [`HEADROOM`](Self::HEADROOM) now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        // Raw counter and one scaling: cheaper than building an Instant.
        Timestamp(Self::HEADROOM_NANOS + self.clock.delta_as_nanos(self.origin, self.clock.raw()))
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(start.0)),
        }
    }

    /// Moves time forward by `d` (saturating).
    pub fn advance(&self, d: Duration) {
        let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(add))
            });
    }

    /// Sets the time; it must not move backwards (ignored if it would).
    pub fn set(&self, to: Timestamp) {
        self.nanos.fetch_max(to.0, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.nanos.load(Ordering::Acquire))
    }
}
