//! A compact ring of `u32` offsets: up to [`INLINE`] slots live inside the
//! key's table entry (no heap pointer to chase for quiet keys), beyond that
//! a boxed slice that grows geometrically up to the limit and shrinks after
//! a burst.

const INLINE: usize = 4;

#[derive(Debug, Clone)]
enum Slots {
    Inline([u32; INLINE]),
    Heap(Box<[u32]>),
}

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

/// What [`Ring::step`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) allowed: bool,
    /// Offsets inside the window before this attempt.
    pub(crate) count: u32,
    pub(crate) recorded: bool,
    /// The oldest offset after recording.
    pub(crate) front: Option<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct Ring {
    head: u32,
    len: u32,
    /// `slots`' length, kept here so the hot path needs no `match`.
    cap: u32,
    slots: Slots,
}

impl Default for Ring {
    fn default() -> Self {
        Self {
            head: 0,
            len: 0,
            cap: INLINE as u32,
            slots: Slots::Inline([0; INLINE]),
        }
    }
}

impl Ring {
    #[inline]
    fn buf(&self) -> &[u32] {
        match &self.slots {
            Slots::Inline(a) => a,
            Slots::Heap(b) => b,
        }
    }

    #[inline]
    fn buf_mut(&mut self) -> &mut [u32] {
        match &mut self.slots {
            Slots::Inline(a) => a,
            Slots::Heap(b) => b,
        }
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.cap as usize
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    fn index(&self, i: usize) -> usize {
        let cap = self.capacity();
        let j = self.head as usize + i;
        if j >= cap { j - cap } else { j }
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<u32> {
        (self.len > 0).then(|| self.buf()[self.head as usize])
    }

    #[inline]
    pub(crate) fn back(&self) -> Option<u32> {
        (self.len > 0).then(|| self.buf()[self.index(self.len as usize - 1)])
    }

    #[cfg(test)]
    pub(crate) fn pop_front(&mut self) {
        if self.len > 0 {
            let next = self.index(1) as u32;
            self.head = if self.len == 1 { 0 } else { next };
            self.len -= 1;
        }
    }

    /// Appends; grows (at most to `limit` slots) when full. The caller pops
    /// first when `len == limit`.
    #[inline]
    pub(crate) fn push_back(&mut self, value: u32, limit: usize) {
        if self.len() == self.capacity() {
            let cap = self.capacity();
            self.resize((cap * 2).clamp(INLINE, limit.max(cap + 1)));
        }
        let i = self.index(self.len as usize);
        self.buf_mut()[i] = value;
        self.len += 1;
    }

    /// One check, in offset space, with the slots borrowed once:
    ///
    /// 1. drops every offset `<= edge` (attempts that left the window);
    /// 2. the attempt is allowed iff fewer than `limit` remain;
    /// 3. if `record` says so for that verdict, appends `offset` (raised to
    ///    the newest offset, so the ring stays sorted), dropping the oldest
    ///    when the ring already holds `limit`.
    ///
    /// Returns the verdict, the count before recording and the oldest
    /// offset after recording.
    #[inline]
    pub(crate) fn step(
        &mut self,
        edge: Option<u64>,
        limit: u32,
        offset: u32,
        record: Record,
    ) -> Step {
        let cap = self.cap;
        let mut head = self.head;
        let mut len = self.len;
        let buf: &mut [u32] = match &mut self.slots {
            Slots::Inline(a) => a,
            Slots::Heap(b) => b,
        };
        let wrap = |i: u32| if i >= cap { i - cap } else { i };
        let mut expired = false;
        if let Some(edge) = edge {
            while len > 0 && u64::from(buf[head as usize]) <= edge {
                head = wrap(head + 1);
                len -= 1;
                expired = true;
            }
        }
        let count = len;
        let allowed = count < limit;
        let recorded = if allowed {
            record.allowed
        } else {
            record.denied
        };
        let mut grow = false;
        if recorded {
            let offset = if len > 0 {
                offset.max(buf[wrap(head + len - 1) as usize])
            } else {
                offset
            };
            if len >= limit {
                // Full: the oldest of the last N attempts is no longer
                // needed. Drop it and append (when the ring is exactly
                // full, that overwrites the oldest slot in place).
                buf[wrap(head + len) as usize] = offset;
                head = wrap(head + 1);
            } else if len < cap {
                buf[wrap(head + len) as usize] = offset;
                len += 1;
            } else {
                grow = true;
            }
            if grow {
                self.head = head;
                self.len = len;
                self.push_back(offset, limit as usize);
                return Step {
                    allowed,
                    count,
                    recorded,
                    front: self.front(),
                };
            }
        }
        let front = (len > 0).then(|| buf[head as usize]);
        self.head = if len == 0 { 0 } else { head };
        self.len = len;
        if expired {
            self.maybe_shrink();
        }
        Step {
            allowed,
            count,
            recorded,
            front,
        }
    }

    /// Moves the contents into a buffer of `cap` slots (`cap >= len`).
    #[cold]
    fn resize(&mut self, cap: usize) {
        let mut fresh = vec![0u32; cap.max(self.len())].into_boxed_slice();
        for (k, v) in self.iter().enumerate() {
            fresh[k] = v;
        }
        self.head = 0;
        self.cap = fresh.len().max(INLINE) as u32;
        self.slots = if fresh.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..fresh.len()].copy_from_slice(&fresh);
            Slots::Inline(a)
        } else {
            Slots::Heap(fresh)
        };
    }

    /// Gives memory back after a burst: keeps at most twice what is used.
    #[inline]
    pub(crate) fn maybe_shrink(&mut self) {
        let cap = self.capacity();
        if cap > 64 && self.len() < cap / 4 {
            self.resize(cap / 2);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).map(|i| self.buf()[self.index(i)])
    }

    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut u32)) {
        for i in 0..self.len() {
            let j = self.index(i);
            f(&mut self.buf_mut()[j]);
        }
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.slots {
            Slots::Inline(_) => 0,
            Slots::Heap(b) => b.len() * std::mem::size_of::<u32>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn ring_behaves_like_a_bounded_deque() {
        let mut ring = Ring::default();
        let mut model = VecDeque::new();
        let mut x = 12345u32;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let limit = 37;
            if x.is_multiple_of(3) {
                ring.pop_front();
                model.pop_front();
            } else {
                if model.len() == limit {
                    ring.pop_front();
                    model.pop_front();
                }
                ring.push_back(step, limit);
                model.push_back(step);
            }
            if x.is_multiple_of(101) {
                ring.maybe_shrink();
            }
            assert_eq!(ring.len(), model.len());
            assert_eq!(ring.front(), model.front().copied());
            assert_eq!(ring.back(), model.back().copied());
            assert!(ring.capacity() <= limit.max(INLINE));
        }
        assert!(ring.iter().eq(model.iter().copied()));
    }
}
