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

    /// Moves the clock forward (or backward, for a negative delta).
    pub fn advance(&self, by: chrono::TimeDelta) {
        *self.now.lock() += by;
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
