//! One key's trailing window: the timestamps of the attempts that still
//! count, oldest first, as compact ticks from a per-key base.
//!
//! Under the default policy every attempt is recorded, so the decision needs
//! only the last N attempts: allow iff fewer than N are inside the window.
//! The ring never holds an attempt that left the window, so it grows only to
//! the number of attempts actually inside it (at most N).

use std::time::Duration;

use crate::ring::{MAX_OFFSET, Record, Ring, Step};

/// Timing parameters shared by every window of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Maximum attempts in a window.
    pub(crate) limit: u32,
    /// Window length in ticks.
    pub(crate) window: u64,
    /// Tick length in nanoseconds.
    pub(crate) tick_nanos: u64,
}

/// The largest window, in ticks, that fits a `u32` offset with room for a
/// full window of history after a rebase.
const MAX_WINDOW_TICKS: u64 = 1 << 31;

impl Geometry {
    /// Picks the finest tick (1 µs, 1 ms or 1 s) in which the window fits a
    /// `u32` offset; the window is rounded UP to whole ticks (stricter).
    pub(crate) fn new(limit: u32, window: Duration) -> Self {
        let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1);
        let tick_nanos = [1_000, 1_000_000, 1_000_000_000]
            .into_iter()
            .find(|t| nanos.div_ceil(*t) < MAX_WINDOW_TICKS)
            .unwrap_or(1_000_000_000);
        let window = nanos.div_ceil(tick_nanos).clamp(1, MAX_WINDOW_TICKS - 1);
        Self {
            limit,
            window,
            tick_nanos,
        }
    }

    /// `(floor, ceil)` of `nanos` in ticks. "Now" rounds DOWN and a
    /// recorded attempt rounds UP, so attempts never leave the window early.
    /// Matching on the three tick sizes lets the compiler turn each division
    /// into a multiply (a `u64` division is the slowest step of a check).
    #[inline]
    pub(crate) fn ticks(&self, nanos: u64) -> (u64, u64) {
        let floor = match self.tick_nanos {
            1_000 => nanos / 1_000,
            1_000_000 => nanos / 1_000_000,
            _ => nanos / 1_000_000_000,
        };
        let ceil = floor + u64::from(floor * self.tick_nanos != nanos);
        (floor, ceil)
    }
}

/// One key's window: the ring holds the base and the offsets.
#[derive(Debug, Clone, Default)]
pub(crate) struct Window {
    ring: Ring,
}

impl Window {
    #[inline]
    fn abs(&self, offset: u32) -> u64 {
        self.ring.base() + u64::from(offset)
    }

    /// Whether the window holds no attempt at `now`.
    pub(crate) fn is_drained(&self, g: &Geometry, now: u64) -> bool {
        match self.ring.back() {
            None => true,
            Some(newest) => self.abs(newest) + g.window <= now,
        }
    }

    /// The tick at which the oldest attempt held leaves the window.
    pub(crate) fn oldest_leaves(&self, g: &Geometry) -> Option<u64> {
        (self.ring.len() > 0).then(|| self.abs(self.ring.get(0)) + g.window)
    }

    /// The tick after which this key is drained.
    pub(crate) fn drained_at(&self, g: &Geometry) -> u64 {
        self.ring.back().map_or(0, |n| self.abs(n) + g.window)
    }

    /// One check at `now` (ticks, rounded down): drops attempts that left
    /// the window, decides, and records the attempt at `at` (ticks, rounded
    /// up) if `record` says so for the verdict. An `at` earlier than the
    /// newest recorded attempt is taken as the newest (time never goes
    /// backwards within a key). A denial's front is in ticks.
    #[inline]
    pub(crate) fn step(&mut self, g: &Geometry, now: u64, at: u64, record: Record) -> Step<u64> {
        let mut base = self.ring.base();
        if self.ring.len() == 0 {
            base = at.saturating_sub(g.window);
            self.ring.set_base(base);
        } else if at.saturating_sub(base) > u64::from(MAX_OFFSET) {
            base = self.expire_and_rebase(g, now, at);
        }
        // An attempt at tick `a` counts at `now` iff a > now - window.
        let edge = now.checked_sub(g.window).and_then(|e| e.checked_sub(base));
        let offset = at.saturating_sub(base) as u32;
        let step = self.ring.step(edge, g.limit, offset, record);
        Step {
            allowed: step.allowed,
            count: step.count,
            recorded: step.recorded,
            front: step.front.map(|f| self.abs(f)),
        }
    }

    /// A check of `cost` attempts at once (`1 <= cost <= limit`), as
    /// [`Timeline::step_n`](crate::ring::Timeline::step_n) is for the single
    /// window: allowed iff all fit; recorded together; a denial's front (in
    /// ticks) is the attempt whose leaving leaves room for `cost`.
    #[cold]
    pub(crate) fn step_n(
        &mut self,
        g: &Geometry,
        now: u64,
        at: u64,
        cost: u32,
        record: Record,
    ) -> Step<u64> {
        let before = self.step(g, now, at, Record::NONE);
        let allowed = u64::from(before.count) + u64::from(cost) <= u64::from(g.limit);
        let recorded = record.takes(allowed);
        if recorded {
            for _ in 0..cost.min(g.limit) {
                let _ = self.step(g, now, at, Record::ALL);
            }
        }
        let front = (!allowed).then(|| {
            // The newest `limit - cost + 1` or more are inside the window.
            let k = self.ring.len() as u32 - (g.limit - cost) - 1;
            self.abs(self.ring.get(k))
        });
        Step {
            allowed,
            count: before.count,
            recorded,
            front,
        }
    }

    /// Makes room for `at`: drops what left the window at `now`, then moves
    /// the base so `at` fits a `u32` offset. What is left is inside the
    /// window, so every offset stays representable.
    #[cold]
    fn expire_and_rebase(&mut self, g: &Geometry, now: u64, at: u64) -> u64 {
        let edge = now
            .checked_sub(g.window)
            .and_then(|e| e.checked_sub(self.ring.base()));
        let _ = self.ring.step(edge, g.limit, 0, Record::NONE);
        self.rebase(g, at);
        self.ring.base()
    }

    /// Moves the base so `at` fits. Attempts older than the window are not
    /// in the ring, so every offset stays representable.
    #[cold]
    fn rebase(&mut self, g: &Geometry, at: u64) {
        let new_base = at.saturating_sub(g.window);
        let base = self.ring.base();
        self.ring.for_each_mut(|offset| {
            let abs = base + u64::from(*offset);
            // Anything before the new base is out of the window already.
            *offset = abs.saturating_sub(new_base) as u32;
        });
        self.ring.set_base(new_base);
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    /// Heap bytes held by the ring.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_picks_microseconds_for_a_minute() {
        let g = Geometry::new(10, Duration::from_secs(60));
        assert_eq!(g.tick_nanos, 1_000);
        assert_eq!(g.window, 60_000_000);
    }

    #[test]
    fn geometry_picks_coarser_ticks_for_long_windows() {
        let g = Geometry::new(10, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(g.tick_nanos, 1_000_000);
        let g = Geometry::new(10, Duration::from_secs(100 * 365 * 24 * 3600));
        assert_eq!(g.tick_nanos, 1_000_000_000);
    }

    #[test]
    fn rebase_keeps_attempts_in_the_window() {
        let g = Geometry::new(3, Duration::from_secs(60));
        let mut w = Window::default();
        let mut t = 0u64;
        // Walk far past u32::MAX ticks in steps of half a window: each
        // check finds exactly the one before it (the one before that left
        // exactly a window ago), across every rebase.
        for i in 0..200 {
            t += 30_000_000;
            let v = w.step(&g, t, t, Record::ALL);
            assert_eq!(v.count, u32::from(i > 0), "step {i}: {v:?}");
        }
        assert!(
            t > u64::from(u32::MAX) && w.ring.base() > 0,
            "no rebase happened"
        );
        assert_eq!(w.len(), 2);
        // The newest is where it was recorded, not moved by the rebases.
        assert_eq!(w.drained_at(&g), t + g.window);
    }

    #[test]
    fn ring_capacity_never_exceeds_the_limit() {
        let g = Geometry::new(600, Duration::from_secs(60));
        let mut w = Window::default();
        for t in 0..5000u64 {
            let _ = w.step(&g, t, t, Record::ALL);
        }
        assert_eq!(w.len(), 600);
        assert!(w.ring.capacity() <= 600 + 8, "{}", w.ring.capacity());
        // What the memory bound counts: the slots and the ring's header,
        // four bytes each; nothing while inline.
        let bytes = w.heap_bytes();
        assert!((4 * 600..=4 * (600 + 8 + 8)).contains(&bytes), "{bytes}");
        assert_eq!(Window::default().heap_bytes(), 0);
    }
}
