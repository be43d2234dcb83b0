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

mod heap;
pub(crate) use heap::HeapRing;
use heap::{HEAD, HEADER, LEN, LOW, NOT_WAITING, THIN_VEC_HEADER};
mod inline;
pub(crate) use inline::{Inline, MAX_OFFSET};
mod timeline;
pub(crate) use timeline::Timeline;

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
mod tests;
