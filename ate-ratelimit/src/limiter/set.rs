//! [`LimitSet`]: several named limits checked as one ([`LimitId`]), each
//! check atomic over the limits it touches: recorded in every one of them
//! (`CountDenied`) or, under `AllowedOnly`, in all or none.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU32;
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::builder::KeyedBuilder;
use super::decide::Mode;
use super::keyed::{KeyedLimiter, Shard, Slot};
use super::quota::{Policy, Quota};
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::{Combined, Decision};
use crate::error::Error;

/// Several named keyed limits over the same key type, checked together.
///
/// The combined decision denies if any limit denies and names the limits
/// that did. Under [`Policy::CountDenied`] the attempt is recorded in EVERY
/// limit it touched, allowed or not (it was an attempt against each), so a
/// caller blocked by one limit also uses up the others. Under
/// [`Policy::AllowedOnly`] the check is all-or-nothing: nothing is recorded
/// anywhere unless every limit allows. Each check holds the touched shards
/// together, so it is atomic with respect to other checks.
pub struct LimitSet<K, C: Clock + Clone = MonotonicClock> {
    /// Which set its [`LimitId`]s belong to.
    pub(super) set: usize,
    pub(super) clock: C,
    pub(super) policy: Policy,
    pub(super) limits: Vec<(String, KeyedLimiter<K, C>)>,
    pub(super) hasher: DefaultHashBuilder,
}

impl<K, C: Clock + Clone> fmt::Debug for LimitSet<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitSet")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish()
    }
}

/// A limit in a [`LimitSet`], resolved once from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LimitId {
    set: usize,
    index: usize,
}

/// A combined check's decisions (in lock order), its wait, and each
/// limit's reset.
type Outcome = (SmallVec<[Decision; 4]>, Duration, SmallVec<[Duration; 4]>);

/// Numbers sets, so an id given to another set is caught.
static NEXT_SET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl<K: Hash + Eq + Clone, C: Clock + Clone> LimitSet<K, C> {
    /// An empty set.
    pub fn new(policy: Policy, clock: C) -> Self {
        Self {
            set: NEXT_SET.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            clock,
            policy,
            limits: Vec::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Adds a named limit; returns its id. A name added twice replaces the
    /// quota of the first.
    pub fn add(&mut self, name: impl Into<String>, quota: Quota) -> LimitId {
        self.add_with(name, KeyedLimiter::builder(quota))
    }

    /// Adds a named limit from a builder (for `max_keys` or `shards`; the
    /// set's policy wins over the builder's).
    pub fn add_with(&mut self, name: impl Into<String>, builder: KeyedBuilder) -> LimitId {
        let name = name.into();
        let limiter = builder
            .policy(self.policy)
            .build_with_hasher(self.clock.clone(), self.hasher.clone());
        if let Some(i) = self.limits.iter().position(|(n, _)| *n == name) {
            self.limits[i].1 = limiter;
            return self.limit_id(i);
        }
        self.limits.push((name, limiter));
        self.limit_id(self.limits.len() - 1)
    }

    fn limit_id(&self, index: usize) -> LimitId {
        LimitId {
            set: self.set,
            index,
        }
    }

    /// Where `id` is in this set.
    ///
    /// # Panics
    ///
    /// If `id` is another set's.
    #[inline]
    fn index(&self, id: LimitId) -> usize {
        assert!(
            id.set == self.set,
            "{id:?} belongs to another LimitSet (this one is set {})",
            self.set
        );
        id.index
    }

    /// The id of the limit called `name`.
    pub fn id(&self, name: &str) -> Option<LimitId> {
        self.limits
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| self.limit_id(i))
    }

    /// The limiter behind `id`.
    ///
    /// # Panics
    ///
    /// If `id` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn limiter(&self, id: LimitId) -> &KeyedLimiter<K, C> {
        &self.limits[self.index(id)].1
    }

    /// The name of `id`.
    ///
    /// # Panics
    ///
    /// If `id` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn name(&self, id: LimitId) -> &str {
        &self.limits[self.index(id)].0
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The policy every limit of the set records by.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Drops, in every limit, the keys whose window has drained (see
    /// [`KeyedLimiter::retain_recent`]); no decision changes. Call it
    /// periodically, say every tenth of a window, so memory is bounded by
    /// the keys active in about the last window.
    pub fn retain_recent(&self) {
        self.retain_recent_at(self.clock.now());
    }

    /// [`retain_recent`](Self::retain_recent) at an explicit time.
    pub fn retain_recent_at(&self, now: Timestamp) {
        for (_, limiter) in &self.limits {
            limiter.retain_recent_at(now);
        }
    }

    /// Keys held, summed over the limits (drained keys count until
    /// evicted): a gauge of what the set's memory follows.
    pub fn keys_held(&self) -> usize {
        self.limits.iter().map(|(_, l)| l.len()).sum()
    }

    /// Checks one attempt by `key` against the limits `ids`, now. As with
    /// [`KeyedLimiter::check`], `key` is anything `K` borrows as.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn check<Q>(&self, ids: &[LimitId], key: &Q) -> Combined<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_at(ids, key, self.clock.now())
    }

    /// Checks one attempt by `key` against the limits `ids` at `now`.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's (ids come from this set's
    /// [`add`](Self::add), [`add_with`](Self::add_with) or [`id`](Self::id)).
    pub fn check_at<Q>(&self, ids: &[LimitId], key: &Q, now: Timestamp) -> Combined<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.combined(ids, key, now, 1)
    }

    /// Checks `cost` attempts by `key` at once against the limits `ids`,
    /// now (a request that weighs more than one attempt). Each limit
    /// decides as [`KeyedLimiter::check_n`] does, and the set records as
    /// [`check`](Self::check) does: under [`Policy::CountDenied`] the
    /// `cost` attempts are recorded in every limit touched, under
    /// [`Policy::AllowedOnly`] in all or none.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`], naming the limit, when `cost` exceeds the
    /// limit of one of `ids`: that check could never be allowed.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's.
    pub fn check_n<Q>(
        &self,
        ids: &[LimitId],
        key: &Q,
        cost: NonZeroU32,
    ) -> Result<Combined<'_>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_n_at(ids, key, cost, self.clock.now())
    }

    /// [`check_n`](Self::check_n) at `now`.
    ///
    /// # Errors
    ///
    /// [`Error::CostOverLimit`], naming the limit, when `cost` exceeds the
    /// limit of one of `ids`.
    ///
    /// # Panics
    ///
    /// If an id in `ids` is another set's.
    pub fn check_n_at<Q>(
        &self,
        ids: &[LimitId],
        key: &Q,
        cost: NonZeroU32,
        now: Timestamp,
    ) -> Result<Combined<'_>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        for id in ids {
            let (name, limiter) = &self.limits[self.index(*id)];
            limiter.fits(cost, name)?;
        }
        Ok(self.combined(ids, key, now, cost.get()))
    }

    pub(crate) fn combined<Q>(
        &self,
        ids: &[LimitId],
        key: &Q,
        now: Timestamp,
        cost: u32,
    ) -> Combined<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        // The touched limits, each once, in ascending order: the locking
        // order, so checks of different sets never deadlock. Inline (no
        // allocation) for up to four limits.
        let mut order: SmallVec<[usize; 4]> = SmallVec::new();
        for id in ids {
            order.push(self.index(*id));
        }
        order.sort_unstable();
        order.dedup();
        // Limits whose full key table refused the key, with the refusal.
        let mut full: SmallVec<[(usize, Decision); 4]> = SmallVec::new();
        let (decided, wait, resets) = loop {
            match self.try_combined(&order, hash, key, now, cost, &full) {
                Ok(done) => break done,
                // No shard is held here: make room, or learn the refusal.
                Err(i) => {
                    if let Some(refusal) = self.limits[i].1.make_room(now) {
                        full.push((i, refusal));
                    }
                }
            }
        };
        let mut decisions = SmallVec::new();
        let mut reset_of = SmallVec::new();
        for id in ids {
            let at = order
                .binary_search(&id.index)
                .expect("every id was checked");
            decisions.push((self.limits[id.index].0.as_str(), decided[at]));
            reset_of.push(resets[at]);
        }
        Combined {
            decisions,
            wait,
            resets: reset_of,
            scope: crate::decision::Scope::Process,
            store_error: None,
        }
    }

    /// One try at a combined check, holding the touched shards together.
    /// `Err(i)`: limit `i`'s key table was full and `full` does not say
    /// what it refuses; nothing was recorded and no shard is held.
    fn try_combined<Q>(
        &self,
        order: &[usize],
        hash: u64,
        key: &Q,
        now: Timestamp,
        cost: u32,
        full: &[(usize, Decision)],
    ) -> Result<Outcome, usize>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let limiter = |i: usize| &self.limits[i].1;
        let mut shards: SmallVec<[MutexGuard<'_, Shard<K>>; 4]> = SmallVec::new();
        for &i in order {
            shards.push(limiter(i).shard(hash).lock());
        }
        // A slot for the key in every capped table that lacks it, taken
        // before anything is recorded: a full table is known before any
        // limit records, so an all-or-nothing check stays that.
        let mut refused: SmallVec<[Option<Decision>; 4]> = SmallVec::from_elem(None, order.len());
        let mut taken: SmallVec<[bool; 4]> = SmallVec::from_elem(false, order.len());
        for (j, (&i, shard)) in order.iter().zip(shards.iter()).enumerate() {
            let Some(cap) = &limiter(i).cap else { continue };
            if shard.table.find(hash, |(k, _)| k.borrow() == key).is_some() {
                continue;
            }
            if cap.reserve() {
                taken[j] = true;
            } else if let Some((_, refusal)) = full.iter().find(|(f, _)| *f == i) {
                refused[j] = Some(*refusal);
            } else {
                for (j, _) in taken.iter().enumerate().filter(|(_, t)| **t) {
                    if let Some(cap) = &limiter(order[j]).cap {
                        cap.release(1);
                    }
                }
                return Err(i);
            }
        }
        let run = |i: usize, shard: &mut Shard<K>, mode: Mode| {
            // Every new key holds a slot here, so no run is refused.
            limiter(i)
                .run_in(shard, hash, key, Some(now), mode, cost, Slot::Taken)
                .unwrap_or(Decision::KeyTableFull {
                    retry_after: Duration::ZERO,
                })
        };
        let mode = match self.policy {
            Policy::CountDenied => Mode::Policy,
            // First look without recording; record below only if all allow.
            Policy::AllowedOnly => Mode::Peek,
        };
        let mut decided: SmallVec<[Decision; 4]> = SmallVec::new();
        for ((&i, shard), refusal) in order.iter().zip(shards.iter_mut()).zip(&refused) {
            decided.push(refusal.unwrap_or_else(|| run(i, shard, mode)));
        }
        if self.policy == Policy::AllowedOnly && decided.iter().all(Decision::is_allowed) {
            for ((&i, shard), d) in order.iter().zip(shards.iter_mut()).zip(decided.iter_mut()) {
                *d = run(i, shard, Mode::Policy);
            }
        }
        // Until every touched limit would allow the same cost again, given
        // what was recorded, and no sooner than any decision's own wait (a
        // full key table's is not in the key's window, which a refused key
        // does not have). An allowed decision with `cost` or more left
        // means the next check (same time, locks held) is allowed too, and
        // a denial's wait is already counted from what was recorded.
        let mut wait = Duration::ZERO;
        for ((&i, shard), d) in order.iter().zip(shards.iter_mut()).zip(decided.iter()) {
            let until = match d {
                Decision::Allowed { remaining } if *remaining < cost => {
                    run(i, shard, Mode::Peek).retry_after()
                }
                _ => d.retry_after(),
            };
            wait = wait.max(until.unwrap_or_default());
        }
        let resets = order
            .iter()
            .zip(shards.iter())
            .map(|(&i, shard)| limiter(i).oldest_leaves_in(shard, hash, key, now))
            .collect();
        // Give back the slots of keys that were not added (nothing recorded).
        for ((&i, shard), _) in order
            .iter()
            .zip(shards.iter())
            .zip(&taken)
            .filter(|(_, t)| **t)
        {
            if shard.table.find(hash, |(k, _)| k.borrow() == key).is_none()
                && let Some(cap) = &limiter(i).cap
            {
                cap.release(1);
            }
        }
        Ok((decided, wait, resets))
    }
}
