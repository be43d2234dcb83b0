//! [`Inline`]: a window of up to two attempts, held in the ring's own
//! sixteen bytes (most keys never need more).

use std::num::NonZeroU64;

use super::{INLINE, Record, Step};

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
    pub(super) slots: [u32; INLINE as usize],
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
pub(super) struct InlineStepped {
    pub(super) step: Step,
    /// Both slots were in use below the limit: this value (already raised
    /// to the newest) must be appended after growing.
    pub(super) grow: Option<u32>,
}

impl Inline {
    #[inline(always)]
    pub(super) fn base(&self) -> u64 {
        self.base1.get() - 1
    }

    #[inline(always)]
    pub(super) fn set_base(&mut self, base: u64) {
        // Bases are ticks, far below u64::MAX; saturating keeps this total.
        self.base1 = NonZeroU64::MIN.saturating_add(base);
    }

    #[inline(always)]
    pub(super) fn len(&self) -> u32 {
        u32::from(self.slots[0] != EMPTY) + u32::from(self.slots[1] != EMPTY)
    }

    /// [`step`] on the two inline slots: the same three rules, written for
    /// two so that a check of a key with few attempts (most keys) is a
    /// handful of compares and selects.
    #[inline(always)]
    pub(super) fn step(
        &mut self,
        edge: Option<u64>,
        limit: u32,
        value: u32,
        record: Record,
    ) -> InlineStepped {
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
