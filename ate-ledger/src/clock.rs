//! Wall-clock injection (leases, retention and try timestamps).

use chrono::{DateTime, TimeDelta, Utc};

/// `d` as chrono's delta, saturating (a `Duration::MAX` ttl or retention
/// means "forever").
pub(crate) fn delta(d: std::time::Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// A source of wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Whether a store's own time ([`Store::read`](crate::store::Store::read):
    /// PostgreSQL's `now()`) decides leases instead of this clock: yes by
    /// default, so replicas with skewed clocks agree; a `ManualClock`
    /// (feature `test-util`) says no, so tests step time themselves.
    fn defers_to_store(&self) -> bool {
        true
    }
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

    /// Moves time forward, saturating at the last time chrono holds.
    pub fn advance(&self, by: std::time::Duration) {
        let by = chrono::TimeDelta::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
        let mut now = self.0.lock();
        *now = now
            .checked_add_signed(by)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
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

    fn defers_to_store(&self) -> bool {
        false
    }
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_saturates_at_the_end_of_chrono_time() {
        let clock = ManualClock::default();
        clock.advance(std::time::Duration::MAX);
        assert_eq!(clock.now(), DateTime::<Utc>::MAX_UTC);
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(clock.now(), DateTime::<Utc>::MAX_UTC);
    }
}
