//! Wall-clock injection (leases, retention and try timestamps).

use chrono::{DateTime, Utc};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// `Utc::now()`; the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to; clones share time.
#[cfg(feature = "test-util")]
#[derive(Debug, Clone)]
pub struct ManualClock(std::sync::Arc<parking_lot::Mutex<DateTime<Utc>>>);

#[cfg(feature = "test-util")]
impl ManualClock {
    /// Stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(std::sync::Arc::new(parking_lot::Mutex::new(start)))
    }

    /// Moves time forward.
    pub fn advance(&self, by: std::time::Duration) {
        *self.0.lock() += chrono::TimeDelta::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
    }
}

#[cfg(feature = "test-util")]
impl Default for ManualClock {
    fn default() -> Self {
        Self::new(DateTime::<Utc>::UNIX_EPOCH + chrono::TimeDelta::days(20_000))
    }
}

#[cfg(feature = "test-util")]
impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock()
    }
}
