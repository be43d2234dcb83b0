//! The approximate mode stays inside its documented bound.

use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use ate_ratelimit::testing::{Model, max_in_any_window, traffic};
use ate_ratelimit::{
    Policy, Quota,
    approx::{ApproxKeyedLimiter, BucketQuota},
    clock::{Clock, ManualClock, Timestamp},
};
use proptest::prelude::*;

fn quotas(n: u32, window_ms: u64, b: u16) -> (BucketQuota, Quota) {
    let n = NonZeroU32::new(n).unwrap();
    let w = Duration::from_millis(window_ms);
    (
        BucketQuota::new(n, w, NonZeroU16::new(b).unwrap()),
        Quota::new(n, w).unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn approximate_mode_never_admits_more_and_denies_at_most_w_over_b_too_long(
        n in 1u32..8, w in 10u64..20_000, b in 1u16..12, steps in traffic(3, 100),
    ) {
        let (bq, q) = quotas(n, w, b);
        let clock = ManualClock::default();
        let approx = ApproxKeyedLimiter::with_clock(bq, Policy::CountDenied, clock.clone());
        // Under CountDenied both record every attempt: the same history.
        let mut exact = Model::new(q, Policy::CountDenied);
        let slack = bq.max_extra_denial();
        prop_assert!(slack < bq.bucket_width() + Duration::from_nanos(u64::from(b)));
        for step in steps {
            clock.advance(step.advance);
            let now = clock.now();
            let a = approx.check(&step.key);
            let e = exact.check(step.key, now);
            if a.is_allowed() {
                prop_assert!(e.is_allowed(), "approximate allowed what the exact rule denies");
                // It counts a superset, this attempt included: never more left.
                prop_assert!(
                    a.remaining() <= e.remaining(),
                    "{} remaining where the exact rule has {}", a.remaining(), e.remaining()
                );
            } else {
                // Denied: the exact count over a window W/B longer reaches N.
                let within = exact.count_within(&step.key, now, q.window() + slack);
                prop_assert!(within > n as usize, "denied with only {} attempts in W + W/B", within);
                let retry = a.retry_after().unwrap();
                prop_assert!(retry <= q.window() + slack, "retry_after {:?} beyond W + W/B", retry);
            }
        }
    }

    #[test]
    fn approximate_allowed_only_never_lets_more_than_n_through_any_window(
        n in 1u32..6, w in 10u64..5_000, b in 1u16..8, steps in traffic(1, 150),
    ) {
        let (bq, q) = quotas(n, w, b);
        let clock = ManualClock::default();
        let approx = ApproxKeyedLimiter::with_clock(bq, Policy::AllowedOnly, clock.clone());
        let mut allowed: Vec<Timestamp> = Vec::new();
        for step in steps {
            clock.advance(step.advance);
            if approx.check(&0u8).is_allowed() {
                allowed.push(clock.now());
            }
        }
        let most = max_in_any_window(&allowed, q.window());
        prop_assert!(most <= n as usize, "{} allowed in one window of {:?}", most, q.window());
    }
}

#[test]
fn memory_is_b_plus_one_counters_whatever_n_is() {
    let (bq, _) = quotas(1_000_000, 60_000, 60);
    let clock = ManualClock::default();
    let l = ApproxKeyedLimiter::with_clock(bq, Policy::CountDenied, clock.clone());
    for _ in 0..10_000 {
        assert!(l.check(&"k").is_allowed());
    }
    assert_eq!(l.len(), 1);
    assert_eq!(bq.bucket_width(), Duration::from_secs(1));
    clock.advance(Duration::from_secs(62));
    l.retain_recent_at(clock.now_for_model());
    assert!(l.is_empty());
}

#[test]
fn retry_after_is_exact_for_the_bucketed_history() {
    let (bq, _) = quotas(2, 10_000, 10); // 1 s buckets
    let clock = ManualClock::default();
    let l = ApproxKeyedLimiter::with_clock(bq, Policy::AllowedOnly, clock.clone());
    clock.advance(Duration::from_millis(500));
    assert!(l.check(&1).is_allowed()); // bucket 0
    clock.advance(Duration::from_millis(1_000));
    assert!(l.check(&1).is_allowed()); // bucket 1
    let d = l.check(&1);
    // Bucket 0 leaves the 11 counted buckets when bucket 11 starts (t = 11 s).
    assert_eq!(d.retry_after(), Some(Duration::from_millis(11_000 - 1_500)));
    clock.set(Timestamp::from_millis(11_000));
    assert!(l.check(&1).is_allowed());
}

#[test]
fn seeding_counts_the_trail_whatever_the_policy_and_peek_records_nothing() {
    let (bq, _) = quotas(2, 10_000, 10); // 1 s buckets
    for policy in [Policy::CountDenied, Policy::AllowedOnly] {
        let clock = ManualClock::new(Timestamp::from_secs(20));
        let l = ApproxKeyedLimiter::with_clock(bq, policy, clock.clone());
        // Unsorted; "old" is out of the window at 20 s. Three for "a" in
        // the window: replayed as checks under AllowedOnly, the third
        // (a denial) would not be counted.
        l.seed([
            ("a", Timestamp::from_millis(19_500)),
            ("old", Timestamp::from_secs(1)),
            ("a", Timestamp::from_millis(15_500)),
            ("a", Timestamp::from_millis(12_500)),
        ]);
        // Counted: buckets 12, 15, 19. Below N again once the total drops
        // to 1, i.e. when bucket 15 leaves, at (15 + 11) s.
        let d = l.peek(&"a");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(6)), "{policy:?}");
        assert_eq!(l.peek(&"a"), d, "{policy:?}: peek recorded nothing");
        assert!(l.peek(&"old").is_allowed(), "{policy:?}");
        clock.set(Timestamp::from_secs(26));
        assert!(l.peek(&"a").is_allowed(), "{policy:?}");
        // A peek at a key never seen adds no key.
        assert!(l.peek(&"never-seen").is_allowed(), "{policy:?}");
        assert_eq!(l.len(), 2, "{policy:?}");
        // The newest bucket of "a" (19) counts until bucket 30 starts: the
        // peeks above do not keep "a" alive, and "old" is long out.
        clock.set(Timestamp::from_millis(29_999));
        l.retain_recent();
        assert_eq!(l.len(), 1, "{policy:?}");
        clock.set(Timestamp::from_secs(30));
        l.retain_recent();
        assert!(l.is_empty(), "{policy:?}");
    }
}

#[test]
fn extreme_windows_and_times_neither_panic_nor_let_a_second_attempt_through() {
    // Windows from zero to Duration::MAX (which counts as u64::MAX ns, 584
    // years), bucket counts up to u16::MAX, times up to the timeline's end.
    let windows = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_secs(60),
        Duration::from_secs(u64::MAX / 2),
        Duration::MAX,
    ];
    let times = [0, 1, 60_000_000_000, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    for window in windows {
        for b in [1, 2, 60, u16::MAX] {
            let bq = BucketQuota::new(NonZeroU32::MIN, window, NonZeroU16::new(b).unwrap());
            // (B + 1) * w - W, with W clamped to u64::MAX ns, in exact arithmetic.
            let w = u128::from(u64::try_from(window.as_nanos()).unwrap_or(u64::MAX));
            let width = w.div_ceil(u128::from(b)).max(1);
            assert_eq!(
                bq.max_extra_denial().as_nanos(),
                width * (u128::from(b) + 1) - w,
                "{window:?}, B = {b}"
            );
            for t in times {
                let limiter =
                    ApproxKeyedLimiter::with_clock(bq, Policy::CountDenied, ManualClock::default());
                let at = Timestamp::from_nanos(t);
                assert!(limiter.check_at(&1u8, at).is_allowed());
                // N = 1: a second attempt at the same instant is denied,
                // whatever the window (a zero window still counts the
                // attempt's own bucket).
                let second = limiter.check_at(&1u8, at);
                assert!(!second.is_allowed(), "{window:?}, B = {b}, t = {t}");
                // The key is still inside its window: not evicted.
                limiter.retain_recent_at(at);
                assert_eq!(limiter.len(), 1, "{window:?}, B = {b}, t = {t}");
                assert!(!limiter.peek_at(&1u8, at).is_allowed());
            }
        }
    }
}

#[test]
fn retry_after_is_exact_for_the_bucketed_history_windows_later() {
    // The same rule long after the start, where the counted buckets are
    // the 11 up to the current one (100 s in: buckets 91..=101).
    let (bq, _) = quotas(2, 10_000, 10); // 1 s buckets
    let clock = ManualClock::new(Timestamp::from_millis(100_500));
    let l = ApproxKeyedLimiter::with_clock(bq, Policy::AllowedOnly, clock.clone());
    assert!(l.check(&1).is_allowed()); // bucket 100
    assert!(!l.is_empty());
    clock.advance(Duration::from_millis(1_000));
    assert!(l.check(&1).is_allowed()); // bucket 101
    let d = l.check(&1);
    // Bucket 100 leaves when bucket 111 starts (t = 111 s).
    assert_eq!(
        d.retry_after(),
        Some(Duration::from_millis(111_000 - 101_500))
    );
    clock.set(Timestamp::from_millis(111_000));
    assert!(l.check(&1).is_allowed());
    let text = format!("{l:?}");
    assert!(text.contains("ApproxKeyedLimiter"), "{text}");
}
