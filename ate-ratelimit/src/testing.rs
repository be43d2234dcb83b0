//! Testing support (feature `test-util`): the naive reference model the
//! limiter is checked against, and proptest strategies for traffic (steady
//! callers, bursts, clock jumps).
//!
//! # Example: property-testing your own integration
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use ate_ratelimit::testing::{Model, traffic};
//! use ate_ratelimit::{KeyedLimiter, Policy, Quota, clock::ManualClock};
//! use proptest::prelude::*;
//!
//! proptest!(|(steps in traffic(4, 50))| {
//!     let quota = Quota::new(NonZeroU32::new(3).unwrap(), Duration::from_secs(10)).unwrap();
//!     let clock = ManualClock::default();
//!     let limiter = KeyedLimiter::with_clock(quota, clock.clone());
//!     let mut model = Model::new(quota, Policy::CountDenied);
//!     for step in steps {
//!         clock.advance(step.advance);
//!         // Call YOUR handler here; it must answer as the model says.
//!         let got = limiter.check(&step.key);
//!         prop_assert_eq!(got, model.check(step.key, clock.now_for_model()));
//!     }
//! });
//! ```

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use proptest::prelude::*;

use crate::{
    Decision, Policy, Quota,
    clock::{Clock, ManualClock, Timestamp},
};

#[cfg(all(feature = "redis", feature = "redis-cluster"))]
pub use crate::testing_redis::TestCluster;
#[cfg(feature = "redis")]
pub use crate::testing_redis::TestRedis;

/// The reference: the full log of recorded attempts per key, and the rule
/// "count the attempts in `(t - W, t]`" written out longhand.
///
/// Times must be whole microseconds (the limiter's tick for windows under
/// ~35 minutes), where the limiter is exact.
#[derive(Debug, Clone)]
pub struct Model<K> {
    quota: Quota,
    policy: Policy,
    log: HashMap<K, Vec<Timestamp>>,
}

impl<K: Hash + Eq + Clone> Model<K> {
    /// An empty model.
    pub fn new(quota: Quota, policy: Policy) -> Self {
        Self {
            quota,
            policy,
            log: HashMap::new(),
        }
    }

    /// Attempts by `key` inside the window at `now`.
    pub fn count(&self, key: &K, now: Timestamp) -> usize {
        let w = self.quota.window();
        self.log.get(key).map_or(0, |log| {
            log.iter()
                .filter(|a| **a <= now && now.duration_since(**a) < w)
                .count()
        })
    }

    /// Attempts by `key` in `(now - span, now]` (for checking the
    /// approximate mode's bound with `span = W + W/B`).
    pub fn count_within(&self, key: &K, now: Timestamp, span: Duration) -> usize {
        self.log.get(key).map_or(0, |log| {
            log.iter()
                .filter(|a| **a <= now && now.duration_since(**a) < span)
                .count()
        })
    }

    /// What an attempt at `now` gets, without recording it.
    pub fn peek(&self, key: &K, now: Timestamp) -> Decision {
        self.peek_n(key, now, 1)
    }

    /// What `cost` attempts at once at `now` get, without recording them:
    /// allowed iff all of them fit.
    pub fn peek_n(&self, key: &K, now: Timestamp, cost: u32) -> Decision {
        let limit = self.quota.limit().get() as usize;
        let count = self.count(key, now);
        if count + cost as usize <= limit {
            Decision::Allowed {
                remaining: (limit - count) as u32,
            }
        } else {
            Decision::Denied {
                retry_after: self.wait_n(key, now, cost),
            }
        }
    }

    /// How long until `key` would be allowed.
    pub fn wait(&self, key: &K, now: Timestamp) -> Duration {
        self.wait_n(key, now, 1)
    }

    /// How long until `cost` attempts at once by `key` would be allowed
    /// (`cost` at most the limit).
    pub fn wait_n(&self, key: &K, now: Timestamp, cost: u32) -> Duration {
        let limit = self.quota.limit().get() as usize;
        let room = limit.saturating_sub(cost as usize);
        let w = self.quota.window();
        let Some(log) = self.log.get(key) else {
            return Duration::ZERO;
        };
        let mut inside: Vec<Timestamp> = log
            .iter()
            .copied()
            .filter(|a| now.duration_since(*a) < w)
            .collect();
        inside.sort_unstable();
        if inside.len() <= room {
            return Duration::ZERO;
        }
        // Allowed once all but `room` of them have left: the
        // (len - room)-th oldest leaves at its time + W.
        let leaving = inside[inside.len() - room - 1];
        leaving.saturating_add(w).duration_since(now)
    }

    /// Checks and records an attempt per the policy.
    pub fn check(&mut self, key: K, now: Timestamp) -> Decision {
        self.check_n(key, now, 1)
    }

    /// Checks `cost` attempts at once and records all of them per the
    /// policy (allowed iff all fit; denied, all are recorded under
    /// [`Policy::CountDenied`]).
    pub fn check_n(&mut self, key: K, now: Timestamp, cost: u32) -> Decision {
        let peek = self.peek_n(&key, now, cost);
        let record = peek.is_allowed() || self.policy == Policy::CountDenied;
        if record {
            let log = self.log.entry(key.clone()).or_default();
            log.extend(std::iter::repeat_n(now, cost as usize));
        }
        match peek {
            Decision::Allowed { remaining } => Decision::Allowed {
                remaining: remaining - cost,
            },
            _ => Decision::Denied {
                retry_after: self.wait_n(&key, now, cost),
            },
        }
    }

    /// Records an attempt unconditionally (an audit-trail record).
    pub fn record(&mut self, key: K, at: Timestamp) {
        self.log.entry(key).or_default().push(at);
    }
}

/// One step of traffic: wait `advance`, then an attempt by `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Time to let pass before the attempt.
    pub advance: Duration,
    /// The caller.
    pub key: u8,
}

/// Traffic over `keys` callers: mostly tight bursts, some steady spacing,
/// occasional clock jumps past the window, now and then by hours (past
/// what a keyed window's 4-byte offsets span in 1 µs ticks, about 71.6
/// minutes, so a key checked again after one moves its base). Times are
/// whole milliseconds.
pub fn traffic(keys: u8, max_len: usize) -> impl Strategy<Value = Vec<Step>> {
    let advance = prop_oneof![
        5 => Just(0u64),
        6 => 1u64..500,
        3 => 500u64..5_000,
        1 => 5_000u64..60_000,
        1 => 60_000u64..600_000,
        1 => 4_300_000u64..10_000_000,
    ];
    proptest::collection::vec(
        (advance, 0..keys.max(1)).prop_map(|(ms, key)| Step {
            advance: Duration::from_millis(ms),
            key,
        }),
        0..=max_len,
    )
}

impl ManualClock {
    /// The current time (for feeding a [`Model`]).
    pub fn now_for_model(&self) -> Timestamp {
        Clock::now(self)
    }
}

/// The most of `times` (in any order) that fall inside one trailing window
/// `(t - window, t]`: the number a limit of N must never exceed, for
/// checking the times your callers were allowed at.
///
/// ```
/// use std::time::Duration;
/// use ate_ratelimit::clock::Timestamp;
/// use ate_ratelimit::testing::max_in_any_window;
///
/// let at = |s| Timestamp::from_secs(s);
/// // 0 s and 60 s are a whole window apart: never counted together.
/// let times = [at(0), at(30), at(60), at(61)];
/// assert_eq!(max_in_any_window(&times, Duration::from_secs(60)), 3);
/// ```
pub fn max_in_any_window(times: &[Timestamp], window: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut oldest = 0;
    let mut most = 0;
    for (newest, t) in sorted.iter().enumerate() {
        // Drop what is a whole window (or more) before `t`.
        while t.duration_since(sorted[oldest]) >= window {
            oldest += 1;
        }
        most = most.max(newest + 1 - oldest);
    }
    most
}
