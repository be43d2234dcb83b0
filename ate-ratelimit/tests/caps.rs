//! The key cap (`max_keys`) as a total, the combined check's recording
//! rules when a table is full, seeding under a cap, the longest window and
//! weighted checks' errors.

use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::Duration;

use ate_ratelimit::{
    Decision, Error, KeyedLimiter, LimitSet, Limiter, Policy, Quota,
    clock::{ManualClock, Timestamp},
    config::LimitTable,
};

fn quota(n: u32, secs: u64) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_secs(secs)).unwrap()
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn secs(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// `max_keys(n)` is read as a total: the first refusal comes at key n + 1,
/// however the keys spread over the shards (it used to be split per
/// shard, so with `max_keys(64)` the first refusal came at 47-49 keys).
#[test]
fn max_keys_is_a_total_over_every_shard() {
    for (max, shards) in [(64, None), (10_000, None), (100, Some(64)), (3, Some(1024))] {
        let mut builder = KeyedLimiter::builder(quota(5, 60)).max_keys(max);
        if let Some(shards) = shards {
            builder = builder.shards(shards);
        }
        let l = builder.build_with_clock(ManualClock::default());
        for k in 0..max as u64 {
            assert!(l.check(&k).is_allowed(), "key {k} of max_keys({max})");
        }
        assert_eq!(
            l.check(&u64::MAX),
            Decision::KeyTableFull {
                retry_after: Duration::from_secs(60)
            },
            "key {} of max_keys({max})",
            max + 1
        );
        assert_eq!(l.len(), max);
        // A peek of a new key says what a check would get.
        assert!(matches!(
            l.peek(&(u64::MAX - 1)),
            Decision::KeyTableFull { .. }
        ));
    }
}

/// Threads adding distinct keys at once never push the table past its cap,
/// and never leave a slot unused: exactly `max` keys get in.
#[test]
fn racing_new_keys_fill_the_cap_exactly() {
    const THREADS: u64 = 4;
    const MAX: usize = 100;
    let l = KeyedLimiter::builder(quota(5, 60))
        .max_keys(MAX)
        .build_with_clock(ManualClock::default());
    let start = Barrier::new(THREADS as usize);
    let allowed: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (l, start) = (&l, &start);
                s.spawn(move || {
                    start.wait();
                    (0..100u64)
                        .filter(|k| l.check(&(t * 1_000 + k)).is_allowed())
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(allowed, MAX);
    assert_eq!(l.len(), MAX);
}

/// A drained key in ANY shard makes room for a new key, evicted when the
/// new key needs it.
#[test]
fn a_full_table_evicts_drained_keys_from_every_shard() {
    let clock = ManualClock::new(secs(100));
    let l = KeyedLimiter::builder(quota(5, 10))
        .max_keys(8)
        .shards(64)
        .build_with_clock(clock.clone());
    for k in 0..8u32 {
        assert!(l.check(&k).is_allowed());
    }
    clock.set(secs(105));
    assert!(l.check(&0).is_allowed()); // key 0 stays live until 115 s
    assert_eq!(
        l.check(&100),
        Decision::KeyTableFull {
            retry_after: Duration::from_secs(5)
        }
    );
    clock.set(secs(110));
    for k in 100..107u32 {
        assert!(
            l.check(&k).is_allowed(),
            "key {k} takes a drained key's slot"
        );
    }
    assert!(
        !l.check(&107).is_allowed(),
        "keys 0 and 100-106 are all live"
    );
    assert_eq!(l.len(), 8);
}

/// Under `AllowedOnly` a combined check is all or nothing, also when a
/// limit's key table is full: the limits that would allow record nothing.
/// (The peek pass used to skip the table-full check for a new key, so the
/// recording pass recorded in the first limit before the second refused.)
#[test]
fn an_allowed_only_set_records_nowhere_when_a_key_table_is_full() {
    let clock = ManualClock::default();
    let mut set = LimitSet::new(Policy::AllowedOnly, clock.clone());
    let roomy = set.add("roomy", quota(3, 60));
    let capped = set.add_with("capped", KeyedLimiter::builder(quota(3, 60)).max_keys(1));
    assert!(set.check(&[roomy, capped], &1u32).is_allowed());
    let d = set.check(&[roomy, capped], &2u32);
    assert_eq!(d.denied_by(), ["capped"]);
    assert!(matches!(
        d.decision("capped"),
        Some(Decision::KeyTableFull { .. })
    ));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(60)));
    assert_eq!(
        set.limiter(roomy).peek(&2),
        Decision::Allowed { remaining: 3 },
        "a denied all-or-nothing check used up an attempt of `roomy`"
    );
    assert_eq!(set.keys_held(), 2, "key 2 was not added anywhere");
}

/// Under `CountDenied` the other limits still record the attempt (it was an
/// attempt against each), once, however often the check retries to make
/// room.
#[test]
fn a_count_denied_set_records_once_in_the_limits_with_room() {
    let clock = ManualClock::default();
    let mut set = LimitSet::new(Policy::CountDenied, clock.clone());
    let roomy = set.add("roomy", quota(3, 60));
    let capped = set.add_with("capped", KeyedLimiter::builder(quota(3, 60)).max_keys(1));
    assert!(set.check(&[roomy, capped], &1u32).is_allowed());
    let d = set.check(&[roomy, capped], &2u32);
    assert_eq!(d.denied_by(), ["capped"]);
    assert_eq!(
        set.limiter(roomy).peek(&2),
        Decision::Allowed { remaining: 2 }
    );
    // The capped limit's refusal left no slot taken: once key 1 drains,
    // key 2 gets in.
    clock.advance(Duration::from_secs(60));
    assert!(set.check(&[capped], &2u32).is_allowed());
}

/// `seed` says how many records a full key table refused, instead of
/// dropping them silently.
#[test]
fn seed_counts_the_records_a_full_table_refused() {
    let l = KeyedLimiter::builder(quota(5, 60))
        .max_keys(2)
        .build_with_clock(ManualClock::new(secs(100)));
    let seeded = l.seed([
        ("a", secs(90)),
        ("b", secs(91)),
        ("c", secs(92)),
        ("c", secs(93)),
        ("a", secs(94)),
    ]);
    assert_eq!((seeded.restored(), seeded.refused()), (3, 2));
    assert!(!seeded.is_complete());
    assert_eq!(l.peek(&"a"), Decision::Allowed { remaining: 3 });
    // A record whose time finds a drained key makes room, as a check does.
    let seeded = l.seed([("d", secs(200))]);
    assert!(seeded.is_complete());
}

/// A key added at an older time (by `check_at` or `seed`) drains sooner
/// than the keys held; the table must make room for it on time, and a
/// refusal must name the earliest drain (a per-shard mark computed once
/// went stale: a spurious refusal 10 s after a key had drained).
#[test]
fn a_key_added_at_an_older_time_drains_on_time() {
    let l = KeyedLimiter::builder(quota(5, 60))
        .max_keys(2)
        .build_with_clock(ManualClock::default());
    assert!(l.check_at(&"a", secs(100)).is_allowed());
    assert!(l.check_at(&"b", secs(100)).is_allowed());
    assert_eq!(
        l.check_at(&"c", secs(101)),
        Decision::KeyTableFull {
            retry_after: Duration::from_secs(59)
        }
    );
    l.retain_recent_at(secs(200));
    assert!(l.is_empty());
    assert!(l.check_at(&"d", secs(50)).is_allowed(), "drains at 110 s");
    let seeded = l.seed([("e", secs(100))]); // drains at 160 s
    assert!(seeded.is_complete());
    assert_eq!(
        l.check_at(&"f", secs(105)),
        Decision::KeyTableFull {
            retry_after: Duration::from_secs(5)
        },
        "d drains at 110 s"
    );
    assert!(l.check_at(&"f", secs(120)).is_allowed(), "d has drained");
}

/// A keyed window is kept in `u32` offsets of at most 1 s ticks: a longer
/// window than 2^31 - 1 s would be shortened, making the limit looser, so
/// it is refused where the quota is made.
#[test]
fn a_window_longer_than_the_maximum_is_refused() {
    let ten = nz(10);
    assert!(Quota::new(ten, Quota::MAX_WINDOW).is_ok());
    let too_long = Quota::MAX_WINDOW + Duration::from_nanos(1);
    let err = Quota::new(ten, too_long).unwrap_err();
    assert_eq!(
        err,
        Error::WindowTooLong {
            window: too_long,
            max: Quota::MAX_WINDOW
        }
    );
    assert!(err.to_string().contains("2147483647.000000001s"), "{err}");
    // A table's window is checked when it is resolved.
    let table = LimitTable::new()
        .limit("ancient", "ANCIENT_PER_MIN", ten)
        .with_window(Duration::from_secs(u64::MAX));
    assert!(matches!(
        table.resolve_with(|_| None),
        Err(Error::WindowTooLong { .. })
    ));
    // The longest window is kept exactly: an attempt counts until it is a
    // whole window old.
    let clock = ManualClock::default();
    let l = KeyedLimiter::with_clock(Quota::new(nz(1), Quota::MAX_WINDOW).unwrap(), clock);
    let start = secs(1_000);
    assert!(l.check_at(&1, start).is_allowed());
    let almost = start.saturating_add(Quota::MAX_WINDOW - Duration::from_secs(1));
    assert_eq!(
        l.peek_at(&1, almost).retry_after(),
        Some(Duration::from_secs(1))
    );
    let whole = start.saturating_add(Quota::MAX_WINDOW);
    assert!(l.check_at(&1, whole).is_allowed());
}

/// A weighted check is allowed only if all of its attempts fit, and its
/// denial says when the same cost fits; a cost above the limit is an error
/// naming it.
#[test]
fn a_weighted_check_is_allowed_only_if_every_attempt_fits() {
    let clock = ManualClock::new(secs(100));
    let l = KeyedLimiter::with_clock(quota(5, 60), clock.clone());
    assert_eq!(
        l.check_n(&1, nz(3)).unwrap(),
        Decision::Allowed { remaining: 2 }
    );
    clock.set(secs(110));
    assert!(l.check(&1).is_allowed()); // 4 held: 3 at 100 s, 1 at 110 s
    clock.set(secs(120));
    // 2 asked, 1 left: denied, and the 2 are recorded (CountDenied), so
    // the window holds the last 5: 100, 100, 110, 120, 120. Room for 2
    // once at most 3 are held: when both attempts at 100 s leave, 160 s.
    assert_eq!(
        l.check_n(&1, nz(2)).unwrap(),
        Decision::Denied {
            retry_after: Duration::from_secs(40)
        }
    );
    assert!(!l.check_at(&1, secs(159)).is_allowed());
    assert_eq!(
        l.check_n(&1, nz(6)).unwrap_err(),
        Error::CostOverLimit {
            name: String::new(),
            cost: 6,
            limit: 5
        }
    );
    // The single window: the same rule.
    let direct = Limiter::with_clock(quota(5, 60), clock.clone());
    assert_eq!(
        direct.check_n(nz(5)).unwrap(),
        Decision::Allowed { remaining: 0 }
    );
    assert!(direct.check_n(nz(6)).is_err());
    // A set names the limit a cost can never fit.
    let mut set = LimitSet::new(Policy::CountDenied, clock);
    let big = set.add("big", quota(100, 60));
    let small = set.add("small", quota(2, 60));
    let err = set.check_n(&[big, small], &1, nz(3)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a cost of 3 attempts can never fit \"small\", a limit of 2 a window"
    );
}
