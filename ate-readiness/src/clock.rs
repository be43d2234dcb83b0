//! Wall-clock injection: the drain start time comes from a [`Clock`], so
//! tests control it instead of sleeping.

use chrono::{DateTime, Utc};

/// A source of wall-clock time (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Time elapsed since a fixed, arbitrary point, never going back:
    /// what the gate measures its ready grace with, so that a wall clock
    /// stepped back (NTP, a VM resumed) cannot bring `/ready` back to 200
    /// once the grace has ended. The default reads the process's
    /// monotonic clock ([`std::time::Instant`]).
    fn monotonic(&self) -> std::time::Duration {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// The system clock (`Utc::now()`); the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: std::sync::Arc<parking_lot::Mutex<(DateTime<Utc>, std::time::Duration)>>,
}

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: std::sync::Arc::new(parking_lot::Mutex::new((start, std::time::Duration::ZERO))),
        }
    }

    /// Moves the clock forward (or backward, for a negative delta),
    /// saturating at the last (or first) time chrono holds. Its
    /// [`monotonic`](Clock::monotonic) time moves forward with it, and
    /// stays where it is when the wall time steps back.
    pub fn advance(&self, by: chrono::TimeDelta) {
        let mut now = self.now.lock();
        let to = now
            .0
            .checked_add_signed(by)
            .unwrap_or(if by > chrono::TimeDelta::zero() {
                DateTime::<Utc>::MAX_UTC
            } else {
                DateTime::<Utc>::MIN_UTC
            });
        Self::step(&mut now, to);
    }

    /// Sets the wall time (a step back leaves the monotonic time alone).
    pub fn set(&self, to: DateTime<Utc>) {
        Self::step(&mut self.now.lock(), to);
    }

    fn step(now: &mut (DateTime<Utc>, std::time::Duration), to: DateTime<Utc>) {
        let forward = to.signed_duration_since(now.0).to_std().unwrap_or_default();
        now.1 = now.1.saturating_add(forward);
        now.0 = to;
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Default for ManualClock {
    fn default() -> Self {
        Self::new(DateTime::<Utc>::UNIX_EPOCH)
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.now.lock().0
    }

    fn monotonic(&self) -> std::time::Duration {
        self.now.lock().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_saturates_at_the_ends_of_chrono_time() {
        let clock = ManualClock::default();
        clock.advance(chrono::TimeDelta::MAX);
        assert_eq!(clock.now(), DateTime::<Utc>::MAX_UTC);
        clock.set(DateTime::<Utc>::UNIX_EPOCH);
        clock.advance(chrono::TimeDelta::MIN);
        assert_eq!(clock.now(), DateTime::<Utc>::MIN_UTC);
    }
}
