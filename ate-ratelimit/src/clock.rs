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
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `self - d`, saturating at the origin.
    #[must_use]
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
    /// use ate_ratelimit::{KeyedLimiter, Quota, clock::Clock};
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
    /// The raw counter's reading at the origin: [`HEADROOM`] worth of
    /// counts before the clock was created, wrapping (the counter may
    /// have started after the origin). The headroom lives here, not as an
    /// addition after scaling, to keep `now` one operation shorter.
    ///
    /// [`HEADROOM`]: Self::HEADROOM
    base: u64,
    /// How `now` turns raw counts into nanoseconds.
    scale: Scale,
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
    /// How far into its timeline a new clock starts: 36,028,797 s (2^55 ns
    /// in whole seconds), about 417 days. A seeded record older than that
    /// is placed at the origin, which can only make the limit stricter. The
    /// timeline then lasts more than 580 years. A whole number of seconds,
    /// so that a clock starting there and moving in whole ticks
    /// (`TokioClock`, feature `tokio`, in a test with paused time) stays on the keyed
    /// limiters' tick grid, where decisions are exact.
    pub const HEADROOM: Duration = Duration::from_nanos(Self::HEADROOM_NANOS);
    const HEADROOM_NANOS: u64 = (1 << 55) / 1_000_000_000 * 1_000_000_000;

    /// A clock that reads [`HEADROOM`](Self::HEADROOM) now (or up to a
    /// nanosecond more, from rounding the scaling).
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let quanta = |counts| clock.delta_as_nanos(0, counts);
        let s = Scale::of(quanta);
        let headroom = raw_counts_for(|c| scale(s, c, quanta), Self::HEADROOM_NANOS);
        let base = clock.raw().wrapping_sub(headroom);
        Self {
            clock,
            base,
            scale: s,
        }
    }
}

/// Raw counts to nanoseconds, from quanta's calibration. Where the counter
/// runs faster than 1 GHz (a TSC) it takes one multiply: quanta's own
/// scaling adds a variable shift and a select after it, and every step
/// between the counter read and a limiter's stores delays the next check.
/// A slower counter (as on many ARM machines) is scaled by
/// quanta itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// Raw counts are nanoseconds already (no usable counter; quanta reads
    /// the OS's monotonic clock).
    Identity,
    /// Nanoseconds per 2^64 counts, for a counter faster than 1 GHz.
    Fast(u64),
    /// A counter at 1 GHz or slower: quanta's scaling.
    Slow,
}

impl Scale {
    /// The scaling for a counter that `nanos` (quanta's scaling) turns into
    /// nanoseconds.
    fn of(nanos: impl Fn(u64) -> u64) -> Self {
        let per_2_32 = nanos(1 << 32);
        if per_2_32 == 1 << 32 {
            Self::Identity
        } else if per_2_32 < 1 << 32 {
            // Under a nanosecond a count, so 2^62 counts scale to under
            // 2^62 nanoseconds without overflow: 62 bits of the
            // calibration.
            Self::Fast(nanos(1 << 62) << 2)
        } else {
            Self::Slow
        }
    }
}

/// `counts` raw counts in nanoseconds (monotonic in `counts`); `slow` is
/// quanta's scaling, for [`Scale::Slow`].
#[inline(always)]
fn scale(s: Scale, counts: u64, slow: impl Fn(u64) -> u64) -> u64 {
    match s {
        Scale::Identity => counts,
        Scale::Fast(m) => ((u128::from(counts) * u128::from(m)) >> 64) as u64,
        Scale::Slow => slow(counts),
    }
}

/// The fewest raw counts that `scaled` turns into at least `nanos`.
fn raw_counts_for(scaled: impl Fn(u64) -> u64, nanos: u64) -> u64 {
    // Double up to a bound, well below where scaling could overflow.
    let mut high = 1u64;
    while scaled(high) < nanos {
        match high.checked_mul(2) {
            Some(h) => high = h,
            None => return high,
        }
    }
    let mut low = high / 2;
    // Invariant: scaled(low) < nanos <= scaled(high) (or low = 0).
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if scaled(mid) >= nanos {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        // Raw counter and one scaling: cheaper than building an Instant.
        let counts = self.clock.raw().wrapping_sub(self.base);
        Timestamp(scale(self.scale, counts, |c| {
            self.clock.delta_as_nanos(0, c)
        }))
    }
}

/// A monotonic clock on tokio's time (feature `tokio`): in a test with
/// paused time (`#[tokio::test(start_paused = true)]`,
/// `tokio::time::advance`) it moves exactly as the test's sleeps do.
///
/// That is what a test of `until_allowed` needs: the wait sleeps with tokio
/// time for each denial's `retry_after`, so the limiter's clock must advance
/// while it sleeps. A [`ManualClock`] does not (nothing advances it during
/// the sleep, so the wait would never end); [`MonotonicClock`] does, but on
/// real time, so a paused test would wait for real. Outside tests (tokio
/// time not paused) it reads the monotonic clock, as `Instant::now` does.
///
/// Like [`MonotonicClock`], its origin is [`MonotonicClock::HEADROOM`]
/// (a whole number of seconds) before it was created, so an audit trail's
/// past attempts have a place, and times a test moves in whole
/// microseconds, milliseconds or seconds stay on the keyed limiters' tick
/// grid: decisions and `retry_after` are exact.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // In a test: #[tokio::test(start_paused = true)]
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use ate_ratelimit::{Limiter, Quota, clock::TokioClock};
///
/// let quota = Quota::new(NonZeroU32::new(1).unwrap(), Duration::from_secs(60)).unwrap();
/// let limiter = Limiter::with_clock(quota, TokioClock::new());
/// assert!(limiter.check().is_allowed());
/// // Waits 60 s of paused time (no real waiting), then records one attempt.
/// let start = tokio::time::Instant::now();
/// assert!(limiter.until_allowed().await.is_allowed());
/// assert_eq!(start.elapsed(), Duration::from_secs(60));
/// # }
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock whose `now` is [`MonotonicClock::HEADROOM`] at creation.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(MonotonicClock::HEADROOM_NANOS).saturating_add(self.origin.elapsed())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headroom_is_the_fewest_raw_counts_that_scale_to_it() {
        let nanos = MonotonicClock::HEADROOM_NANOS;
        let clock = quanta::Clock::new();
        let quanta = |c| clock.delta_as_nanos(0, c);
        let s = Scale::of(quanta);
        let scaled = |c| scale(s, c, quanta);
        let counts = raw_counts_for(scaled, nanos);
        assert!(scaled(counts) >= nanos);
        assert!(scaled(counts - 1) < nanos);
        // Where raw counts are nanoseconds already (quanta's mock), exactly.
        let (mock, _) = quanta::Clock::mock();
        let s = Scale::of(|c| mock.delta_as_nanos(0, c));
        assert_eq!(s, Scale::Identity);
        let identity = |c| scale(s, c, |_| unreachable!());
        assert_eq!(raw_counts_for(identity, nanos), nanos);
        assert_eq!(raw_counts_for(identity, 1), 1);
    }

    /// The headroom is what its doc says: 2^55 ns in whole seconds, about
    /// 417 days. And the clock's Debug names it (its state is opaque).
    #[test]
    fn the_headroom_is_2_to_the_55_nanoseconds_in_whole_seconds() {
        assert_eq!(MonotonicClock::HEADROOM, Duration::from_secs(36_028_797));
        assert_eq!(
            format!("{:?}", MonotonicClock::new()),
            "MonotonicClock { .. }"
        );
    }

    /// The one-multiply scaling agrees with quanta's own (within a
    /// nanosecond per second) and never goes backwards.
    #[test]
    fn scaling_matches_quanta_and_is_monotonic() {
        let clock = quanta::Clock::new();
        let quanta = |c| clock.delta_as_nanos(0, c);
        let s = Scale::of(quanta);
        for counts in [0u64, 1, 999, 1 << 20, 1 << 32, 1 << 40, 1 << 50, 1 << 56] {
            let ours = scale(s, counts, quanta);
            let theirs = quanta(counts);
            let slack = theirs / 1_000_000_000 + 1;
            assert!(
                ours.abs_diff(theirs) <= slack,
                "{counts}: {ours} vs {theirs}"
            );
        }
        // A 3 GHz counter: a count is a third of a nanosecond; neighbours
        // map to the same or the next nanosecond, never an earlier one.
        let ghz3 = Scale::of(|c| (u128::from(c) / 3) as u64);
        let Scale::Fast(m) = ghz3 else {
            panic!("{ghz3:?}")
        };
        assert!(m.abs_diff(u64::MAX / 3) < 1 << 3, "{m}");
        let mut last = scale(ghz3, 1 << 40, |_| unreachable!());
        for counts in (1u64 << 40)..(1 << 40) + 10_000 {
            let ns = scale(ghz3, counts, |_| unreachable!());
            assert!(ns >= last && ns - last <= 1);
            last = ns;
        }
        assert_eq!(scale(ghz3, 3, |_| unreachable!()), 0);
        assert_eq!(scale(ghz3, 4, |_| unreachable!()), 1);
        assert_eq!(scale(Scale::Identity, 12345, |_| unreachable!()), 12345);
    }

    /// A counter slower than 1 GHz (ARM's is often 24 MHz: 41.7 ns a
    /// count) is scaled by quanta, never taken as nanoseconds.
    #[test]
    fn a_slow_counter_is_scaled_by_quanta() {
        let mhz24 = |c: u64| (u128::from(c) * 125 / 3).min(u128::from(u64::MAX)) as u64;
        let s = Scale::of(mhz24);
        assert_eq!(s, Scale::Slow);
        assert_eq!(scale(s, 24_000_000, mhz24), 1_000_000_000);
        let counts = raw_counts_for(|c| scale(s, c, mhz24), 1_000_000_000);
        assert_eq!(counts, 24_000_000);
    }

    #[test]
    fn a_manual_clock_never_moves_backwards_and_saturates() {
        let clock = ManualClock::new(Timestamp::from_secs(10));
        clock.set(Timestamp::from_secs(5));
        assert_eq!(clock.now(), Timestamp::from_secs(10));
        clock.set(Timestamp::from_secs(12));
        assert_eq!(clock.now(), Timestamp::from_secs(12));
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), Timestamp::from_nanos(u64::MAX));
        clock.advance(Duration::from_nanos(1));
        assert_eq!(clock.now(), Timestamp::from_nanos(u64::MAX));
    }

    #[test]
    fn a_new_monotonic_clock_reads_the_headroom_and_moves_forward() {
        let clock = MonotonicClock::new();
        let (a, b) = (clock.now(), clock.now());
        assert!(a.as_nanos() >= MonotonicClock::HEADROOM_NANOS);
        // Created just now: well under a minute past the headroom.
        assert!(a.as_nanos() - MonotonicClock::HEADROOM_NANOS < 60_000_000_000);
        assert!(b >= a);
    }
}
