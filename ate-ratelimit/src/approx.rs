//! The approximate, memory-bounded mode ([`ApproxKeyedLimiter`]): never
//! looser than the exact limit (it never admits more than N in any
//! trailing window), at most one bucket's width stricter.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use parking_lot::Mutex;

use crate::{
    Decision, MonotonicClock, Policy,
    clock::{Clock, Timestamp},
};

/// N attempts per trailing window W, counted in B buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketQuota {
    limit: NonZeroU32,
    window: Duration,
    buckets: NonZeroU16,
}

impl BucketQuota {
    /// `limit` attempts per `window`, counted in `buckets` buckets.
    pub const fn new(limit: NonZeroU32, window: Duration, buckets: NonZeroU16) -> Self {
        Self {
            limit,
            window,
            buckets,
        }
    }

    /// The bucket width `w = ceil(W / B)` (rounded up to a nanosecond).
    pub fn bucket_width(&self) -> Duration {
        Duration::from_nanos(self.width_nanos())
    }

    /// The most a denial can last beyond the exact rule's:
    /// `(B + 1) * w - W`, which is `w` plus the nanoseconds lost rounding
    /// `W / B` up (fewer than B).
    ///
    /// A window longer than `u64::MAX` nanoseconds (584 years) counts as
    /// that long, here and in decisions.
    pub fn max_extra_denial(&self) -> Duration {
        // In u128: (B + 1) * w passes u64::MAX for windows of centuries.
        let span = u128::from(self.width_nanos()) * (u128::from(self.buckets.get()) + 1);
        let extra = span - u128::from(self.window_nanos());
        // At most (B + 1) * w < 2^81 ns: whole seconds fit a u64.
        Duration::new(
            u64::try_from(extra / 1_000_000_000).unwrap_or(u64::MAX),
            (extra % 1_000_000_000) as u32,
        )
    }

    fn window_nanos(&self) -> u64 {
        u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX)
    }

    fn width_nanos(&self) -> u64 {
        self.window_nanos()
            .div_ceil(u64::from(self.buckets.get()))
            .max(1)
    }
}

/// One key's counters: a ring of B + 1 buckets ending at `newest`.
#[derive(Debug, Clone)]
struct Buckets {
    newest: u64,
    counts: Box<[u32]>,
}

impl Buckets {
    fn new(slots: usize) -> Self {
        Self {
            newest: 0,
            counts: vec![0; slots].into_boxed_slice(),
        }
    }

    fn slot(&self, index: u64) -> usize {
        (index % self.counts.len() as u64) as usize
    }

    /// Moves the ring forward to bucket `index`, zeroing buckets that fell
    /// out. Earlier indices (time going backwards) are taken as `newest`.
    fn advance(&mut self, index: u64) -> u64 {
        if index <= self.newest {
            return self.newest;
        }
        let steps = (index - self.newest).min(self.counts.len() as u64);
        for k in 0..steps {
            let s = self.slot(index - k);
            self.counts[s] = 0;
        }
        self.newest = index;
        index
    }

    fn total(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }
}

fn decide(
    q: &BucketQuota,
    policy: Policy,
    b: &mut Buckets,
    now: Timestamp,
    record: bool,
) -> Decision {
    let width = q.width_nanos();
    let index = b.advance(now.as_nanos() / width);
    let limit = u64::from(q.limit.get());
    let total = b.total();
    let allowed = total < limit;
    let record = record && (allowed || policy == Policy::CountDenied);
    if record {
        let s = b.slot(index);
        b.counts[s] = b.counts[s].saturating_add(1);
    }
    if allowed {
        return Decision::Allowed {
            remaining: (limit - total - u64::from(record)) as u32,
        };
    }
    // The earliest bucket boundary after which the total drops below N.
    let mut remaining = b.total();
    let slots = b.counts.len() as u64;
    let oldest = index.saturating_sub(slots - 1);
    for j in oldest..=index {
        remaining -= u64::from(b.counts[b.slot(j)]);
        if remaining < limit {
            let at = j.saturating_add(slots).saturating_mul(width);
            return Decision::Denied {
                retry_after: Duration::from_nanos(at.saturating_sub(now.as_nanos())),
            };
        }
    }
    Decision::Denied {
        retry_after: Duration::from_nanos(
            (index.saturating_add(slots))
                .saturating_mul(width)
                .saturating_sub(now.as_nanos()),
        ),
    }
}

/// A memory-bounded approximate mode for very large limits: B sub-window
/// counters per key instead of one timestamp per attempt.
///
/// The window of length W is cut into B buckets of width `w = ceil(W / B)`.
/// A decision at time t counts EVERY attempt recorded in any bucket that
/// overlaps the window `(t - W, t]`, i.e. the B + 1 most recent buckets.
/// That over-counts, never under-counts, so:
///
/// - it never admits more than N attempts in any trailing window W (the
///   attempts it counts are a superset of the exact window's);
/// - it may deny for at most `(B + 1) * w - W` too long, which is `w` (=
///   W / B) plus fewer than B nanoseconds of rounding
///   ([`BucketQuota::max_extra_denial`]): an attempt at time `a` stops
///   counting at `(floor(a / w) + B + 1) * w <= a + (B + 1) * w`, where the
///   exact rule drops it at `a + W`.
///
/// Memory per key: B + 1 `u32` counters, whatever N is.
pub struct ApproxKeyedLimiter<K, C: Clock = MonotonicClock> {
    quota: BucketQuota,
    policy: Policy,
    clock: C,
    hasher: DefaultHashBuilder,
    shards: Box<[Mutex<HashMap<K, Buckets, DefaultHashBuilder>>]>,
}

impl<K, C: Clock> fmt::Debug for ApproxKeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApproxKeyedLimiter")
            .field("quota", &self.quota)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone> ApproxKeyedLimiter<K, MonotonicClock> {
    /// With the default policy and the monotonic clock.
    pub fn new(quota: BucketQuota) -> Self {
        Self::with_clock(quota, Policy::default(), MonotonicClock::new())
    }
}

impl<K: Hash + Eq + Clone, C: Clock> ApproxKeyedLimiter<K, C> {
    /// With an explicit policy and clock.
    pub fn with_clock(quota: BucketQuota, policy: Policy, clock: C) -> Self {
        let shards = 16;
        Self {
            quota,
            policy,
            clock,
            hasher: DefaultHashBuilder::default(),
            shards: (0..shards)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
        }
    }

    /// Checks (and records) an attempt by `key` now.
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_at(key, self.clock.now())
    }

    /// Checks (and records) an attempt by `key` at `now`.
    pub fn check_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, now, true)
    }

    /// What an attempt by `key` now would get, without recording it.
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.peek_at(key, self.clock.now())
    }

    /// What an attempt at `now` would get, without recording it.
    pub fn peek_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, now, false)
    }

    /// Seeds counters from an audit trail of `(key, time)` records, so a
    /// restart does not hand every caller a fresh burst. Records are sorted
    /// by time first, and each counts as an attempt whatever the policy.
    /// [`Clock::at_wall_time`] places wall-clock records on the timeline.
    pub fn seed(&self, records: impl IntoIterator<Item = (K, Timestamp)>) {
        let mut records: Vec<_> = records.into_iter().collect();
        records.sort_by_key(|(_, t)| *t);
        for (key, at) in records {
            let _ = self.run_with(&key, at, true, Policy::CountDenied);
        }
    }

    fn run<Q>(&self, key: &Q, now: Timestamp, record: bool) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run_with(key, now, record, self.policy)
    }

    fn run_with<Q>(&self, key: &Q, now: Timestamp, record: bool, policy: Policy) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shards[(hash >> 32) as usize % self.shards.len()].lock();
        let slots = usize::from(self.quota.buckets.get()) + 1;
        match shard.get_mut(key) {
            Some(b) if record => decide(&self.quota, policy, b, now, true),
            // A peek moves a copy of the ring forward, not the key's own: a
            // key that is only peeked at still drains and gets evicted.
            Some(b) => decide(&self.quota, policy, &mut b.clone(), now, false),
            None => {
                let mut b = Buckets::new(slots);
                let d = decide(&self.quota, policy, &mut b, now, record);
                if record {
                    shard.insert(key.to_owned(), b);
                }
                d
            }
        }
    }

    /// Drops keys whose buckets are all out of the window now. Decisions
    /// do not change: such a key is indistinguishable from a new one.
    pub fn retain_recent(&self) {
        self.retain_recent_at(self.clock.now());
    }

    /// Drops keys whose buckets are all out of the window at `now`.
    pub fn retain_recent_at(&self, now: Timestamp) {
        let width = self.quota.width_nanos();
        let index = now.as_nanos() / width;
        let slots = u64::from(self.quota.buckets.get()) + 1;
        for shard in self.shards.iter() {
            // Bucket j still counts at `index` iff index - j < slots.
            shard
                .lock()
                .retain(|_, b| index.saturating_sub(b.newest) < slots);
        }
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
