//! Behaviour of the trailing window, named after the rules.

use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::{
    Decision, KeyedLimiter, Limiter, Policy, Quota,
    clock::{ManualClock, Timestamp},
};

fn quota(n: u32, secs: u64) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_secs(secs)).unwrap()
}

fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

#[test]
fn default_window_is_sixty_seconds() {
    let q = Quota::per_minute(NonZeroU32::new(5).unwrap());
    assert_eq!(q.window(), Duration::from_secs(60));
}

#[test]
fn allows_n_then_denies_with_remaining_counting_down() {
    let l = Limiter::with_clock(quota(3, 60), ManualClock::default());
    assert_eq!(l.check_at(ms(0)), Decision::Allowed { remaining: 2 });
    assert_eq!(l.check_at(ms(1)), Decision::Allowed { remaining: 1 });
    assert_eq!(l.check_at(ms(2)), Decision::Allowed { remaining: 0 });
    assert!(!l.check_at(ms(3)).is_allowed());
}

#[test]
fn window_boundary_is_exact_an_attempt_w_later_no_longer_counts() {
    let l = Limiter::with_clock(quota(1, 60), ManualClock::default());
    assert!(l.check_at(ms(1_000)).is_allowed());
    // 1 µs before the boundary it still counts (and this denial counts too).
    let l2 = Limiter::with_clock(quota(1, 60), ManualClock::default());
    assert!(l2.check_at(ms(1_000)).is_allowed());
    assert!(
        !l2.check_at(Timestamp::from_nanos(60_999_999_000))
            .is_allowed()
    );
    // Exactly W later: (t - W, t] excludes it.
    assert!(l.check_at(ms(61_000)).is_allowed());
}

#[test]
fn retry_after_is_exact() {
    let l = Limiter::with_policy(quota(2, 60), Policy::AllowedOnly, ManualClock::default());
    assert!(l.check_at(ms(0)).is_allowed());
    assert!(l.check_at(ms(15_000)).is_allowed());
    let d = l.check_at(ms(20_000));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(40)));
    assert_eq!(d.retry_after_secs(), Some(40));
    // At exactly that time it is allowed; a microsecond earlier it is not.
    assert!(
        !l.peek_at(Timestamp::from_nanos(59_999_999_000))
            .is_allowed()
    );
    assert!(l.check_at(ms(60_000)).is_allowed());
}

#[test]
fn retry_after_secs_rounds_up() {
    let l = Limiter::with_clock(quota(1, 60), ManualClock::default());
    assert!(l.check_at(ms(0)).is_allowed());
    // Under CountDenied with N = 1 the denial at 0.5 s is itself the last
    // recorded attempt, so the wait is a full window from now.
    let d = l.check_at(ms(500));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(60)));
    let d = l.check_at(ms(1_250));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(60)));
    let l = Limiter::with_policy(quota(1, 60), Policy::AllowedOnly, ManualClock::default());
    assert!(l.check_at(ms(0)).is_allowed());
    assert_eq!(l.check_at(ms(500)).retry_after_secs(), Some(60)); // 59.5 s -> 60
}

#[test]
fn traffic_that_stays_above_the_limit_stays_throttled() {
    // 2 per 10 s; the caller tries every second, forever above the limit.
    let l = Limiter::with_clock(quota(2, 10), ManualClock::default());
    let mut allowed_after_first_window = 0;
    for s in 0..300u64 {
        let d = l.check_at(Timestamp::from_secs(s));
        if s >= 10 && d.is_allowed() {
            allowed_after_first_window += 1;
        }
    }
    assert_eq!(
        allowed_after_first_window, 0,
        "denials must keep it throttled"
    );
}

#[test]
fn allowed_only_policy_lets_n_per_window_through_a_hammering_caller() {
    let l = Limiter::with_policy(quota(2, 10), Policy::AllowedOnly, ManualClock::default());
    let allowed = (0..300u64)
        .filter(|s| l.check_at(Timestamp::from_secs(*s)).is_allowed())
        .count();
    assert_eq!(allowed, 60, "2 per 10 s over 300 s");
}

#[test]
fn once_the_caller_slows_below_the_limit_it_is_allowed_again_within_w() {
    let l = Limiter::with_clock(quota(5, 60), ManualClock::default());
    // Hammer for two minutes at 1/s.
    for s in 0..120u64 {
        let _ = l.check_at(Timestamp::from_secs(s));
    }
    // Stop; within W of the last attempt everything has drained.
    assert!(l.check_at(Timestamp::from_secs(119 + 60)).is_allowed());
    // And at a rate below the limit it stays allowed.
    for k in 1..20u64 {
        assert!(l.check_at(Timestamp::from_secs(179 + k * 13)).is_allowed());
    }
}

#[test]
fn denials_count_only_under_the_default_policy() {
    // The alternate policy differs exactly where a denial would be recorded.
    let a = Limiter::with_clock(quota(1, 10), ManualClock::default());
    let b = Limiter::with_policy(quota(1, 10), Policy::AllowedOnly, ManualClock::default());
    for l in [&a, &b] {
        assert!(l.check_at(Timestamp::from_secs(0)).is_allowed());
        assert!(!l.check_at(Timestamp::from_secs(5)).is_allowed());
    }
    // At 10 s the allowed attempt has left; only the recorded denial remains.
    assert!(!a.check_at(Timestamp::from_secs(10)).is_allowed());
    assert!(b.check_at(Timestamp::from_secs(10)).is_allowed());
}

#[test]
fn keys_are_independent() {
    let l = KeyedLimiter::with_clock(quota(1, 60), ManualClock::default());
    assert!(l.check_at(&1u32, ms(0)).is_allowed());
    assert!(!l.check_at(&1u32, ms(1)).is_allowed());
    assert!(l.check_at(&2u32, ms(1)).is_allowed());
}

#[test]
fn strict_cap_never_more_than_n_in_the_first_window() {
    // GCRA (governor) can let more than N through in the first period.
    let clock = ManualClock::default();
    let l = Limiter::with_clock(quota(10, 60), clock.clone());
    let mut allowed = 0;
    for _ in 0..600 {
        clock.advance(Duration::from_millis(100));
        allowed += u32::from(l.check().is_allowed());
    }
    assert_eq!(allowed, 10);
}

#[test]
fn peek_does_not_record_or_add_keys() {
    let l = KeyedLimiter::with_clock(quota(1, 60), ManualClock::default());
    assert_eq!(l.peek_at(&"a", ms(0)), Decision::Allowed { remaining: 1 });
    assert_eq!(l.len(), 0);
    assert!(l.check_at(&"a", ms(0)).is_allowed());
    assert!(!l.peek_at(&"a", ms(1)).is_allowed());
    assert!(!l.peek_at(&"a", ms(2)).is_allowed());
    // Peeks were not recorded: the window drains from the one attempt.
    assert!(l.check_at(&"a", ms(60_000)).is_allowed());
}

#[test]
fn time_going_backwards_is_taken_as_the_latest_time() {
    let l = Limiter::with_clock(quota(2, 60), ManualClock::default());
    assert!(l.check_at(ms(10_000)).is_allowed());
    assert!(l.check_at(ms(5_000)).is_allowed()); // recorded as 10 s
    // If it had been recorded at 5 s it would leave at 65 s.
    assert!(!l.check_at(ms(65_000)).is_allowed());
}

#[test]
fn check_reads_the_injected_clock() {
    let clock = ManualClock::default();
    let l = Limiter::with_clock(quota(1, 1), clock.clone());
    assert!(l.check().is_allowed());
    assert!(!l.check().is_allowed());
    clock.advance(Duration::from_secs(1));
    assert!(l.check().is_allowed());
}

#[test]
fn long_runs_past_the_offset_range_stay_exact() {
    // u32 µs offsets wrap after ~71 minutes; run for days of simulated time.
    let l = Limiter::with_clock(quota(3, 60), ManualClock::default());
    let mut t = 0u64;
    for i in 0..20_000u64 {
        t += if i % 7 == 0 { 3_600_000 } else { 7_000 };
        let d = l.check_at(ms(t));
        if i % 7 == 0 {
            assert_eq!(d, Decision::Allowed { remaining: 2 }, "after a long idle");
        }
    }
}

#[test]
fn a_single_window_holds_at_most_two_to_the_31_attempts() {
    // A larger limit acts as 2^31 (documented on `Limiter`); keyed windows
    // take any limit.
    let l = Limiter::with_clock(quota(u32::MAX, 60), ManualClock::default());
    assert_eq!(
        l.check(),
        Decision::Allowed {
            remaining: (1 << 31) - 1
        }
    );
    let k = KeyedLimiter::with_clock(quota(u32::MAX, 60), ManualClock::default());
    assert_eq!(
        k.check(&1),
        Decision::Allowed {
            remaining: u32::MAX - 1
        }
    );
}

#[test]
fn a_nanosecond_window_is_exact_for_the_single_window() {
    // The single window keeps whole nanoseconds: 1 per 1500 ns allows again
    // exactly 1500 ns later, not at the next microsecond.
    let clock = ManualClock::default();
    let l = Limiter::with_clock(
        Quota::new(NonZeroU32::new(1).unwrap(), Duration::from_nanos(1_500)).unwrap(),
        clock.clone(),
    );
    assert!(l.check().is_allowed());
    clock.advance(Duration::from_nanos(1_499));
    assert_eq!(
        l.check_at(Timestamp::from_nanos(1_499)).retry_after(),
        Some(Duration::from_nanos(1_500))
    );
    clock.set(Timestamp::from_nanos(1_499 + 1_500));
    assert!(l.check().is_allowed());
}

#[test]
fn seeding_a_single_window_keeps_it_across_a_restart() {
    for policy in [Policy::CountDenied, Policy::AllowedOnly] {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let l = Limiter::with_policy(quota(3, 60), policy, clock.clone());
        // An unsorted trail of six: only the last three (70, 90, 95 s) are
        // kept, whatever the policy. (Replayed as allowed-only checks, the
        // one at 95 s would have been denied and dropped instead.)
        l.seed([95, 10, 90, 20, 70, 50].map(Timestamp::from_secs));
        let d = l.peek();
        assert_eq!(
            d.retry_after(),
            Some(Duration::from_secs(30)),
            "{policy:?}: the attempt at 70 s leaves at 130 s"
        );
        clock.set(Timestamp::from_secs(130));
        assert!(l.check().is_allowed(), "{policy:?}");
    }
}

#[test]
fn seeding_with_an_old_trail_changes_nothing() {
    let l = Limiter::with_clock(quota(2, 60), ManualClock::new(Timestamp::from_secs(1_000)));
    l.seed([10, 20, 30].map(Timestamp::from_secs));
    assert_eq!(l.check(), Decision::Allowed { remaining: 1 });
}

#[test]
fn an_hour_window_keyed_is_exact_on_its_millisecond_grid() {
    // Keyed windows over ~35 minutes keep millisecond ticks: exact for
    // times on whole milliseconds, boundary and retry time included.
    let hour = 3_600_000;
    let l = KeyedLimiter::with_clock(quota(2, 3_600), ManualClock::default());
    let t0 = 5_000_000;
    assert_eq!(l.check_at(&"k", ms(t0)), Decision::Allowed { remaining: 1 });
    assert_eq!(
        l.check_at(&"k", ms(t0 + 7)),
        Decision::Allowed { remaining: 0 }
    );
    let d = l.peek_at(&"k", ms(t0 + 10));
    assert_eq!(d.retry_after(), Some(Duration::from_millis(hour - 10)));
    // A millisecond before the first leaves it still counts...
    assert!(!l.peek_at(&"k", ms(t0 + hour - 1)).is_allowed());
    // ...and exactly an hour later it no longer does: one slot free.
    assert_eq!(
        l.check_at(&"k", ms(t0 + hour)),
        Decision::Allowed { remaining: 0 }
    );
}

#[test]
fn a_month_window_keyed_is_exact_on_its_second_grid() {
    // Over ~24 days: whole-second ticks.
    let month = 30 * 24 * 3_600;
    let l = KeyedLimiter::with_clock(quota(1, month), ManualClock::default());
    let t0 = 86_400;
    assert!(l.check_at(&"k", ms(t0 * 1_000)).is_allowed());
    let d = l.peek_at(&"k", ms((t0 + 1) * 1_000));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(month - 1)));
    assert!(!l.peek_at(&"k", ms((t0 + month - 1) * 1_000)).is_allowed());
    assert!(l.check_at(&"k", ms((t0 + month) * 1_000)).is_allowed());
}

#[test]
fn a_limiter_reports_its_quota_and_policy_and_debug_shows_what_it_holds() {
    let l = Limiter::with_policy(quota(3, 60), Policy::AllowedOnly, ManualClock::default());
    assert_eq!(l.policy(), Policy::AllowedOnly);
    assert_eq!(l.quota(), quota(3, 60));
    assert!(l.check_at(ms(0)).is_allowed());
    let text = format!("{l:?}");
    for part in ["Limiter", "AllowedOnly", "in_window: 1"] {
        assert!(text.contains(part), "{part} in {text}");
    }
}
