//! Key table behaviour: eviction, bounds, seeding, concurrency.

use std::num::NonZeroU32;
use std::time::Duration;

mod common;

use ate_ratelimit::{Decision, KeyedLimiter, ManualClock, Quota, Timestamp};

fn quota(n: u32, secs: u64) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_secs(secs))
}

#[test]
fn keys_idle_for_longer_than_w_are_evicted_without_changing_decisions() {
    let clock = ManualClock::default();
    let l = KeyedLimiter::with_clock(quota(2, 60), clock.clone());
    for k in 0..100u32 {
        let _ = l.check(&k);
    }
    clock.advance(Duration::from_secs(30));
    let _ = l.check(&7);
    clock.advance(Duration::from_secs(30)); // keys other than 7 are drained
    assert_eq!(l.len(), 100);
    l.retain_recent();
    assert_eq!(l.len(), 1, "only key 7 still has an attempt in its window");
    assert_eq!(l.check(&7), Decision::Allowed { remaining: 0 });
    assert_eq!(l.check(&8), Decision::Allowed { remaining: 1 });
}

#[test]
fn max_keys_evicts_drained_keys_first_then_says_table_full() {
    let clock = ManualClock::default();
    let l = KeyedLimiter::builder(quota(5, 10))
        .max_keys(4)
        .shards(1)
        .build_with_clock(clock.clone());
    for k in 0..4u32 {
        assert!(l.check(&k).is_allowed());
    }
    // Full of live keys: a new key is refused, not added.
    let d = l.check(&99);
    assert_eq!(
        d,
        Decision::KeyTableFull {
            retry_after: Duration::from_secs(10)
        }
    );
    assert!(!d.is_allowed());
    assert_eq!(l.len(), 4);
    // Existing keys keep working.
    assert!(l.check(&0).is_allowed());
    // Once keys drain, a new key takes a drained key's slot.
    clock.advance(Duration::from_secs(10));
    assert!(l.check(&99).is_allowed());
    assert!(l.len() <= 4);
}

#[test]
fn seeding_from_an_audit_trail_keeps_windows_across_a_restart() {
    let clock = ManualClock::new(Timestamp::from_secs(100));
    let l = KeyedLimiter::with_clock(quota(3, 60), clock.clone());
    // Unsorted trail: alice used all 3 in the last minute; bob one, long ago.
    l.seed([
        ("alice", Timestamp::from_secs(90)),
        ("bob", Timestamp::from_secs(10)),
        ("alice", Timestamp::from_secs(50)),
        ("alice", Timestamp::from_secs(70)),
    ]);
    let d = l.check(&"alice");
    assert!(
        !d.is_allowed(),
        "a restart must not hand alice a fresh burst"
    );
    assert_eq!(l.check(&"bob"), Decision::Allowed { remaining: 2 });
}

#[test]
fn memory_per_key_stays_within_the_window() {
    let clock = ManualClock::default();
    let l = KeyedLimiter::with_clock(quota(600, 60), clock.clone());
    // One key at 1 request/s for 10 minutes holds ~60 slots, not 600.
    for _ in 0..600 {
        clock.advance(Duration::from_secs(1));
        let _ = l.check(&1u64);
    }
    let bytes = l.heap_bytes();
    assert!(bytes <= 600, "{bytes} bytes for a 1 rps key");
}

/// Threads hammer shared keys inside each step of a stepping clock (see
/// [`common::stepped`]). Any N+1 allowed attempts per key span at least W.
#[test]
fn concurrent_callers_never_get_more_than_n_in_any_window() {
    const N: u32 = 50;
    const THREADS: usize = 4;
    let clock = ManualClock::default();
    let l = KeyedLimiter::with_clock(quota(N, 1), clock.clone());
    let pause = |step: u64| Duration::from_millis(if step.is_multiple_of(200) { 1_500 } else { 7 });
    let all = common::stepped(THREADS, 1_000, &clock, pause, |now, mine| {
        for i in 0..15u64 {
            if l.check_at(&(i % 3), now).is_allowed() {
                mine.push((i % 3, now));
            }
        }
    });
    for key in 0..3u64 {
        let times: Vec<_> = all
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, t)| *t)
            .collect();
        assert!(times.len() > N as usize, "the test must reach the limit");
        let most = ate_ratelimit::testing::max_in_any_window(&times, Duration::from_secs(1));
        assert_eq!(most, N as usize, "{most} allowed in 1 s for key {key}");
    }
}

#[test]
fn limiters_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<KeyedLimiter<String>>();
    check::<ate_ratelimit::Limiter>();
    check::<ate_ratelimit::LimitSet<String>>();
}
