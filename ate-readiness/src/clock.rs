//! Wall-clock injection: the drain start time comes from a [`Clock`], so
//! tests control it instead of sleeping.

use chrono::{DateTime, Utc};

/// A source of wall-clock time (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
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
    now: std::sync::Arc<parking_lot::Mutex<DateTime<Utc>>>,
}

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: std::sync::Arc::new(parking_lot::Mutex::new(start)),
        }
    }

    /// Moves the clock forward (or backward, for a negative delta),
    /// saturating at the last (or first) time chrono holds.
    pub fn advance(&self, by: chrono::TimeDelta) {
        let mut now = self.now.lock();
        *now = now
            .checked_add_signed(by)
            .unwrap_or(if by > chrono::TimeDelta::zero() {
                DateTime::<Utc>::MAX_UTC
            } else {
                DateTime::<Utc>::MIN_UTC
            });
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock() = to;
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
        *self.now.lock()
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
