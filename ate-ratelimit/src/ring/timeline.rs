//! [`Timeline`]: a window's attempts as a ring of per-tick counts, with
//! the running total and the low-water mark that make a check O(1).

use super::{MAX_HELD, Record, Step};

/// The single window's ring: the times at which its attempts leave the
/// window (attempt time + window, saturating; whole nanoseconds), oldest
/// first, in a boxed slice of a power-of-two length that grows (doubling,
/// at most to the limit rounded up to a power of two) and shrinks after a
/// burst, once it has stayed at most a quarter used for a window
/// ([`low`](Self::low)). A process has one such window per limit, so
/// exactness to the nanosecond and speed win over the compactness keyed
/// windows need.
///
/// Its position is two free-running counters, `start` (the oldest) and
/// `end` (one past the newest), not a head and a length: the slot a check
/// writes (`end`) then does not depend on how many attempts that check
/// dropped, which depends on the clock read just before it.
///
/// The check holds a lock around a clock read and this ring's work, and
/// that work is what it costs beside governor's (whose whole check hides
/// behind its clock read): every instruction counts, and the layout below
/// is the one that measured fastest (`benches/NOTES.md`).
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    /// `start` in the low half, `end` in the high half: one store moves
    /// both.
    pos: u64,
    /// When the newest attempt recorded leaves (zero before the first).
    /// A field, not the slot before `end`: with caller-supplied times
    /// (`check_at`) that slot's load would wait for `pos`.
    pub(super) newest: u64,
    /// Slots, each the time its attempt leaves the window.
    pub(super) slots: Box<[u64]>,
    /// A check holding fewer than this many calls [`low`](Self::low): a
    /// quarter of the capacity (zero while it is 64 or less), or every
    /// check (`u32::MAX`) while the ring is low.
    shrink_below: u32,
    /// When a check first found the ring at most a quarter used, while it
    /// still is ([`NOT_LOW`] otherwise).
    pub(super) low_since: u64,
}

/// [`Timeline::low_since`] while the ring is more than a quarter used.
pub(super) const NOT_LOW: u64 = u64::MAX;

/// Where counter `i` falls in a power-of-two ring of `cap` slots (which
/// divides 2^32, so the counters may wrap).
#[inline(always)]
pub(super) fn counter_slot(i: u32, cap: usize) -> usize {
    i as usize & (cap - 1)
}

/// Slots a check compares at once when dropping expired attempts.
const WAYS: u32 = 3;

impl Timeline {
    /// An empty window for `limit`.
    pub(crate) fn new(limit: u32) -> Self {
        let cap = (limit.min(MAX_HELD) as usize).next_power_of_two().min(4);
        Self::with_slots(0, 0, vec![0; cap].into_boxed_slice())
    }

    fn with_slots(end: u32, newest: u64, slots: Box<[u64]>) -> Self {
        let cap = slots.len() as u32;
        let mut line = Self {
            pos: 0,
            newest,
            slots,
            shrink_below: Self::quarter(cap),
            low_since: NOT_LOW,
        };
        line.set_pos(0, end);
        line
    }

    /// Below how many held a ring of `cap` slots is low: a quarter, or
    /// never while it is 64 slots or less.
    fn quarter(cap: u32) -> u32 {
        if cap > 64 { cap / 4 } else { 0 }
    }

    /// The oldest attempt's counter.
    #[inline(always)]
    pub(super) fn start(&self) -> u32 {
        self.pos as u32
    }

    /// One past the newest attempt's counter.
    #[inline(always)]
    pub(super) fn end(&self) -> u32 {
        (self.pos >> 32) as u32
    }

    #[inline(always)]
    pub(super) fn set_pos(&mut self, start: u32, end: u32) {
        self.pos = (u64::from(end) << 32) | u64::from(start);
    }

    /// One check at `now` (nanoseconds) for a window of `window`
    /// nanoseconds:
    ///
    /// 1. drops every attempt at or before `now - window` (whose slot, its
    ///    leaving time, is at or before `now`);
    /// 2. the attempt is allowed iff fewer than `limit` remain;
    /// 3. if `record` says so for that verdict, appends `now` (raised to the
    ///    newest, so the ring stays sorted), dropping the oldest when the
    ///    ring already holds `limit`.
    ///
    /// A denial's front is the time the oldest counted attempt leaves.
    #[inline(always)]
    pub(crate) fn step(&mut self, limit: u32, window: u64, now: u64, record: Record) -> Step<u64> {
        let (mut start, end) = (self.start(), self.end());
        let slots = &*self.slots;
        let cap = slots.len() as u32;
        let at = |i: u32| counter_slot(i, cap as usize);
        let held = end.wrapping_sub(start);
        if held >= limit {
            // At the limit (a caller being denied), checks mostly drop
            // nothing, a branch the CPU predicts: pop one at a time (or
            // all at once, after a pause).
            if start != end && slots[at(start)] <= now {
                start = self.drop_left(start.wrapping_add(1), now);
            }
            let allowed = end.wrapping_sub(start) < limit;
            return self.finish(limit, window, now, record, start, allowed);
        }
        // Below it, how many leave at a check (0, 1, 2, ...) follows the
        // clock's jitter. Popping one at a time mispredicts the loop's exit
        // about every other check (measured when this was first written: 23
        // ns a check, against 18 for this). Instead, compare the next
        // `WAYS` slots without branches (the ring is sorted, so those that
        // left are a prefix); only a check that drops all of them looks on,
        // one at a time.
        if held >= WAYS {
            let mut k = 0;
            for i in 0..WAYS {
                k += u32::from(slots[at(start.wrapping_add(i))] <= now);
            }
            start = start.wrapping_add(k);
            if k == WAYS {
                start = self.drop_left(start, now);
            }
        } else {
            // Nearly empty (a branch the CPU predicts while the window is
            // busy): pop one at a time.
            start = self.drop_left(start, now);
        }
        // Fewer than `limit` were held, so fewer remain: allowed, a
        // constant here (the verdict then waits for no compare).
        self.finish(limit, window, now, record, start, true)
    }

    /// Drops, from `start` on, the attempts that left by `now`, and returns
    /// the new start. Once every attempt has left (the newest has), that
    /// is the end, at once: the first check after a pause longer than the
    /// window would otherwise pop a full window one at a time under the
    /// lock (for a window of a million attempts, about a millisecond).
    #[inline(always)]
    fn drop_left(&self, mut start: u32, now: u64) -> u32 {
        let end = self.end();
        if self.newest <= now {
            return end;
        }
        let at = |i: u32| counter_slot(i, self.slots.len());
        while start != end && self.slots[at(start)] <= now {
            start = start.wrapping_add(1);
        }
        start
    }

    /// The rest of a [`step`](Self::step), once what left the window is
    /// dropped (up to `start`) and the verdict is known. Inlined into each
    /// of the step's two paths, so that below the limit, where `allowed`
    /// is a constant, nothing here waits for the compares.
    #[inline(always)]
    fn finish(
        &mut self,
        limit: u32,
        window: u64,
        now: u64,
        record: Record,
        mut start: u32,
        allowed: bool,
    ) -> Step<u64> {
        let mut end = self.end();
        let cap = self.slots.len() as u32;
        let at = |i: u32| counter_slot(i, cap as usize);
        let count = end.wrapping_sub(start);
        let recorded = record.takes(allowed);
        if recorded {
            // An attempt at or before the newest recorded one is taken as
            // that one (the ring stays sorted).
            let leaves = now.saturating_add(window).max(self.newest);
            self.newest = leaves;
            if allowed && count == cap {
                // Growing happens only below the limit: allowed, no front.
                self.set_pos(start, end);
                self.resize(limit, cap as usize * 2);
                let (start, end) = (self.start(), self.end());
                self.slots[counter_slot(end, self.slots.len())] = leaves;
                self.set_pos(start, end.wrapping_add(1));
                return Step {
                    allowed,
                    count,
                    recorded,
                    front: None,
                };
            }
            // Denied (the window holds `limit`): the oldest of the last N
            // attempts is no longer needed; drop it (the append overwrites
            // it in place when the ring is exactly full).
            self.slots[at(end)] = leaves;
            start = start.wrapping_add(u32::from(!allowed));
            end = end.wrapping_add(1);
        }
        // Only a denial needs the front (its retry time); a denial means
        // the window holds `limit` attempts, at least one.
        let front = (!allowed).then(|| self.slots[at(start)]);
        self.set_pos(start, end);
        // At most a quarter used: maybe shrink. (Only dropping attempts
        // gets a window there. Testing "did this check drop any" too would
        // put a branch on the clock's jitter back on the hot path.)
        if end.wrapping_sub(start) < self.shrink_below {
            self.low(limit, window);
        }
        Step {
            allowed,
            count,
            recorded,
            front,
        }
    }

    /// A check found the ring at most a quarter used. It shrinks (to at
    /// most four times what it holds) only once it has stayed that low
    /// while the attempts it holds moved on by a whole window; until then
    /// every check comes here, and one that finds the ring fuller ends the
    /// wait.
    ///
    /// The clock here is the newest attempt's leaving time, not the check's
    /// time: passing that in (or whether the check recorded) would keep one
    /// more register live through every check. It
    /// is a clock while the ring holds an attempt (the newest is then still
    /// inside, so it leaves within a window after the check), and a check
    /// that finds the ring empty does not start the wait. So the wait is
    /// from the first low check that found an attempt held to a low check
    /// whose newest attempt leaves a window after that one's: a window or
    /// more of low checks in time, never less.
    ///
    /// Why wait: a window that drains and refills (a burst, a pause longer
    /// than the window, a burst) would otherwise give its memory back at
    /// the first check after the pause, then grow it again, doubling, as it
    /// refills, paying page faults and copies for each refill; waiting
    /// keeps its storage.
    #[cold]
    fn low(&mut self, limit: u32, window: u64) {
        let cap = self.slots.len() as u32;
        let held = self.len() as u32;
        if held >= Self::quarter(cap) {
            self.shrink_below = Self::quarter(cap);
            self.low_since = NOT_LOW;
        } else if held == 0 {
            // Nothing held, so no clock: nothing starts or ends here.
        } else if self.low_since == NOT_LOW {
            self.shrink_below = u32::MAX;
            self.low_since = self.newest;
        } else if self.newest.saturating_sub(self.low_since) >= window {
            self.resize(limit, held as usize * 2);
        }
    }

    /// Moves the contents into `cap` slots, rounded up to a power of two
    /// and kept between the contents and the limit's power of two.
    #[cold]
    fn resize(&mut self, limit: u32, cap: usize) {
        // A power of two (wrapping is a mask), at most the limit's.
        let most = (limit.min(MAX_HELD) as usize).next_power_of_two();
        let (start, end) = (self.start(), self.end());
        let held = end.wrapping_sub(start);
        let cap = cap.min(most).max(held as usize).next_power_of_two();
        let old = self.slots.len();
        let mut fresh = vec![0u64; cap].into_boxed_slice();
        for k in 0..held {
            fresh[k as usize] = self.slots[counter_slot(start.wrapping_add(k), old)];
        }
        *self = Self::with_slots(held, self.newest, fresh);
    }

    /// Attempts held.
    pub(crate) fn len(&self) -> usize {
        self.end().wrapping_sub(self.start()) as usize
    }

    /// A check of `cost` attempts at once (`1 <= cost <= limit`): allowed
    /// iff all of them fit beside what the window holds at `now`; if
    /// `record` says so for that verdict, all of them are recorded at `now`
    /// (at most `limit`: more at one instant would only push out each
    /// other). A denial's front is when the window has room for `cost`
    /// again: the leaving time of the attempt whose leaving brings the
    /// count down to `limit - cost`.
    #[cold]
    #[inline(never)]
    pub(crate) fn step_n(
        &mut self,
        limit: u32,
        window: u64,
        now: u64,
        cost: u32,
        record: Record,
    ) -> Step<u64> {
        let before = self.step(limit, window, now, Record::NONE);
        let allowed = u64::from(before.count) + u64::from(cost) <= u64::from(limit);
        let recorded = record.takes(allowed);
        if recorded {
            for _ in 0..cost.min(limit) {
                let _ = self.step(limit, window, now, Record::ALL);
            }
        }
        let front = (!allowed).then(|| {
            // The window holds more than `limit - cost`, newest last.
            let k = self.len() as u32 - (limit - cost) - 1;
            self.slots[counter_slot(self.start().wrapping_add(k), self.slots.len())]
        });
        Step {
            allowed,
            count: before.count,
            recorded,
            front,
        }
    }
}
