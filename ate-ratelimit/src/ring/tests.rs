use std::collections::VecDeque;

use super::timeline::{NOT_LOW, Timeline, counter_slot};
use super::{INLINE, Record, Ring};

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
