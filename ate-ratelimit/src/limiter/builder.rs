//! [`KeyedBuilder`]: the cap and the shards of a keyed limiter, and every
//! way to make one ([`KeyedLimiter::builder`], `new`, `with_clock`).

use std::hash::Hash;

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use parking_lot::Mutex;

use super::keyed::{Cap, KeyedLimiter, Shard};
use super::quota::{Policy, Quota};
use crate::clock::{Clock, MonotonicClock};
use crate::window::Geometry;

/// Builds a [`KeyedLimiter`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedBuilder {
    pub(super) quota: Quota,
    pub(super) policy: Policy,
    pub(super) max_keys: Option<usize>,
    pub(super) shards: Option<usize>,
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
    /// [`Decision::KeyTableFull`](crate::Decision::KeyTableFull) instead of growing the table, with the
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

    pub(super) fn build_with_hasher<K: Hash + Eq + Clone, C: Clock>(
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
}
