//! The storage of one key's window: a ring of `u32` offsets from a per-key
//! base, oldest first, in one of two shapes chosen to keep the key's table
//! entry small (16 bytes, so a `u64` key and its window take 24; at 100k
//! keys the table's size decides how many lookups miss):
//!
//! - [`Inline`]: up to two offsets inside the entry, no heap pointer to
//!   chase (most keys, most of the time);
//! - [`HeapRing`]: one thin vector holding the base, the ring's head and
//!   length, then the slots, so a busy key costs one pointer chase. It grows
//!   geometrically up to the limit, shrinks after a burst, and goes back
//!   inline once the window has stayed nearly empty for a whole window.
//!
//! The single window of a `Limiter` has its own ring, [`Timeline`]: whole
//! nanoseconds, no base, a power-of-two capacity.

use std::num::NonZeroU64;

use thin_vec::ThinVec;

/// Slots held inline.
const INLINE: u32 = 2;

/// Which verdicts record the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) allowed: bool,
    pub(crate) denied: bool,
}

impl Record {
    /// Whether an attempt with this verdict is recorded.
    #[inline(always)]
    pub(crate) fn takes(self, allowed: bool) -> bool {
        if allowed { self.allowed } else { self.denied }
    }

    /// Record whatever the verdict.
    pub(crate) const ALL: Self = Self {
        allowed: true,
        denied: true,
    };
    /// Record nothing (a peek).
    pub(crate) const NONE: Self = Self {
        allowed: false,
        denied: false,
    };
}

/// What one step of a ring found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step<T = u32> {
    pub(crate) allowed: bool,
    /// Slots inside the window before this attempt.
    pub(crate) count: u32,
    pub(crate) recorded: bool,
    /// For a denial, the oldest slot after recording (`None` if allowed).
    pub(crate) front: Option<T>,
}

/// A ring's position: the index of the oldest slot and the slot count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Cursor {
    head: u32,
    len: u32,
}

/// Where the `k`-th slot from the oldest sits in a ring of `cap` slots
/// whose oldest is at `head` (`head < cap`, `k < cap`).
#[inline]
fn slot_of(head: u32, k: u32, cap: u32) -> usize {
    let j = head + k;
    (if j >= cap { j - cap } else { j }) as usize
}

/// What [`step`] leaves for the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stepped {
    pub(crate) step: Step,
    cursor: Cursor,
    /// Slots dropped from the front.
    expired: u32,
    /// The ring was full below the limit: this value (already raised to
    /// the newest) must be appended after growing.
    grow: Option<u32>,
}

/// One check over a ring held in `buf` (capacity `buf.len()`):
///
/// 1. drops every slot `<= edge` (attempts that left the window);
/// 2. the attempt is allowed iff fewer than `limit` remain;
/// 3. if `record` says so for that verdict, appends `value` (raised to the
///    newest, so the ring stays sorted), dropping the oldest when the ring
///    already holds `limit`.
///
/// Always inlined: it is the whole hot path, and a call costs more than
/// the work.
#[inline(always)]
fn step(
    buf: &mut [u32],
    mut at: Cursor,
    edge: Option<u64>,
    limit: u32,
    value: u32,
    record: Record,
) -> Stepped {
    let cap = buf.len() as u32;
    let wrap = |i: u32| if i >= cap { i - cap } else { i };
    let mut expired = 0;
    if let Some(edge) = edge {
        while at.len > 0 && u64::from(buf[at.head as usize]) <= edge {
            at.head = wrap(at.head + 1);
            at.len -= 1;
            expired += 1;
        }
    }
    let count = at.len;
    let allowed = count < limit;
    let recorded = record.takes(allowed);
    let mut grow = None;
    if recorded {
        let value = if at.len > 0 {
            value.max(buf[wrap(at.head + at.len - 1) as usize])
        } else {
            value
        };
        if at.len >= limit {
            // Full: the oldest of the last N attempts is no longer needed.
            // Drop it and append (in place when the ring is exactly full).
            buf[wrap(at.head + at.len) as usize] = value;
            at.head = wrap(at.head + 1);
        } else if at.len < cap {
            buf[wrap(at.head + at.len) as usize] = value;
            at.len += 1;
        } else {
            grow = Some(value);
        }
    }
    // Only a denial needs the front (its retry time).
    let front = (!allowed && at.len > 0).then(|| buf[at.head as usize]);
    Stepped {
        step: Step {
            allowed,
            count,
            recorded,
            front,
        },
        cursor: at,
        expired,
        grow,
    }
}

/// The most attempts a [`Timeline`] holds (`u32` indices, a power-of-two
/// capacity): 2^31, 16 GiB of times. A larger limit acts as this one.
pub(crate) const MAX_HELD: u32 = 1 << 31;

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
    newest: u64,
    /// Slots, each the time its attempt leaves the window.
    slots: Box<[u64]>,
    /// A check holding fewer than this many calls [`low`](Self::low): a
    /// quarter of the capacity (zero while it is 64 or less), or every
    /// check (`u32::MAX`) while the ring is low.
    shrink_below: u32,
    /// When a check first found the ring at most a quarter used, while it
    /// still is ([`NOT_LOW`] otherwise).
    low_since: u64,
}

/// [`Timeline::low_since`] while the ring is more than a quarter used.
const NOT_LOW: u64 = u64::MAX;

/// Where counter `i` falls in a power-of-two ring of `cap` slots (which
/// divides 2^32, so the counters may wrap).
#[inline(always)]
fn counter_slot(i: u32, cap: usize) -> usize {
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
    fn start(&self) -> u32 {
        self.pos as u32
    }

    /// One past the newest attempt's counter.
    #[inline(always)]
    fn end(&self) -> u32 {
        (self.pos >> 32) as u32
    }

    #[inline(always)]
    fn set_pos(&mut self, start: u32, end: u32) {
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

/// An unused inline slot. Offsets stay below it ([`MAX_OFFSET`]), so it
/// sorts after every offset held.
const EMPTY: u32 = u32::MAX;

/// The largest offset a ring holds: a window rebases before an attempt's
/// offset from its base would pass it.
pub(crate) const MAX_OFFSET: u32 = EMPTY - 1;

/// Up to two offsets inside the table entry, oldest first, [`EMPTY`] after
/// the last one held. The base is stored plus one: never zero, the niche
/// that lets [`Ring`]'s heap shape (a thin pointer) sit beside it in 16
/// bytes with no tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inline {
    base1: NonZeroU64,
    slots: [u32; INLINE as usize],
}

impl Default for Inline {
    fn default() -> Self {
        Self {
            base1: NonZeroU64::MIN,
            slots: [EMPTY; INLINE as usize],
        }
    }
}

/// What [`Inline::step`] leaves for the caller.
#[derive(Debug, Clone, Copy)]
struct InlineStepped {
    step: Step,
    /// Both slots were in use below the limit: this value (already raised
    /// to the newest) must be appended after growing.
    grow: Option<u32>,
}

impl Inline {
    #[inline(always)]
    fn base(&self) -> u64 {
        self.base1.get() - 1
    }

    #[inline(always)]
    fn set_base(&mut self, base: u64) {
        // Bases are ticks, far below u64::MAX; saturating keeps this total.
        self.base1 = NonZeroU64::MIN.saturating_add(base);
    }

    #[inline(always)]
    fn len(&self) -> u32 {
        u32::from(self.slots[0] != EMPTY) + u32::from(self.slots[1] != EMPTY)
    }

    /// [`step`] on the two inline slots: the same three rules, written for
    /// two so that a check of a key with few attempts (most keys) is a
    /// handful of compares and selects.
    #[inline(always)]
    fn step(&mut self, edge: Option<u64>, limit: u32, value: u32, record: Record) -> InlineStepped {
        let [mut a, mut b] = self.slots;
        if let Some(edge) = edge {
            // Clamped, EMPTY stays above the edge; sorted, if the newer
            // left so did the older.
            let edge = edge.min(u64::from(MAX_OFFSET)) as u32;
            if b <= edge {
                (a, b) = (EMPTY, EMPTY);
            } else if a <= edge {
                (a, b) = (b, EMPTY);
            }
        }
        let count = u32::from(a != EMPTY) + u32::from(b != EMPTY);
        let allowed = count < limit;
        let recorded = record.takes(allowed);
        let mut grow = None;
        if recorded {
            // Raised to the newest held, so the slots stay sorted.
            let newest = match count {
                0 => 0,
                1 => a,
                _ => b,
            };
            let value = value.max(newest);
            match count {
                0 => a = value,
                // At the limit (1) the oldest of the last N is no longer
                // needed: replaced.
                1 if limit <= 1 => a = value,
                1 => b = value,
                // Full at the limit (2): drop the oldest, append.
                _ if limit <= 2 => (a, b) = (b, value),
                _ => grow = Some(value),
            }
        }
        self.slots = [a, b];
        InlineStepped {
            step: Step {
                allowed,
                count,
                recorded,
                // A denial means at least one is held: the oldest.
                front: (!allowed && a != EMPTY).then_some(a),
            },
            grow,
        }
    }
}

/// Header words of a [`HeapRing`] before its slots.
const BASE_LO: usize = 0;
const BASE_HI: usize = 1;
const HEAD: usize = 2;
const LEN: usize = 3;
/// Where the wait to go inline began (an offset), or [`NOT_WAITING`].
const LOW: usize = 4;
const HEADER: usize = 5;

/// [`LOW`] while a heap ring holds more than one attempt.
const NOT_WAITING: u32 = u32::MAX;

/// Bytes of `thin_vec`'s own header (length and capacity) before a
/// [`HeapRing`]'s words, in the same allocation.
const THIN_VEC_HEADER: usize = 2 * std::mem::size_of::<usize>();

/// Base, head, length and slots in one allocation behind a thin pointer:
/// one pointer to chase, and 8 bytes in the table entry.
#[derive(Debug, Clone)]
pub(crate) struct HeapRing(ThinVec<u32>);

impl HeapRing {
    /// A ring of `cap` slots holding `items` (oldest first), from `base`.
    fn new(base: u64, items: impl ExactSizeIterator<Item = u32>, cap: u32) -> Self {
        let len = items.len() as u32;
        let words = HEADER + cap.max(len) as usize;
        let mut v = ThinVec::with_capacity(words);
        v.extend([0, 0, 0, 0, NOT_WAITING]);
        v.extend(items);
        v.resize(words, 0);
        let mut ring = Self(v);
        ring.set_base(base);
        ring.set_cursor(Cursor { head: 0, len });
        ring
    }

    #[inline]
    fn base(&self) -> u64 {
        u64::from(self.0[BASE_LO]) | (u64::from(self.0[BASE_HI]) << 32)
    }

    /// Moves the base; a wait to go inline keeps its start in time (or
    /// starts at the new base, if it began before it).
    #[inline]
    fn set_base(&mut self, base: u64) {
        let since = self.0[LOW];
        if since != NOT_WAITING {
            let at = self.base() + u64::from(since);
            self.0[LOW] = at.saturating_sub(base).min(u64::from(MAX_OFFSET)) as u32;
        }
        self.0[BASE_LO] = base as u32;
        self.0[BASE_HI] = (base >> 32) as u32;
    }

    #[inline]
    fn cursor(&self) -> Cursor {
        Cursor {
            head: self.0[HEAD],
            len: self.0[LEN],
        }
    }

    #[inline]
    fn set_cursor(&mut self, at: Cursor) {
        self.0[HEAD] = at.head;
        self.0[LEN] = at.len;
    }

    #[inline]
    fn cap(&self) -> u32 {
        (self.0.len() - HEADER) as u32
    }
}

/// One key's offsets, inline or on the heap.
#[derive(Debug, Clone)]
pub(crate) enum Ring {
    Inline(Inline),
    Heap(HeapRing),
}

impl Default for Ring {
    fn default() -> Self {
        Self::Inline(Inline::default())
    }
}

impl Ring {
    #[inline]
    pub(crate) fn base(&self) -> u64 {
        match self {
            Self::Inline(i) => i.base(),
            Self::Heap(h) => h.base(),
        }
    }

    #[inline]
    pub(crate) fn set_base(&mut self, base: u64) {
        match self {
            Self::Inline(i) => i.set_base(base),
            Self::Heap(h) => h.set_base(base),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Inline(i) => i.len() as usize,
            Self::Heap(h) => h.0[LEN] as usize,
        }
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Self::Inline(_) => INLINE as usize,
            Self::Heap(h) => h.cap() as usize,
        }
    }

    /// The slots and the cursor over them.
    #[inline]
    fn view(&self) -> (&[u32], Cursor) {
        match self {
            Self::Inline(i) => (
                &i.slots,
                Cursor {
                    head: 0,
                    len: i.len(),
                },
            ),
            Self::Heap(h) => (&h.0[HEADER..], h.cursor()),
        }
    }

    /// The `k`-th offset from the oldest (`k < len`).
    #[inline]
    pub(crate) fn get(&self, k: u32) -> u32 {
        let (slots, at) = self.view();
        slots[slot_of(at.head, k, slots.len() as u32)]
    }

    /// The offsets, oldest first.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = u32> + '_ {
        (0..self.len() as u32).map(|k| self.get(k))
    }

    /// The newest offset.
    pub(crate) fn back(&self) -> Option<u32> {
        let len = self.len() as u32;
        (len > 0).then(|| self.get(len - 1))
    }

    /// See [`step`]. Grows (inline to heap, or a bigger heap ring) when an
    /// attempt must be kept and every slot is in use; shrinks after
    /// expiring.
    #[inline]
    pub(crate) fn step(
        &mut self,
        edge: Option<u64>,
        limit: u32,
        offset: u32,
        record: Record,
    ) -> Step {
        match self {
            Self::Inline(i) => {
                let s = i.step(edge, limit, offset, record);
                if let Some(offset) = s.grow {
                    self.grow_and_push(offset, limit);
                }
                s.step
            }
            Self::Heap(h) => {
                // One slice for the whole step: each index of the vector
                // itself would load its length from the heap again.
                let (header, buf) = h.0.split_at_mut(HEADER);
                let at = Cursor {
                    head: header[HEAD],
                    len: header[LEN],
                };
                let s = step(buf, at, edge, limit, offset, record);
                (header[HEAD], header[LEN]) = (s.cursor.head, s.cursor.len);
                if let Some(offset) = s.grow {
                    // Growing happens only below the limit: allowed, no
                    // front.
                    self.grow_and_push(offset, limit);
                } else if s.expired > 0 || s.cursor.len <= 2 {
                    // (At two, a wait to go inline ends.)
                    self.maybe_shrink(edge, offset);
                }
                s.step
            }
        }
    }

    /// Appends `offset` to a full ring, moving to a bigger one (at most
    /// `limit` slots).
    #[cold]
    fn grow_and_push(&mut self, offset: u32, limit: u32) {
        let (base, cap) = match self {
            Self::Inline(i) => (i.base(), 8),
            Self::Heap(h) => (h.base(), h.cap() * 2),
        };
        let cap = cap.clamp(INLINE + 1, limit.max(INLINE + 1));
        let items: Vec<u32> = self.iter().chain(std::iter::once(offset)).collect();
        *self = Self::Heap(HeapRing::new(base, items.into_iter(), cap));
    }

    /// Gives memory back: back inline once at most one offset has been
    /// left for a whole window (a key that calmed down), and a heap ring
    /// at most a quarter used is halved. `now` is the check's offset and
    /// `edge` its edge, as [`step`] takes them.
    ///
    /// Why wait: a key that bursts, pauses for longer than the window and
    /// bursts again would otherwise give its ring back at the first check
    /// after the pause and grow it again, doubling, as it refills (four
    /// allocations and copies for 30 attempts), all under its shard's
    /// lock. Waiting keeps the ring; a key that stays calm goes inline at
    /// its first check a window on. (A wait that a rebase ends, after
    /// hours idle, counts from the old base: long past.)
    #[inline]
    fn maybe_shrink(&mut self, edge: Option<u64>, now: u32) {
        let Self::Heap(h) = self else { return };
        let (base, cap, len) = (h.base(), h.cap(), h.cursor().len);
        if len <= 1 {
            let since = h.0[LOW];
            if since == NOT_WAITING {
                h.0[LOW] = now;
            } else if edge.is_some_and(|edge| u64::from(since) <= edge) {
                self.go_inline();
            }
            return;
        }
        h.0[LOW] = NOT_WAITING;
        if cap > 64 && len < cap / 4 {
            let items: Vec<u32> = self.iter().collect();
            *self = Self::Heap(HeapRing::new(base, items.into_iter(), cap / 2));
        }
    }

    /// Moves a ring holding at most [`INLINE`] offsets inline.
    #[cold]
    fn go_inline(&mut self) {
        let mut inline = Inline::default();
        inline.set_base(self.base());
        for (slot, offset) in inline.slots.iter_mut().zip(self.iter()) {
            *slot = offset;
        }
        debug_assert!(self.len() <= INLINE as usize);
        *self = Self::Inline(inline);
    }

    /// Applies `f` to every offset.
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut u32)) {
        let (slots, at) = match self {
            Self::Inline(i) => {
                let len = i.len();
                (&mut i.slots[..], Cursor { head: 0, len })
            }
            Self::Heap(h) => {
                let at = h.cursor();
                (&mut h.0[HEADER..], at)
            }
        };
        let cap = slots.len() as u32;
        for k in 0..at.len {
            f(&mut slots[slot_of(at.head, k, cap)]);
        }
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Self::Inline(_) => 0,
            Self::Heap(h) => THIN_VEC_HEADER + h.0.capacity() * std::mem::size_of::<u32>(),
        }
    }
}

// The point of the two shapes: 16 bytes, no separate tag, so a `u64` key
// and its window take 24.
const _: () = assert!(std::mem::size_of::<Ring>() == 16);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A small deterministic pseudo-random sequence for the deque tests.
    fn xorshift(x: &mut u32) -> u32 {
        *x ^= *x << 13;
        *x ^= *x >> 17;
        *x ^= *x << 5;
        *x
    }

    /// The ring against a deque, through growth, rotation, expiry, shrinking
    /// and the move back inline.
    #[test]
    fn ring_behaves_like_a_bounded_sorted_deque() {
        for limit in [1u32, 2, 3, 4, 5, 37, 300] {
            let mut ring = Ring::default();
            let mut model: VecDeque<u32> = VecDeque::new();
            let mut x = 12345u32;
            let mut now = 0u32;
            for _ in 0..20_000u32 {
                let x = xorshift(&mut x);
                now += x % 7;
                // Expire everything at or before `edge`.
                let edge = if x.is_multiple_of(11) {
                    Some(u64::from(now.saturating_sub(x % 200)))
                } else {
                    None
                };
                let record = if x.is_multiple_of(5) {
                    Record::NONE
                } else {
                    Record::ALL
                };
                let step = ring.step(edge, limit, now, record);
                if let Some(edge) = edge {
                    while model.front().is_some_and(|&v| u64::from(v) <= edge) {
                        model.pop_front();
                    }
                }
                assert_eq!(step.count as usize, model.len());
                assert_eq!(step.allowed, (model.len() as u32) < limit);
                if record == Record::ALL {
                    if model.len() as u32 >= limit {
                        model.pop_front();
                    }
                    model.push_back(now);
                }
                let front = if step.allowed {
                    None
                } else {
                    model.front().copied()
                };
                assert_eq!(step.front, front);
                assert!(ring.iter().eq(model.iter().copied()), "limit {limit}");
                assert!(ring.capacity() <= (limit as usize).max(INLINE as usize + 1));
            }
        }
    }

    /// The single window against a deque (the full rule), through growth,
    /// expiry in both modes (below and at the limit), shrinking, times
    /// earlier than the newest, peeks and allowed-only recording, and
    /// counters that wrap past `u32::MAX`.
    #[test]
    fn timeline_behaves_like_a_bounded_sorted_deque() {
        let records = [
            Record::ALL,
            Record::NONE,
            Record {
                allowed: true,
                denied: false,
            },
        ];
        for limit in [1u32, 2, 3, 4, 5, 37, 300, 1000] {
            for origin in [0, u32::MAX - 40] {
                let mut line = Timeline::new(limit);
                line.set_pos(origin, origin);
                let mut model: VecDeque<u64> = VecDeque::new();
                let window = 500u64;
                let mut x = 12345u32 ^ limit;
                let mut now = 0u64;
                let mut newest = 0u64;
                for _ in 0..30_000u32 {
                    let x = xorshift(&mut x);
                    // Mostly small steps, sometimes none, sometimes a long
                    // gap (expiring many at once), sometimes back in time.
                    match x % 64 {
                        0 => now += 2 * window,
                        1 => now = now.saturating_sub(u64::from(x % 50)),
                        2 => now = now.saturating_sub(3 * window),
                        _ => now += u64::from(x % 5),
                    }
                    let record = records[(x >> 8) as usize % 3];
                    let step = line.step(limit, window, now, record);
                    if let Some(edge) = now.checked_sub(window) {
                        while model.front().is_some_and(|&v| v <= edge) {
                            model.pop_front();
                        }
                    }
                    let allowed = (model.len() as u32) < limit;
                    assert_eq!(step.count as usize, model.len());
                    assert_eq!(step.allowed, allowed);
                    let recorded = if allowed {
                        record.allowed
                    } else {
                        record.denied
                    };
                    assert_eq!(step.recorded, recorded);
                    if recorded {
                        // Earlier than the latest recorded: taken as that.
                        let value = now.max(newest);
                        newest = value;
                        if model.len() as u32 >= limit {
                            model.pop_front();
                        }
                        model.push_back(value);
                    }
                    // Slots hold when each attempt leaves: its time plus
                    // the window.
                    let front = if allowed {
                        None
                    } else {
                        model.front().map(|t| t + window)
                    };
                    assert_eq!(step.front, front);
                    assert_eq!(line.len(), model.len());
                    let held = (0..line.end().wrapping_sub(line.start())).map(|k| {
                        line.slots[counter_slot(line.start().wrapping_add(k), line.slots.len())]
                    });
                    assert!(held.eq(model.iter().map(|t| t + window)), "limit {limit}");
                    // The newest recorded is kept, held or not.
                    if newest > 0 {
                        assert_eq!(line.newest, newest + window);
                    }
                    assert!(line.slots.len() <= (limit as usize).next_power_of_two());
                }
            }
        }
    }

    #[test]
    fn an_earlier_time_is_taken_as_the_latest_recorded_after_the_window_empties() {
        let mut line = Timeline::new(1000);
        for t in 1..=200 {
            let _ = line.step(1000, 100, t, Record::ALL);
        }
        // Everything leaves; a window later the ring shrinks (new storage,
        // no old slots).
        let _ = line.step(1000, 100, 10_000, Record::NONE);
        let _ = line.step(1000, 100, 10_100, Record::NONE);
        assert_eq!(line.len(), 0);
        assert!(line.slots.len() < 256);
        // A caller's earlier time is recorded as the latest recorded one
        // (the slot holds when it leaves: 200 + the window).
        let _ = line.step(1000, 100, 150, Record::ALL);
        assert_eq!(
            line.slots[counter_slot(line.start(), line.slots.len())],
            300
        );
    }

    #[test]
    fn a_timeline_of_64_slots_or_fewer_never_shrinks() {
        // Its storage is small enough to keep: a burst of 40, then one
        // attempt a window for several windows.
        let mut line = Timeline::new(64);
        for t in 0..40 {
            let _ = line.step(64, 1_000, t, Record::ALL);
        }
        assert_eq!(line.slots.len(), 64);
        for w in 1..6 {
            let _ = line.step(64, 1_000, w * 2_000, Record::ALL);
        }
        assert_eq!(line.len(), 1);
        assert_eq!(line.slots.len(), 64);
    }

    #[test]
    fn a_timeline_shrinks_after_a_burst() {
        let mut line = Timeline::new(10_000);
        for t in 0..5_000 {
            let _ = line.step(10_000, 1_000_000, t, Record::ALL);
        }
        assert_eq!(line.slots.len(), 8192);
        // The burst has left the window. Calm checks keep the storage for a
        // window...
        for t in 0..10 {
            let _ = line.step(10_000, 1_000_000, 2_000_000 + t, Record::ALL);
        }
        assert_eq!(line.slots.len(), 8192);
        // ...and the first one a whole window after the first calm check
        // gives it back, down to at most four times what it holds.
        let _ = line.step(10_000, 1_000_000, 2_999_999, Record::ALL);
        assert_eq!(line.slots.len(), 8192);
        let _ = line.step(10_000, 1_000_000, 3_000_000, Record::ALL);
        // (The calm check at 2,000,000 has just left.)
        assert_eq!(line.len(), 11);
        assert_eq!(line.slots.len(), 32);
        // Every attempt still inside is there, oldest first, as when each
        // leaves.
        let held: Vec<u64> = (0..11)
            .map(|k| line.slots[counter_slot(line.start().wrapping_add(k), line.slots.len())])
            .collect();
        let mut want: Vec<u64> = (1..10).map(|t| 3_000_000 + t).collect();
        want.extend([3_999_999, 4_000_000]);
        assert_eq!(held, want);
    }

    #[test]
    fn a_timeline_refilled_within_a_window_of_draining_keeps_its_storage() {
        let mut line = Timeline::new(10_000);
        let burst = |line: &mut Timeline, from: u64| {
            for t in from..from + 5_000 {
                let _ = line.step(10_000, 1_000_000, t, Record::ALL);
            }
        };
        burst(&mut line, 0);
        assert_eq!(line.slots.len(), 8192);
        let storage = line.slots.as_ptr();
        // A pause longer than the window drains it; the next burst, less
        // than a window after the first check that found it low, refills
        // the same storage: nothing shrinks, nothing grows. A peek at the
        // empty ring just before does not start the wait.
        let _ = line.step(10_000, 1_000_000, 1_999_000, Record::NONE);
        burst(&mut line, 2_000_000);
        assert_eq!(line.len(), 5_000);
        assert_eq!(line.slots.as_ptr(), storage);
        // Once it is fuller than a quarter again, the wait starts over: a
        // second pause and burst keep it too, however long after the first.
        burst(&mut line, 90_000_000);
        assert_eq!(line.slots.as_ptr(), storage);
        assert_eq!(line.low_since, NOT_LOW);
    }

    /// A ring for `limit` holding attempts at 0, 1, ..., `n - 1`.
    fn filled(limit: u32, n: u32) -> Ring {
        let mut ring = Ring::default();
        for t in 0..n {
            let _ = ring.step(None, limit, t, Record::ALL);
        }
        ring
    }

    /// A ring for `limit` holding attempts at `offsets`.
    fn holding(limit: u32, offsets: impl IntoIterator<Item = u32>) -> Ring {
        let mut ring = Ring::default();
        for offset in offsets {
            let _ = ring.step(None, limit, offset, Record::ALL);
        }
        ring
    }

    /// A key checked again after longer than its offsets span (hours, in
    /// 1 µs ticks) first drops what left against an edge past `u32::MAX`:
    /// every held attempt leaves (the edge is not cut to its low 32 bits,
    /// which here would keep them), and no empty inline slot is taken for
    /// one.
    #[test]
    fn an_edge_past_every_offset_drops_what_is_held_and_nothing_else() {
        let edge = Some((1u64 << 32) + 50);
        let cases: [(u32, &[u32]); 6] = [
            (3, &[]),
            (3, &[100]),
            (3, &[100, 200]),
            (1, &[100]),
            (2, &[100, 200]),
            (10, &[100, 200, 300, 400, 500]),
        ];
        for (limit, offsets) in cases {
            let mut ring = holding(limit, offsets.iter().copied());
            let step = ring.step(edge, limit, 0, Record::NONE);
            assert_eq!(
                (step.count, step.allowed, ring.len()),
                (0, true, 0),
                "limit {limit}, holding {offsets:?}"
            );
            // (A heap ring waits a window before going inline.)
            assert_eq!(
                matches!(ring, Ring::Inline(_)),
                offsets.len() <= 2,
                "{ring:?}"
            );
        }
        // Below every offset, nothing leaves; an empty slot is never held.
        let mut ring = holding(3, [4]);
        let step = ring.step(Some(3), 3, 5, Record::ALL);
        assert_eq!((step.count, ring.len()), (1, 2));
        assert!(ring.iter().eq([4, 5]));
    }

    /// Whether `ring` is on the heap, in the allocation at `ptr`.
    fn heap_at(ring: &Ring) -> Option<*const u32> {
        match ring {
            Ring::Heap(h) => Some(h.0.as_ptr()),
            Ring::Inline(_) => None,
        }
    }

    /// Down to one attempt, a key goes back inline at its first check a
    /// whole window after the one that found it so (each check here: its
    /// offset, and an edge a window of 2 before it).
    #[test]
    fn a_calm_key_goes_back_inline_a_window_on() {
        let mut ring = filled(100, 10);
        assert!(ring.heap_bytes() > 0);
        let storage = heap_at(&ring);
        // Down to one at offset 10: the wait starts.
        let _ = ring.step(Some(8), 100, 10, Record::NONE);
        assert!(ring.iter().eq([9]));
        assert_eq!(heap_at(&ring), storage);
        // Not yet a window on (the edge, 9, is before 10).
        let _ = ring.step(Some(9), 100, 11, Record::NONE);
        assert_eq!(heap_at(&ring), storage);
        // A window on: inline, the heap block given back.
        let _ = ring.step(Some(10), 100, 12, Record::ALL);
        assert!(matches!(ring, Ring::Inline(_)), "{ring:?}");
        assert_eq!(ring.heap_bytes(), 0);
        assert!(ring.iter().eq([12]));

        // Two held is not calm: no wait starts.
        let mut ring = filled(100, 10);
        let _ = ring.step(Some(7), 100, 10, Record::NONE);
        assert!(ring.iter().eq([8, 9]));
        let _ = ring.step(Some(7), 100, 20, Record::NONE);
        // Both leave at 40: the wait starts there, not at 10 or 20 (which
        // would be a window before).
        let _ = ring.step(Some(30), 100, 40, Record::NONE);
        assert_eq!(ring.len(), 0);
        assert!(matches!(ring, Ring::Heap(_)), "{ring:?}");
    }

    /// A burst, a pause longer than the window, a burst: the second burst
    /// refills the same heap block, with nothing given back or grown.
    #[test]
    fn a_key_refilled_after_a_pause_keeps_its_ring() {
        let mut ring = filled(100, 40);
        let (storage, capacity) = (heap_at(&ring), ring.capacity());
        assert_eq!(capacity, 64);
        // Every attempt has left by the first check after the pause.
        for t in 1_000..1_040 {
            let step = ring.step(Some(900), 100, t, Record::ALL);
            assert_eq!(step.count, t - 1_000);
            assert_eq!((heap_at(&ring), ring.capacity()), (storage, capacity));
        }
        assert!(ring.iter().eq(1_000..1_040));
        // Fuller than one again, the wait is over: a later drain starts a
        // new one, from its own check.
        let _ = ring.step(Some(1_100), 100, 1_200, Record::NONE);
        assert_eq!(heap_at(&ring), storage);
        let _ = ring.step(Some(1_199), 100, 1_201, Record::NONE);
        assert_eq!(heap_at(&ring), storage);
        let _ = ring.step(Some(1_200), 100, 1_202, Record::NONE);
        assert!(matches!(ring, Ring::Inline(_)), "{ring:?}");
    }

    /// A key with one attempt a window, after a burst, is back inline by
    /// its second check.
    #[test]
    fn a_key_with_one_attempt_a_window_goes_inline() {
        let mut ring = filled(100, 10);
        let _ = ring.step(Some(100), 100, 110, Record::ALL);
        assert!(matches!(ring, Ring::Heap(_)));
        let _ = ring.step(Some(210), 100, 220, Record::ALL);
        assert!(matches!(ring, Ring::Inline(_)), "{ring:?}");
        assert!(ring.iter().eq([220]));
    }

    /// Moving the base keeps a wait's start where it was in time.
    #[test]
    fn a_wait_to_go_inline_survives_a_new_base() {
        let mut ring = filled(100, 10);
        let _ = ring.step(Some(8), 100, 10, Record::NONE);
        ring.set_base(4);
        // The wait began at 10 from base 0: 6 from base 4; the attempt is
        // at 9 - 4 = 5 (a rebase moves the offsets itself).
        ring.for_each_mut(|o| *o -= 4);
        let _ = ring.step(Some(5), 100, 7, Record::NONE);
        assert!(matches!(ring, Ring::Heap(_)));
        let _ = ring.step(Some(6), 100, 8, Record::NONE);
        assert!(matches!(ring, Ring::Inline(_)), "{ring:?}");
    }

    /// Growth doubles (so appending stays amortised O(1)), up to the limit.
    #[test]
    fn a_ring_grows_by_doubling_up_to_the_limit() {
        let mut ring = Ring::default();
        let mut capacities = vec![ring.capacity()];
        for t in 0..150 {
            let _ = ring.step(None, 100, t, Record::ALL);
            if ring.capacity() != *capacities.last().unwrap() {
                capacities.push(ring.capacity());
            }
        }
        assert_eq!(capacities, [2, 8, 16, 32, 64, 100]);
        assert_eq!(ring.len(), 100);
    }

    /// A busy key's ring gives memory back after its burst, one halving
    /// per check that drops attempts, down to 64 slots.
    #[test]
    fn a_ring_shrinks_after_a_burst() {
        let mut ring = filled(1_000, 300);
        assert_eq!(ring.capacity(), 512);
        let _ = ring.step(Some(290), 1_000, 300, Record::NONE);
        assert_eq!((ring.len(), ring.capacity()), (9, 256));
        for (edge, capacity) in [(291, 128), (292, 64), (293, 64)] {
            let _ = ring.step(Some(edge), 1_000, 300, Record::NONE);
            assert_eq!(ring.capacity(), capacity, "edge {edge}");
        }
        assert!(ring.iter().eq(294..300));
    }

    #[test]
    fn the_newest_of_a_ring_is_its_last_offset_and_none_when_empty() {
        assert_eq!(Ring::default().back(), None);
        assert_eq!(filled(100, 10).back(), Some(9));
        assert_eq!(filled(1_000, 300).back(), Some(299));
    }

    #[test]
    fn a_ring_more_than_a_quarter_used_keeps_its_size() {
        // Halved only below a quarter: a quarter exactly (128 of 512), or
        // more, stays.
        for (edge, held) in [(99, 200), (171, 128)] {
            let mut ring = filled(1_000, 300);
            let _ = ring.step(Some(edge), 1_000, 300, Record::NONE);
            assert_eq!((ring.len(), ring.capacity()), (held, 512), "edge {edge}");
        }
        let mut ring = filled(1_000, 300);
        let _ = ring.step(Some(172), 1_000, 300, Record::NONE);
        assert_eq!((ring.len(), ring.capacity()), (127, 256));
    }
}
