//! [`HeapRing`]: the ring's storage once a key outgrows [`Inline`]: one
//! `ThinVec` of a header and the slots.

use thin_vec::ThinVec;

use super::Cursor;
use super::inline::MAX_OFFSET;

/// Header words of a [`HeapRing`] before its slots.
const BASE_LO: usize = 0;

const BASE_HI: usize = 1;

pub(super) const HEAD: usize = 2;

pub(super) const LEN: usize = 3;

/// Where the wait to go inline began (an offset), or [`NOT_WAITING`].
pub(super) const LOW: usize = 4;

pub(super) const HEADER: usize = 5;

/// [`LOW`] while a heap ring holds more than one attempt.
pub(super) const NOT_WAITING: u32 = u32::MAX;

/// Bytes of `thin_vec`'s own header (length and capacity) before a
/// [`HeapRing`]'s words, in the same allocation.
pub(super) const THIN_VEC_HEADER: usize = 2 * std::mem::size_of::<usize>();

/// Base, head, length and slots in one allocation behind a thin pointer:
/// one pointer to chase, and 8 bytes in the table entry.
#[derive(Debug, Clone)]
pub(crate) struct HeapRing(pub(super) ThinVec<u32>);

impl HeapRing {
    /// A ring of `cap` slots holding `items` (oldest first), from `base`.
    pub(super) fn new(base: u64, items: impl ExactSizeIterator<Item = u32>, cap: u32) -> Self {
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
    pub(super) fn base(&self) -> u64 {
        u64::from(self.0[BASE_LO]) | (u64::from(self.0[BASE_HI]) << 32)
    }

    /// Moves the base; a wait to go inline keeps its start in time (or
    /// starts at the new base, if it began before it).
    #[inline]
    pub(super) fn set_base(&mut self, base: u64) {
        let since = self.0[LOW];
        if since != NOT_WAITING {
            let at = self.base() + u64::from(since);
            self.0[LOW] = at.saturating_sub(base).min(u64::from(MAX_OFFSET)) as u32;
        }
        self.0[BASE_LO] = base as u32;
        self.0[BASE_HI] = (base >> 32) as u32;
    }

    #[inline]
    pub(super) fn cursor(&self) -> Cursor {
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
    pub(super) fn cap(&self) -> u32 {
        (self.0.len() - HEADER) as u32
    }
}
