//! [`KeyedLimiter`]: one trailing window per key, in shards, under a cap on
//! the keys it keeps: each key is limited as a [`Limiter`](crate::Limiter)
//! alone would limit it, and a new key is refused only when the table
//! holds the cap's worth of keys none of which has drained.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::decide::{Mode, decide_in, decide_n_in};
use super::quota::{Policy, Quota};
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::Decision;
use crate::error::Error;
use crate::window::{Geometry, Window};

pub(super) struct Shard<K> {
    pub(super) table: HashTable<(K, Window)>,
}

/// The cap on a keyed limiter's keys ([`KeyedBuilder::max_keys`](super::KeyedBuilder::max_keys)): one
/// count over every shard, so the table is refused a new key exactly when
/// it holds `max` keys none of which has drained. Only adding and evicting
/// keys touch it; a check of a key already held does not.
#[derive(Debug)]
pub(super) struct Cap {
    pub(super) max: usize,
    /// Keys in the table, plus slots taken for keys about to be added.
    pub(super) keys: AtomicUsize,
    /// No key in the table drains before this tick. A lower bound: adding
    /// a key lowers it at once (a key seeded or checked at an older time
    /// drains sooner than those held), and only a sweep raises it.
    pub(super) full_until: AtomicU64,
    /// Held by a sweep, and by a refusal while it reads `full_until`.
    /// Taken with no shard lock held, so a sweep can lock every shard.
    pub(super) sweep: Mutex<()>,
}

impl Cap {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            keys: AtomicUsize::new(0),
            full_until: AtomicU64::new(u64::MAX),
            sweep: Mutex::new(()),
        }
    }

    /// Takes a slot for a new key; `false` when the table is at its cap.
    pub(super) fn reserve(&self) -> bool {
        self.keys
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
                (k < self.max).then_some(k + 1)
            })
            .is_ok()
    }

    /// Gives back `n` slots (keys evicted, or slots taken and not used).
    pub(super) fn release(&self, n: usize) {
        self.keys.fetch_sub(n, Ordering::AcqRel);
    }

    fn is_full(&self) -> bool {
        self.keys.load(Ordering::Acquire) >= self.max
    }
}

/// A new key found its table at the cap, at this time: the caller releases
/// its shard locks and calls [`KeyedLimiter::make_room`].
#[derive(Debug, Clone, Copy)]
pub(super) struct NoRoom(pub(super) Timestamp);

/// Whether a new key still needs a slot under the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Take one (a single limiter's check).
    Take,
    /// Taken already (a combined check takes every limit's slot before it
    /// records anything, and gives back what it did not use).
    Taken,
}

/// A trailing window per key, for any `K: Hash + Eq + Clone`.
///
/// Concurrent: keys are spread over lock shards; a key is hashed once, and
/// that hash picks both the shard and the slot. `Send + Sync`.
pub struct KeyedLimiter<K, C: Clock = MonotonicClock> {
    pub(super) geometry: Geometry,
    pub(super) quota: Quota,
    pub(super) policy: Policy,
    pub(super) clock: C,
    pub(super) hasher: DefaultHashBuilder,
    pub(super) cap: Option<Cap>,
    pub(super) mask: usize,
    pub(super) shards: Box<[Mutex<Shard<K>>]>,
}

impl<K, C: Clock> fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota)
            .field("policy", &self.policy)
            .field("shards", &self.shards.len())
            .field("max_keys", &self.cap.as_ref().map(|c| c.max))
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    pub(super) fn shard(&self, hash: u64) -> &Mutex<Shard<K>> {
        // hashbrown uses the low bits for the slot and the top 7 for its
        // tag; the shard comes from bits in between.
        &self.shards[(hash >> 32) as usize & self.mask]
    }

    /// Checks (and records, per the policy) an attempt by `key` now.
    ///
    /// `key` is anything `K` borrows as (as with `HashMap::get`): a
    /// `KeyedLimiter<String>` takes a `&str`, and only a key not yet in the
    /// table is copied into an owned `K`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use ate_ratelimit::{KeyedLimiter, Quota};
    ///
    /// let limiter: KeyedLimiter<String> =
    ///     KeyedLimiter::new(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let caller: &str = "tenant-a"; // say, from a request header
    /// assert!(limiter.check(caller).is_allowed());
    /// assert!(!limiter.check(&"tenant-a".to_owned()).is_allowed());
    /// ```
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, None, Mode::Policy, 1)
    }

    /// Checks (and records) an attempt by `key` at `now`, a time read from
    /// the same clock by the caller. A time earlier than the key's newest
    /// recorded attempt is taken as that attempt's time.
    #[inline]
    pub fn check_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, Some(now), Mode::Policy, 1)
    }

    /// What an attempt by `key` now would get, without recording it (a key
    /// not yet seen is not added).
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, None, Mode::Peek, 1)
    }

    /// [`peek`](Self::peek) at an explicit time.
    pub fn peek_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, Some(now), Mode::Peek, 1)
    }

    /// Records the attempt only if allowed (used by waiting loops).
    pub fn try_acquire_at<Q>(&self, key: &Q, now: Timestamp) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, Some(now), Mode::OnlyIfAllowed, 1)
    }

    /// Checks `cost` attempts by `key` at once, now: allowed iff all of
    /// them fit in the key's window, and then all are recorded; denied,
    /// they are recorded as the policy says for a denial (all `cost` of
    /// them under [`Policy::CountDenied`]). A denial's `retry_after` is when
    /// the same cost would fit, if nothing else is recorded.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`] when `cost` exceeds the quota's limit: such
    /// a check could never be allowed.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use ate_ratelimit::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::new(Quota::per_minute(NonZeroU32::new(10).unwrap()));
    /// let export = NonZeroU32::new(4).unwrap(); // a route that weighs 4
    /// assert_eq!(limiter.check_n(&"alice", export)?.remaining(), 6);
    /// assert_eq!(limiter.check(&"alice").remaining(), 5);
    /// # Ok::<(), ate_ratelimit::Error>(())
    /// ```
    pub fn check_n<Q>(&self, key: &Q, cost: NonZeroU32) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.fits(cost, "")?;
        Ok(self.run(key, None, Mode::Policy, cost.get()))
    }

    /// [`check_n`](Self::check_n) at `now`, a time read from the same clock
    /// by the caller.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`] when `cost` exceeds the quota's limit.
    pub fn check_n_at<Q>(
        &self,
        key: &Q,
        cost: NonZeroU32,
        now: Timestamp,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.fits(cost, "")?;
        Ok(self.run(key, Some(now), Mode::Policy, cost.get()))
    }

    pub(super) fn fits(&self, cost: NonZeroU32, name: &str) -> Result<(), Error> {
        if cost > self.quota.limit {
            return Err(Error::CostOverLimit {
                name: name.to_owned(),
                cost: cost.get(),
                limit: self.quota.limit.get(),
            });
        }
        Ok(())
    }

    /// One check of `cost` attempts by `key`. With `now: None` the clock is
    /// read once the key's window is found, under the shard lock: on a large
    /// table that lets the clock read overlap the lookup's cache misses
    /// instead of adding to them, and it timestamps a key's attempts in the
    /// order they take the lock.
    #[inline]
    fn run<Q>(&self, key: &Q, now: Option<Timestamp>, mode: Mode, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash).lock();
        if let Some((_, window)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            let now = now.unwrap_or_else(|| self.clock.now());
            if cost != 1 {
                return decide_n_in(&self.geometry, self.policy, mode, window, now, cost);
            }
            return decide_in(&self.geometry, self.policy, mode, window, now);
        }
        self.run_absent(shard, hash, key, now, mode, cost)
    }

    /// [`run`](Self::run) for a key not in the table, whose shard the
    /// caller locked.
    #[cold]
    #[inline(never)]
    fn run_absent<Q>(
        &self,
        mut shard: MutexGuard<'_, Shard<K>>,
        hash: u64,
        key: &Q,
        now: Option<Timestamp>,
        mode: Mode,
        cost: u32,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = now.unwrap_or_else(|| self.clock.now());
        match self.run_new_key(&mut shard, hash, key, now, mode, cost, Slot::Take) {
            Ok(decision) => decision,
            Err(NoRoom(now)) => {
                drop(shard);
                self.run_when_full(hash, key, now, mode, cost)
            }
        }
    }

    /// One check in a shard whose lock the caller holds. `Err` only for a
    /// new key under [`Slot::Take`] that found the table at its cap.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn run_in<Q>(
        &self,
        shard: &mut Shard<K>,
        hash: u64,
        key: &Q,
        now: Option<Timestamp>,
        mode: Mode,
        cost: u32,
        slot: Slot,
    ) -> Result<Decision, NoRoom>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let g = &self.geometry;
        if let Some((_, window)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            let now = now.unwrap_or_else(|| self.clock.now());
            if cost != 1 {
                return Ok(decide_n_in(g, self.policy, mode, window, now, cost));
            }
            return Ok(decide_in(g, self.policy, mode, window, now));
        }
        let now = now.unwrap_or_else(|| self.clock.now());
        self.run_new_key(shard, hash, key, now, mode, cost, slot)
    }

    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn run_new_key<Q>(
        &self,
        shard: &mut Shard<K>,
        hash: u64,
        key: &Q,
        now: Timestamp,
        mode: Mode,
        cost: u32,
        slot: Slot,
    ) -> Result<Decision, NoRoom>
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let g = &self.geometry;
        let mut window = Window::default();
        let decision = if cost == 1 {
            decide_in(g, self.policy, mode, &mut window, now)
        } else {
            decide_n_in(g, self.policy, mode, &mut window, now, cost)
        };
        let keep = window.len() > 0;
        if let Some(cap) = &self.cap {
            // A new key needs a slot even for a peek, which says what a
            // check would get: a full table's refusal.
            if slot == Slot::Take && !(if keep { cap.reserve() } else { !cap.is_full() }) {
                return Err(NoRoom(now));
            }
            if keep {
                cap.full_until
                    .fetch_min(window.drained_at(g), Ordering::AcqRel);
            }
        }
        if keep {
            let hasher = &self.hasher;
            shard
                .table
                .insert_unique(hash, (key.to_owned(), window), |(k, _)| hasher.hash_one(k));
        }
        Ok(decision)
    }

    /// How long after `now` the oldest attempt `key`'s window holds leaves
    /// (zero for a key not held), in a shard the caller locked.
    pub(super) fn oldest_leaves_in<Q>(
        &self,
        shard: &Shard<K>,
        hash: u64,
        key: &Q,
        now: Timestamp,
    ) -> Duration
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let g = &self.geometry;
        shard
            .table
            .find(hash, |(k, _)| k.borrow() == key)
            .and_then(|(_, w)| w.oldest_leaves(g))
            .map_or(Duration::ZERO, |tick| {
                Duration::from_nanos(
                    tick.saturating_mul(g.tick_nanos)
                        .saturating_sub(now.as_nanos()),
                )
            })
            // An attempt stamped at the tick after `now` leaves up to one
            // tick past a window from now: never more than the window
            // (a fresh 60 s window said `t=61`).
            .min(self.quota.window())
    }

    /// A new key found the table at its cap (no shard lock held): makes
    /// room and checks again, until the check is done or refused.
    #[cold]
    #[inline(never)]
    fn run_when_full<Q>(
        &self,
        hash: u64,
        key: &Q,
        now: Timestamp,
        mode: Mode,
        cost: u32,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        loop {
            if let Some(refusal) = self.make_room(now) {
                return refusal;
            }
            // Room was made; another thread may take it first.
            let mut shard = self.shard(hash).lock();
            if let Ok(decision) =
                self.run_in(&mut shard, hash, key, Some(now), mode, cost, Slot::Take)
            {
                return decision;
            }
        }
    }

    /// With the table at its cap, and no shard lock held by the caller:
    /// evicts every key drained at `now`, in every shard, unless no key can
    /// have drained yet. `None` if there is room now; else the refusal,
    /// whose `retry_after` runs to the earliest time a key drains.
    pub(super) fn make_room(&self, now: Timestamp) -> Option<Decision> {
        let cap = self.cap.as_ref()?;
        let _sweep = cap.sweep.lock();
        if !cap.is_full() {
            return None;
        }
        let g = &self.geometry;
        let (tick, _) = g.ticks(now.as_nanos());
        if tick >= cap.full_until.load(Ordering::Acquire) {
            // Keys added while the sweep runs lower the bound below this
            // mark; the sweep's own minimum is folded in at the end.
            cap.full_until.store(u64::MAX, Ordering::Release);
            let mut soonest = u64::MAX;
            for shard in self.shards.iter() {
                let mut shard = shard.lock();
                let before = shard.table.len();
                shard.table.retain(|(_, w)| !w.is_drained(g, tick));
                cap.release(before - shard.table.len());
                soonest = shard
                    .table
                    .iter()
                    .map(|(_, w)| w.drained_at(g))
                    .fold(soonest, u64::min);
            }
            cap.full_until.fetch_min(soonest, Ordering::AcqRel);
            if !cap.is_full() {
                return None;
            }
        }
        let at = cap
            .full_until
            .load(Ordering::Acquire)
            .saturating_mul(g.tick_nanos);
        Some(Decision::KeyTableFull {
            retry_after: Duration::from_nanos(at.saturating_sub(now.as_nanos())),
        })
    }

    /// Drops every key whose window has drained (its newest attempt is at
    /// least one window old). Decisions do not change: a drained key is
    /// indistinguishable from a new one.
    pub fn retain_recent(&self) {
        self.retain_recent_at(self.clock.now());
    }

    /// [`retain_recent`](Self::retain_recent) at an explicit time.
    pub fn retain_recent_at(&self, now: Timestamp) {
        let g = &self.geometry;
        let (tick, _) = g.ticks(now.as_nanos());
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.table.len();
            shard.table.retain(|(_, w)| !w.is_drained(g, tick));
            if let Some(cap) = &self.cap {
                cap.release(before - shard.table.len());
            }
            shard.table.shrink_to_fit(|(k, _)| self.hasher.hash_one(k));
        }
    }

    /// Keys in the table (drained keys count until evicted).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().table.len()).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate heap bytes held: table slots plus rings.
    pub fn heap_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock();
                s.table.capacity() * (std::mem::size_of::<(K, Window)>() + 1)
                    + s.table.iter().map(|(_, w)| w.heap_bytes()).sum::<usize>()
            })
            .sum()
    }

    /// Seeds windows from an audit trail of `(key, time)` records, so a
    /// restart does not hand every caller a fresh burst. Records are sorted
    /// by time first; each counts as an attempt whatever the policy, and
    /// only the last N per key are kept. With [`KeyedBuilder::max_keys`](super::KeyedBuilder::max_keys),
    /// the cap holds here too: a record of a new key that finds the table
    /// full of keys that have not drained at the record's time is not
    /// restored, and the result counts it. An audit trail keeps wall-clock
    /// times; [`Clock::at_wall_time`] places them on the limiter's timeline
    /// (see its example).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use ate_ratelimit::{KeyedLimiter, Quota, clock::{ManualClock, Timestamp}};
    ///
    /// let quota = Quota::per_minute(NonZeroU32::new(5).unwrap());
    /// let limiter = KeyedLimiter::builder(quota)
    ///     .max_keys(2)
    ///     .build_with_clock(ManualClock::new(Timestamp::from_secs(100)));
    /// let at = Timestamp::from_secs(90);
    /// let seeded = limiter.seed([("a", at), ("b", at), ("c", at), ("a", at)]);
    /// assert_eq!((seeded.restored(), seeded.refused()), (3, 1)); // "c": no room
    /// ```
    pub fn seed(&self, records: impl IntoIterator<Item = (K, Timestamp)>) -> Seeded {
        let mut records: Vec<_> = records.into_iter().collect();
        records.sort_by_key(|(_, t)| *t);
        let mut seeded = Seeded::default();
        for (key, at) in records {
            match self.run(&key, Some(at), Mode::Record, 1) {
                Decision::KeyTableFull { .. } => seeded.refused += 1,
                _ => seeded.restored += 1,
            }
        }
        seeded
    }

    /// Waits until `key` is allowed, then records that one attempt.
    ///
    /// While it sleeps nothing is recorded (the wait itself is not an
    /// attempt), so waiting never extends the throttling, and a wait given
    /// up (the future dropped, by `tokio::time::timeout` or a client
    /// hanging up) leaves the window as it found it. Sleeps with tokio
    /// time for the exact `retry_after` of each denial, so the limiter's
    /// clock must move with tokio time: [`MonotonicClock`] in a service,
    /// [`TokioClock`](crate::clock::TokioClock) in a test with paused time. With a
    /// [`ManualClock`](crate::clock::ManualClock) nothing advances the clock during
    /// the sleep, and the wait never ends.
    #[cfg(feature = "tokio")]
    pub async fn until_allowed<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        super::decide::retry_until_allowed(|| self.run(key, None, Mode::OnlyIfAllowed, 1)).await
    }
}

/// What [`KeyedLimiter::seed`] restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use = "records a full key table refused are lost: look at `refused`"]
pub struct Seeded {
    pub(super) restored: usize,
    pub(super) refused: usize,
}

impl Seeded {
    /// Records restored into a window.
    pub fn restored(&self) -> usize {
        self.restored
    }

    /// Records not restored because the table was at its key cap
    /// ([`KeyedBuilder::max_keys`](super::KeyedBuilder::max_keys)) and none of its keys had drained at the
    /// record's time.
    pub fn refused(&self) -> usize {
        self.refused
    }

    /// Whether every record was restored.
    pub fn is_complete(&self) -> bool {
        self.refused == 0
    }
}
