//! Key table behaviour: eviction, bounds, seeding, concurrency.

use std::num::{NonZeroU16, NonZeroU32};
use std::time::{Duration, SystemTime};

mod common;

use ate_ratelimit::{
    Decision, KeyedBuilder, KeyedLimiter, LimitSet, Limiter, MonotonicClock, Policy, Quota,
    approx::{ApproxKeyedLimiter, BucketQuota},
    clock::{Clock, ManualClock, Timestamp},
};

fn quota(n: u32, secs: u64) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_secs(secs)).unwrap()
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
fn a_limit_set_evicts_drained_keys_in_every_limit_without_changing_decisions() {
    let clock = ManualClock::default();
    let mut set = LimitSet::new(Policy::CountDenied, clock.clone());
    let short = set.add("short", quota(2, 10));
    let long = set.add("long", quota(3, 60));
    for k in 0..50u32 {
        let _ = set.check(&[short, long], &k);
    }
    let _ = set.check(&[short], &1000);
    assert_eq!(set.keys_held(), 101);
    // At 10 s every key has drained from `short`, none from `long`.
    clock.advance(Duration::from_secs(10));
    set.retain_recent();
    assert_eq!(set.keys_held(), 50);
    assert_eq!(set.limiter(short).len(), 0);
    // Key 7 still has one attempt counted in `long`; a new key has none.
    let d = set.check(&[short, long], &7);
    assert_eq!(d.decisions()[1].1, Decision::Allowed { remaining: 1 });
    assert_eq!(d.decisions()[0].1, Decision::Allowed { remaining: 1 });
    // At 70 s key 7's newest attempt (at 10 s) is a window old too.
    clock.advance(Duration::from_secs(60));
    set.retain_recent_at(clock.now());
    assert_eq!(set.keys_held(), 0, "every key has drained");
}

#[test]
fn a_limit_set_denial_for_a_full_key_table_says_when_to_retry() {
    let clock = ManualClock::default();
    let mut set = LimitSet::new(Policy::CountDenied, clock.clone());
    let full = set.add_with(
        "callers",
        KeyedLimiter::builder(quota(5, 10)).max_keys(1).shards(1),
    );
    let roomy = set.add("bucket", quota(5, 60));
    assert!(set.check(&[full, roomy], &1u32).is_allowed());
    clock.advance(Duration::from_secs(4));
    let d = set.check(&[full, roomy], &2u32);
    assert_eq!(d.denied_by(), ["callers"]);
    // Key 1's window drains at 10 s: a slot may free up in 6 s, not now.
    assert_eq!(d.retry_after(), Some(Duration::from_secs(6)));
    assert_eq!(d.retry_after_secs(), Some(6));
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
    for policy in [Policy::CountDenied, Policy::AllowedOnly] {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let l = KeyedLimiter::builder(quota(3, 60))
            .policy(policy)
            .build_with_clock(clock.clone());
        // An unsorted trail: six attempts by alice, of which only the last
        // three (70, 90, 95 s) are kept, whatever the policy (replayed as
        // allowed-only checks, the one at 95 s would have been denied and
        // dropped instead); bob's one, long ago, has left the window.
        let alice = [95, 10, 90, 20, 70, 50].map(|s| ("alice", Timestamp::from_secs(s)));
        let seeded = l.seed(alice.into_iter().chain([("bob", Timestamp::from_secs(10))]));
        assert_eq!((seeded.restored(), seeded.refused()), (7, 0));
        assert_eq!(
            l.peek(&"alice").retry_after(),
            Some(Duration::from_secs(30)),
            "{policy:?}: a restart must not hand alice a fresh burst; her attempt at 70 s \
             leaves at 130 s"
        );
        assert_eq!(
            l.peek(&"bob"),
            Decision::Allowed { remaining: 3 },
            "{policy:?}"
        );
        clock.set(Timestamp::from_secs(130));
        assert!(l.check(&"alice").is_allowed(), "{policy:?}");
    }
}

/// A restarted process seeds from wall-clock records on the default clock,
/// whose timeline starts far enough in for them to land exactly (not
/// clamped to its origin, which would keep them for a whole window).
#[test]
fn a_restart_keeps_windows_from_wall_clock_records_on_the_default_clock() {
    // Three attempts 50, 40 and 30 s ago against 3 per minute: the next
    // slot opens when the one from 50 s ago leaves, in 10 s.
    let wall_now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let ages = [50, 40, 30].map(|s| wall_now - Duration::from_secs(s));
    // The clock runs while the test does; a second of slack is plenty.
    let about_ten_seconds = |d: Option<Duration>| {
        let d = d.expect("denied");
        assert!(
            d <= Duration::from_secs(10) && d > Duration::from_secs(9),
            "retry_after {d:?}, want just under 10 s"
        );
    };

    let keyed = KeyedLimiter::new(quota(3, 60));
    let seeded = keyed.seed(ages.map(|at| ("k", keyed.clock().at_wall_time(at, wall_now))));
    assert!(seeded.is_complete());
    about_ten_seconds(keyed.peek(&"k").retry_after());

    let direct = Limiter::new(quota(3, 60));
    direct.seed(ages.map(|at| direct.clock().at_wall_time(at, wall_now)));
    about_ten_seconds(direct.peek().retry_after());

    // 1 s buckets: the bucket of the oldest leaves at most 1 s later.
    let bq = BucketQuota::new(
        NonZeroU32::new(3).unwrap(),
        Duration::from_secs(60),
        NonZeroU16::new(60).unwrap(),
    );
    let clock = MonotonicClock::new();
    let approx = ApproxKeyedLimiter::with_clock(bq, Policy::CountDenied, clock.clone());
    approx.seed(ages.map(|at| ("k", clock.at_wall_time(at, wall_now))));
    let wait = approx.peek(&"k").retry_after().expect("denied");
    assert!(
        wait > Duration::from_secs(9) && wait <= Duration::from_secs(11),
        "retry_after {wait:?}"
    );
}

#[test]
fn wall_times_map_onto_the_timeline_by_age() {
    let clock = ManualClock::new(Timestamp::from_secs(100));
    let wall_now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    assert_eq!(
        clock.at_wall_time(at(970), wall_now),
        Timestamp::from_secs(70)
    );
    // Later than the wall clock's now: taken as now.
    assert_eq!(
        clock.at_wall_time(at(1_005), wall_now),
        Timestamp::from_secs(100)
    );
    // Older than the timeline: its origin (stricter, never looser).
    assert_eq!(clock.at_wall_time(at(500), wall_now), Timestamp::ZERO);
    assert!(
        MonotonicClock::new().now() >= Timestamp::ZERO.saturating_add(MonotonicClock::HEADROOM)
    );
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

/// The monotonic clock starts 2^55 ns in (its headroom), far past what a
/// `u32` offset holds: a busy key (its ring on the heap) keeps its window
/// whole there.
#[test]
fn a_busy_key_keeps_its_window_where_the_monotonic_clock_starts() {
    let clock = ManualClock::new(Timestamp::from_nanos(
        MonotonicClock::HEADROOM.as_nanos() as u64
    ));
    let l = KeyedLimiter::with_clock(quota(5, 60), clock.clone());
    for left in (0..5).rev() {
        assert_eq!(l.check(&1u8), Decision::Allowed { remaining: left });
        clock.advance(Duration::from_secs(1));
    }
    // Attempts at 0, 1, 2, 3 and 4 s, and this denied one at 5 s: the
    // oldest still counted (1 s) leaves at 61 s.
    let d = l.check(&1u8);
    assert_eq!(d.retry_after(), Some(Duration::from_secs(56)), "{d:?}");
    clock.advance(Duration::from_millis(55_999));
    assert!(!l.peek(&1u8).is_allowed());
    clock.advance(Duration::from_millis(1));
    assert_eq!(l.check(&1u8), Decision::Allowed { remaining: 0 });
}

/// An attempt at a time earlier than the key's newest is recorded at the
/// newest (a key's times never go backwards), so it keeps the key in the
/// table as long as the newest does.
#[test]
fn an_earlier_time_for_a_key_is_recorded_at_its_newest() {
    let l = KeyedLimiter::with_clock(quota(5, 10), ManualClock::default());
    let at = Timestamp::from_millis;
    for ms in [1_000, 2_000, 3_000, 8_000] {
        assert!(l.check_at(&1u8, at(ms)).is_allowed());
    }
    assert_eq!(
        l.check_at(&1u8, at(3_000)),
        Decision::Allowed { remaining: 0 }
    );
    // At 13.5 s both attempts recorded at 8 s still count.
    l.retain_recent_at(at(13_500));
    assert_eq!(l.len(), 1);
    assert_eq!(
        l.check_at(&1u8, at(13_500)),
        Decision::Allowed { remaining: 2 }
    );
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

#[test]
fn string_keys_are_looked_up_by_str_and_share_one_window_with_owned_keys() {
    let clock = ManualClock::default();
    let l: KeyedLimiter<String, _> = KeyedLimiter::with_clock(quota(2, 60), clock.clone());
    // A caller id straight from a header: no String per check.
    let header: &str = "tenant-a";
    assert_eq!(l.peek(header), Decision::Allowed { remaining: 2 });
    assert_eq!(l.len(), 0, "a peek adds no key");
    assert_eq!(l.check(header), Decision::Allowed { remaining: 1 });
    assert_eq!(
        l.check_at(&"tenant-a".to_owned(), clock.now()),
        Decision::Allowed { remaining: 0 }
    );
    assert!(!l.check(header).is_allowed(), "one window for both forms");
    assert!(l.try_acquire_at("tenant-b", clock.now()).is_allowed());
    assert_eq!(
        l.peek_at("tenant-b", clock.now()),
        Decision::Allowed { remaining: 1 }
    );
    assert_eq!(l.len(), 2);

    let mut set: LimitSet<String, _> = LimitSet::new(Policy::CountDenied, clock.clone());
    let one = set.add("one", quota(1, 60));
    assert!(set.check(&[one], header).is_allowed());
    assert!(!set.check(&[one], &header.to_owned()).is_allowed());
    assert!(!set.check_at(&[one], header, clock.now()).is_allowed());

    let approx: ApproxKeyedLimiter<String, _> = ApproxKeyedLimiter::with_clock(
        BucketQuota::new(
            NonZeroU32::new(1).unwrap(),
            Duration::from_secs(60),
            NonZeroU16::new(6).unwrap(),
        ),
        Policy::CountDenied,
        clock.clone(),
    );
    assert!(approx.peek(header).is_allowed());
    assert!(approx.check(header).is_allowed());
    assert!(
        !approx
            .check_at(&header.to_owned(), clock.now())
            .is_allowed()
    );
    assert!(!approx.peek_at(header, clock.now()).is_allowed());
}

#[test]
fn a_combined_check_names_every_limit_in_the_order_asked_and_records_once_per_limit() {
    let clock = ManualClock::default();
    let mut set = LimitSet::new(Policy::CountDenied, clock.clone());
    let route = set.add("route", quota(1, 60));
    let bucket = set.add("bucket", quota(5, 60));
    let first = set.check(&[bucket, route, bucket], &1u32);
    let names: Vec<&str> = first.decisions().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["bucket", "route", "bucket"]);
    // Named twice, recorded once: 4 left, not 3.
    assert_eq!(
        first.decision("bucket"),
        Some(Decision::Allowed { remaining: 4 })
    );
    assert_eq!(
        first.decision("route"),
        Some(Decision::Allowed { remaining: 0 })
    );
    assert_eq!(first.decision("other"), None);
    assert!(first.is_allowed());
    let second = set.check(&[route, bucket], &1u32);
    assert_eq!(second.denied_by(), ["route"]);
    assert_eq!(
        second.decision("bucket"),
        Some(Decision::Allowed { remaining: 3 })
    );
    assert_eq!(second.retry_after(), Some(Duration::from_secs(60)));
    // A check of no limits: allowed, nothing limits the next one, and
    // nothing is recorded.
    let none = set.check(&[], &2u32);
    assert!(none.is_allowed() && none.decisions().is_empty());
    assert_eq!((none.remaining(), none.retry_after()), (u32::MAX, None));
    assert_eq!(
        set.limiter(route).peek(&2u32),
        Decision::Allowed { remaining: 1 }
    );
    // Names borrowed from the set: copied to outlive a check's scope.
    let kept: Vec<String> = second.denied_by().into_iter().map(str::to_owned).collect();
    assert_eq!(kept, ["route"]);
}

#[test]
fn a_limit_set_name_added_again_replaces_its_quota_and_the_sets_policy_wins() {
    let clock = ManualClock::default();
    let mut set = LimitSet::<u32, _>::new(Policy::CountDenied, clock.clone());
    let first = set.add("route", quota(1, 60));
    let again = set.add("route", quota(3, 60));
    assert_eq!(first, again, "one limit of that name");
    assert_eq!(set.id("route"), Some(first));
    assert_eq!(set.limiter(first).quota(), quota(3, 60));
    assert_eq!(
        set.check(&[first], &1u32).decision("route"),
        Some(Decision::Allowed { remaining: 2 })
    );
    // A builder's policy gives way to the set's: denials count here.
    let strict = set.add_with(
        "strict",
        KeyedLimiter::builder(quota(1, 60)).policy(Policy::AllowedOnly),
    );
    assert_eq!(set.limiter(strict).policy(), Policy::CountDenied);
    assert!(set.check(&[strict], &1u32).is_allowed());
    clock.advance(Duration::from_secs(30));
    assert!(!set.check(&[strict], &1u32).is_allowed());
    clock.advance(Duration::from_secs(30));
    // Allowed-only would allow this one (the attempt at 0 s has left);
    // here the denial at 30 s still counts, and this one counts too.
    assert_eq!(
        set.check(&[strict], &1u32).retry_after(),
        Some(Duration::from_secs(60))
    );
}

#[test]
fn an_id_of_another_set_panics_as_documented_even_in_range() {
    let clock = ManualClock::default();
    let mut other = LimitSet::<u32, _>::new(Policy::CountDenied, clock.clone());
    let theirs = other.add("a", quota(1, 60));
    let mut set = LimitSet::<u32, _>::new(Policy::CountDenied, clock);
    let ours = set.add("a", quota(1, 60));
    // Same position, same name: still not this set's, so never silently
    // checked against this set's first limit.
    let message = |f: &dyn Fn()| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    assert!(
        message(&|| drop(set.check(&[ours, theirs], &1))).contains("belongs to another LimitSet")
    );
    assert!(
        message(&|| {
            let _ = set.limiter(theirs);
        })
        .contains("belongs to another LimitSet")
    );
    assert!(
        message(&|| {
            let _ = set.name(theirs);
        })
        .contains("belongs to another LimitSet")
    );
    // Nothing was recorded by the refused check.
    assert_eq!(
        set.limiter(ours).peek(&1),
        Decision::Allowed { remaining: 1 }
    );
    assert_eq!(set.id("a"), Some(ours));
}

#[test]
fn a_shard_count_past_the_most_is_the_most_not_an_overflow() {
    for (asked, got) in [
        (0, 1),
        (3, 4),
        (KeyedBuilder::MAX_SHARDS, KeyedBuilder::MAX_SHARDS),
        (KeyedBuilder::MAX_SHARDS + 1, KeyedBuilder::MAX_SHARDS),
        (usize::MAX, KeyedBuilder::MAX_SHARDS),
    ] {
        let l = KeyedLimiter::builder(quota(1, 10))
            .shards(asked)
            .max_keys(usize::MAX)
            .build_with_clock(ManualClock::default());
        let debug = format!("{l:?}");
        assert!(
            debug.contains(&format!("shards: {got},")),
            "{asked}: {debug}"
        );
        assert!(l.check(&1u32).is_allowed());
        assert!(!l.check(&1u32).is_allowed());
    }
}

#[test]
fn a_keyed_limiter_reports_its_policy_emptiness_and_heap_bytes() {
    let l: KeyedLimiter<u64, ManualClock> = KeyedLimiter::builder(quota(600, 60))
        .policy(Policy::AllowedOnly)
        .build_with_clock(ManualClock::default());
    assert_eq!(l.policy(), Policy::AllowedOnly);
    assert!(l.is_empty());
    assert!(l.check_at(&7, Timestamp::ZERO).is_allowed());
    assert!(!l.is_empty());
    // One inline key: table slots only, each an entry (a u64 key and its
    // 16-byte window) and a control byte.
    let slot = 8 + 16 + 1;
    let bytes = l.heap_bytes();
    assert!(
        bytes >= slot && bytes.is_multiple_of(slot),
        "{bytes} for slots of {slot}"
    );
    // A saturated key adds its ring: 600 offsets of 4 bytes at least.
    for i in 1..600u64 {
        let _ = l.check_at(&7, Timestamp::from_nanos(i * 1_000));
    }
    assert!(l.heap_bytes() >= bytes + 600 * 4, "{}", l.heap_bytes());
}

#[test]
fn a_limit_set_debug_names_its_limits() {
    let mut set: LimitSet<u64, ManualClock> =
        LimitSet::new(Policy::default(), ManualClock::default());
    let _ = set.add("notifications", quota(150, 60));
    let text = format!("{set:?}");
    for part in ["LimitSet", "notifications"] {
        assert!(text.contains(part), "{part} in {text}");
    }
}
