//! The storage of one key's window: a ring of `u32` offsets from a per-key
//! base, oldest first, in one of two shapes chosen to keep the key's table
//! entry small (24 bytes, so a `u64` key and its window fill half a cache
//! line; at 100k keys the table's size decides how many lookups miss):
//!
//! - [`Inline`]: up to three offsets inside the entry, no heap pointer to
//!   chase (most keys, most of the time);
//! - [`HeapRing`]: one boxed slice holding the base, the ring's head and
//!   length, then the slots, so a busy key costs one pointer chase. It grows
//!   geometrically up to the limit, shrinks after a burst, and goes back
//!   inline once the window is nearly empty.

/// Slots held inline.
const INLINE: u32 = 3;

/// Which verdicts record the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) allowed: bool,
    pub(crate) denied: bool,
}

impl Record {
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
pub(crate) struct Stepped<T> {
    pub(crate) step: Step<T>,
    cursor: Cursor,
    /// Slots dropped from the front.
    expired: u32,
    /// The ring was full below the limit: this value (already raised to
    /// the newest) must be appended after growing.
    grow: Option<T>,
}

/// A time in a ring slot: a `u32` offset from a key's base (keyed
/// windows) or plain `u64` nanoseconds (the single window).
pub(crate) trait Slot: Copy + Ord + Default {
    fn get(self) -> u64;
}

impl Slot for u32 {
    #[inline(always)]
    fn get(self) -> u64 {
        u64::from(self)
    }
}

impl Slot for u64 {
    #[inline(always)]
    fn get(self) -> u64 {
        self
    }
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
/// the work (measured).
#[inline(always)]
fn step<T: Slot, const POW2: bool>(
    buf: &mut [T],
    mut at: Cursor,
    edge: Option<u64>,
    limit: u32,
    value: T,
    record: Record,
) -> Stepped<T> {
    let cap = buf.len() as u32;
    // With a power-of-two capacity (`POW2`), wrapping is a mask.
    let wrap = |i: u32| {
        if POW2 {
            i & (cap - 1)
        } else if i >= cap {
            i - cap
        } else {
            i
        }
    };
    let mut expired = 0;
    if let Some(edge) = edge {
        while at.len > 0 && buf[at.head as usize].get() <= edge {
            at.head = wrap(at.head + 1);
            at.len -= 1;
            expired += 1;
        }
    }
    let count = at.len;
    let allowed = count < limit;
    let recorded = if allowed {
        record.allowed
    } else {
        record.denied
    };
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

/// The single window's ring: plain `u64` nanoseconds in a boxed slice of a
/// power-of-two length that grows (doubling, at most to the limit rounded
/// up to a power of two) and shrinks after a burst. A
/// process has one such window per limit, so exactness to the nanosecond
/// and speed win over the compactness keyed windows need.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timeline {
    at: Cursor,
    slots: Box<[u64]>,
}

impl Timeline {
    /// [`step`] at `now` (nanoseconds) for a window of `window` nanoseconds.
    #[inline(always)]
    pub(crate) fn step(&mut self, limit: u32, window: u64, now: u64, record: Record) -> Step<u64> {
        // An attempt at `a` counts at `now` iff a > now - window.
        let edge = now.checked_sub(window);
        let s = step::<u64, true>(&mut self.slots, self.at, edge, limit, now, record);
        self.at = s.cursor;
        if let Some(value) = s.grow {
            self.resize(limit, (self.slots.len() * 2).max(4));
            // Growing happens only below the limit: allowed, no front.
            self.at =
                step::<u64, true>(&mut self.slots, self.at, None, limit, value, Record::ALL).cursor;
            return s.step;
        }
        // Shrink once at most a quarter is used (the jitter-dependent
        // `expired` test last: it is rarely reached).
        if (self.at.len as usize) * 4 < self.slots.len() && self.slots.len() > 64 && s.expired > 0 {
            self.resize(limit, self.slots.len() / 2);
        }
        s.step
    }

    /// Moves the contents into `cap` slots, rounded up to a power of two
    /// and kept between the contents and the limit's power of two.
    #[cold]
    fn resize(&mut self, limit: u32, cap: usize) {
        // A power of two (wrapping is a mask), at most the limit's.
        let most = (limit.min(MAX_HELD) as usize).next_power_of_two();
        let cap = cap.min(most).max(self.at.len as usize).next_power_of_two();
        let mut fresh = vec![0u64; cap].into_boxed_slice();
        let old_cap = self.slots.len() as u32;
        for k in 0..self.at.len {
            fresh[k as usize] = self.slots[slot_of(self.at.head, k, old_cap)];
        }
        self.slots = fresh;
        self.at.head = 0;
    }

    /// Attempts held.
    pub(crate) fn len(&self) -> usize {
        self.at.len as usize
    }
}

/// Inline length; a `u8` enum so its unused values give [`Ring`] a niche
/// and the two shapes share 24 bytes without a separate tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
enum Len {
    #[default]
    Zero,
    One,
    Two,
    Three,
}

impl Len {
    #[inline]
    fn get(self) -> u32 {
        self as u32
    }

    #[inline]
    fn new(len: u32) -> Self {
        match len {
            0 => Self::Zero,
            1 => Self::One,
            2 => Self::Two,
            _ => Self::Three,
        }
    }
}

/// Up to three offsets inside the table entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inline {
    base: u64,
    slots: [u32; INLINE as usize],
    head: u8,
    len: Len,
}

/// Header words of a [`HeapRing`] before its slots.
const BASE_LO: usize = 0;
const BASE_HI: usize = 1;
const HEAD: usize = 2;
const LEN: usize = 3;
const HEADER: usize = 4;

/// Base, head, length and slots in one allocation: one pointer to chase.
#[derive(Debug, Clone)]
pub(crate) struct HeapRing(Box<[u32]>);

impl HeapRing {
    /// A ring of `cap` slots holding `items` (oldest first), from `base`.
    fn new(base: u64, items: impl ExactSizeIterator<Item = u32>, cap: u32) -> Self {
        let len = items.len() as u32;
        let mut words = vec![0u32; HEADER + cap.max(len) as usize].into_boxed_slice();
        for (slot, v) in words[HEADER..].iter_mut().zip(items) {
            *slot = v;
        }
        let mut ring = Self(words);
        ring.set_base(base);
        ring.set_cursor(Cursor { head: 0, len });
        ring
    }

    #[inline]
    fn base(&self) -> u64 {
        u64::from(self.0[BASE_LO]) | (u64::from(self.0[BASE_HI]) << 32)
    }

    #[inline]
    fn set_base(&mut self, base: u64) {
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

impl Inline {
    #[inline]
    fn cursor(&self) -> Cursor {
        Cursor {
            head: u32::from(self.head),
            len: self.len.get(),
        }
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
            Self::Inline(i) => i.base,
            Self::Heap(h) => h.base(),
        }
    }

    #[inline]
    pub(crate) fn set_base(&mut self, base: u64) {
        match self {
            Self::Inline(i) => i.base = base,
            Self::Heap(h) => h.set_base(base),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Inline(i) => i.len.get() as usize,
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
            Self::Inline(i) => (&i.slots, i.cursor()),
            Self::Heap(h) => (&h.0[HEADER..], h.cursor()),
        }
    }

    /// The `k`-th offset from the oldest (`k < len`).
    #[inline]
    fn get(&self, k: u32) -> u32 {
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
        let stepped = match self {
            Self::Inline(i) => {
                let at = i.cursor();
                let s = step::<u32, false>(&mut i.slots, at, edge, limit, offset, record);
                i.head = s.cursor.head as u8;
                i.len = Len::new(s.cursor.len);
                s
            }
            Self::Heap(h) => {
                let at = h.cursor();
                let s = step::<u32, false>(&mut h.0[HEADER..], at, edge, limit, offset, record);
                h.set_cursor(s.cursor);
                s
            }
        };
        if let Some(offset) = stepped.grow {
            // Growing happens only below the limit: allowed, no front.
            self.grow_and_push(offset, limit);
            return stepped.step;
        }
        if stepped.expired > 0 {
            self.maybe_shrink();
        }
        stepped.step
    }

    /// Appends `offset` to a full ring, moving to a bigger one (at most
    /// `limit` slots).
    #[cold]
    fn grow_and_push(&mut self, offset: u32, limit: u32) {
        let (base, cap) = match self {
            Self::Inline(i) => (i.base, 8),
            Self::Heap(h) => (h.base(), h.cap() * 2),
        };
        let cap = cap.clamp(INLINE + 1, limit.max(INLINE + 1));
        let items: Vec<u32> = self.iter().chain(std::iter::once(offset)).collect();
        *self = Self::Heap(HeapRing::new(base, items.into_iter(), cap));
    }

    /// Gives memory back: back inline once at most one offset is left (a
    /// key that calmed down), and a heap ring at most a quarter used is
    /// halved.
    #[inline]
    fn maybe_shrink(&mut self) {
        let Self::Heap(h) = self else { return };
        let (base, cap, len) = (h.base(), h.cap(), h.cursor().len);
        if len <= 1 {
            self.go_inline();
        } else if cap > 64 && len < cap / 4 {
            let items: Vec<u32> = self.iter().collect();
            *self = Self::Heap(HeapRing::new(base, items.into_iter(), cap / 2));
        }
    }

    #[cold]
    fn go_inline(&mut self) {
        let mut inline = Inline {
            base: self.base(),
            ..Inline::default()
        };
        let items: Vec<u32> = self.iter().collect();
        inline.slots[..items.len()].copy_from_slice(&items);
        inline.len = Len::new(items.len() as u32);
        *self = Self::Inline(inline);
    }

    /// Applies `f` to every offset.
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut u32)) {
        let (slots, at) = match self {
            Self::Inline(i) => {
                let at = i.cursor();
                (&mut i.slots[..], at)
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
            Self::Heap(h) => std::mem::size_of_val(&*h.0),
        }
    }
}

// The point of the two shapes: 24 bytes, no separate tag.
const _: () = assert!(std::mem::size_of::<Ring>() == 24);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

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
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
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

    #[test]
    fn a_calm_key_goes_back_inline() {
        let mut ring = Ring::default();
        for t in 0..10 {
            let _ = ring.step(None, 100, t, Record::ALL);
        }
        assert!(matches!(ring, Ring::Heap(_)));
        assert!(ring.heap_bytes() > 0);
        let _ = ring.step(Some(8), 100, 10, Record::NONE);
        assert!(matches!(ring, Ring::Inline(_)), "{ring:?}");
        assert_eq!(ring.heap_bytes(), 0);
        assert!(ring.iter().eq([9]));
    }
}
