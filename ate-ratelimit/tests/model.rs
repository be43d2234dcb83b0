//! Property tests: the limiter against the naive full-log model.

use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::testing::{Model, max_in_any_window, traffic};
use ate_ratelimit::{
    Decision, KeyedLimiter, LimitSet, Limiter, Policy, Quota,
    clock::{Clock, ManualClock, Timestamp},
};
use proptest::prelude::*;

fn quota(n: u32, window_ms: u64) -> Quota {
    Quota::new(
        NonZeroU32::new(n).unwrap(),
        Duration::from_millis(window_ms),
    )
    .unwrap()
}

fn run(
    policy: Policy,
    n: u32,
    window_ms: u64,
    steps: Vec<ate_ratelimit::testing::Step>,
    asks: Vec<Ask>,
    evict: bool,
) -> Result<(), TestCaseError> {
    let q = quota(n, window_ms);
    let clock = ManualClock::default();
    let limiter = KeyedLimiter::builder(q)
        .policy(policy)
        .build_with_clock(clock.clone());
    let mut model = Model::new(q, policy);
    let asks = asks.into_iter().chain(std::iter::repeat(Ask::Check));
    for (step, ask) in steps.into_iter().zip(asks) {
        clock.advance(step.advance);
        if evict {
            // Evicting drained keys must never change a decision.
            limiter.retain_recent();
        }
        let now = clock.now();
        let ask = ask.within(n);
        let got = match ask {
            Ask::Check => limiter.check(&step.key),
            Ask::CheckN(cost) => limiter.check_n(&step.key, nz(cost)).unwrap(),
            Ask::Peek => limiter.peek(&step.key),
            Ask::TryAcquire => limiter.try_acquire_at(&step.key, now),
        };
        let want = ask.model(&mut model, step.key, now);
        prop_assert_eq!(got, want, "{:?} by key {} at {:?}", ask, step.key, now);
        for k in 0..4u8 {
            prop_assert_eq!(limiter.peek(&k), model.peek(&k, clock.now()));
        }
    }
    Ok(())
}

/// A keyed limiter asked at times anywhere between its ticks (1 µs for
/// these windows): it keeps compact ticks, rounding a recorded attempt up
/// and "now" down, so off the tick grid it may only ever be STRICTER than
/// the exact rule, never more lenient. (On the grid it is exact: the model
/// tests above.) Every attempt it allows, the exact rule allows, and no
/// trailing window ever holds more than N allowed attempts.
fn run_off_grid(
    policy: Policy,
    n: u32,
    window_ns: u64,
    advances: Vec<u64>,
) -> Result<(), TestCaseError> {
    let window = Duration::from_nanos(window_ns);
    let q = Quota::new(NonZeroU32::new(n).unwrap(), window).unwrap();
    let clock = ManualClock::default();
    let limiter = KeyedLimiter::builder(q)
        .policy(policy)
        .build_with_clock(clock.clone());
    // The exact rule, fed what the limiter recorded.
    let mut exact = Model::new(q, Policy::CountDenied);
    let mut allowed = Vec::new();
    for advance in advances {
        clock.advance(Duration::from_nanos(advance));
        let now = clock.now();
        let got = limiter.check(&0u8);
        let want = exact.peek(&0, now);
        prop_assert!(
            !got.is_allowed() || want.is_allowed(),
            "allowed at {now:?} where the exact rule denies ({want:?})"
        );
        if got.is_allowed() {
            allowed.push(now);
        }
        if got.is_allowed() || policy == Policy::CountDenied {
            exact.record(0, now);
        }
    }
    prop_assert!(max_in_any_window(&allowed, window) <= n as usize);
    Ok(())
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// What a limiter is asked at each step.
#[derive(Debug, Clone, Copy)]
enum Ask {
    Check,
    /// A weighted check of this many attempts at once.
    CheckN(u32),
    Peek,
    TryAcquire,
}

impl Ask {
    /// The model's answer for `key` at `now` (recording as the limiter
    /// must).
    fn model<K: std::hash::Hash + Eq + Clone>(
        self,
        model: &mut Model<K>,
        key: K,
        now: Timestamp,
    ) -> Decision {
        match self {
            Self::Check => model.check(key, now),
            Self::CheckN(cost) => model.check_n(key, now, cost),
            Self::Peek => model.peek(&key, now),
            // Recorded only if allowed, whatever the policy.
            Self::TryAcquire if model.peek(&key, now).is_allowed() => model.check(key, now),
            Self::TryAcquire => model.peek(&key, now),
        }
    }
}

impl Ask {
    /// A weighted check's cost held to the limit `n` (more is an error,
    /// tested on its own).
    fn within(self, n: u32) -> Self {
        match self {
            Self::CheckN(cost) => Self::CheckN(cost.min(n)),
            other => other,
        }
    }
}

fn ask() -> impl Strategy<Value = Ask> {
    prop_oneof![
        6 => Just(Ask::Check),
        2 => (1u32..6).prop_map(Ask::CheckN),
        1 => Just(Ask::Peek),
        1 => Just(Ask::TryAcquire),
    ]
}

/// The single-window [`Limiter`] against the model, through every entry
/// point (check, peek, try-acquire).
fn run_direct(
    policy: Policy,
    n: u32,
    window_ms: u64,
    steps: Vec<(Duration, Ask)>,
) -> Result<(), TestCaseError> {
    let q = quota(n, window_ms);
    let clock = ManualClock::default();
    let limiter = Limiter::with_policy(q, policy, clock.clone());
    let mut model = Model::new(q, policy);
    for (advance, ask) in steps {
        clock.advance(advance);
        let now = clock.now();
        let ask = ask.within(n);
        let got = match ask {
            Ask::Check => limiter.check(),
            Ask::CheckN(cost) => limiter.check_n(nz(cost)).unwrap(),
            Ask::Peek => limiter.peek(),
            Ask::TryAcquire => limiter.try_acquire_at(now),
        };
        let want = ask.model(&mut model, (), now);
        prop_assert_eq!(got, want, "{:?} at {:?}", ask, now);
    }
    Ok(())
}

/// Bursts and gaps sized so windows of up to a few hundred attempts fill,
/// drain and refill (the ring grows past its inline slots and shrinks).
fn bursty(max_len: usize) -> impl Strategy<Value = Vec<(Duration, Ask)>> {
    let advance = prop_oneof![
        8 => Just(0u64),
        4 => 1u64..50,
        1 => 50u64..3_000,
    ];
    proptest::collection::vec(
        (advance, ask()).prop_map(|(ms, a)| (Duration::from_millis(ms), a)),
        0..=max_len,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn direct_limiter_matches_full_log_model(
        policy in prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
        n in 1u32..6, w in 1u64..20_000,
        steps in traffic(1, 80).prop_flat_map(|t| {
            let len = t.len();
            (Just(t), proptest::collection::vec(ask(), len))
        }).prop_map(|(t, asks)| t.into_iter().map(|s| s.advance).zip(asks).collect()),
    ) {
        run_direct(policy, n, w, steps)?;
    }

    #[test]
    fn large_windows_match_full_log_model(
        policy in prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
        n in 1u32..300, w in 100u64..2_000,
        steps in bursty(1_500),
    ) {
        run_direct(policy, n, w, steps)?;
    }

    #[test]
    fn keyed_limiter_off_the_tick_grid_is_never_more_lenient(
        policy in prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
        n in 1u32..5, window_ns in 1_000u64..20_000,
        advances in proptest::collection::vec(prop_oneof![
            4 => 0u64..1_500,
            1 => 1_500u64..40_000,
        ], 0..120),
    ) {
        run_off_grid(policy, n, window_ns, advances)?;
    }

    #[test]
    fn count_denied_matches_full_log_model(
        n in 1u32..6, w in 1u64..20_000, steps in traffic(4, 80),
        asks in proptest::collection::vec(ask(), 80),
    ) {
        run(Policy::CountDenied, n, w, steps, asks, false)?;
    }

    #[test]
    fn allowed_only_matches_full_log_model(
        n in 1u32..6, w in 1u64..20_000, steps in traffic(4, 80),
        asks in proptest::collection::vec(ask(), 80),
    ) {
        run(Policy::AllowedOnly, n, w, steps, asks, false)?;
    }

    #[test]
    fn evicting_idle_keys_never_changes_a_decision(
        n in 1u32..6, w in 1u64..20_000, steps in traffic(4, 80),
        asks in proptest::collection::vec(ask(), 80),
    ) {
        run(Policy::CountDenied, n, w, steps, asks, true)?;
    }

    #[test]
    fn combined_check_matches_models(
        policy in prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
        na in 1u32..5, nb in 1u32..8, w in 100u64..10_000,
        steps in traffic(3, 80),
        routes in proptest::collection::vec(0u8..3, 80),
        costs in proptest::collection::vec(prop_oneof![3 => Just(1u32), 1 => 2u32..5], 80),
    ) {
        let clock = ManualClock::default();
        let mut set = LimitSet::new(policy, clock.clone());
        let a = set.add("route_a", quota(na, w));
        let b = set.add("route_b", quota(na + 1, w));
        let shared = set.add("shared", quota(nb, w));
        let mut models = [
            Model::new(quota(na, w), policy),
            Model::new(quota(na + 1, w), policy),
            Model::new(quota(nb, w), policy),
        ];
        for ((step, route), cost) in steps.into_iter().zip(routes).zip(costs) {
            clock.advance(step.advance);
            let now = clock.now();
            let ids = match route { 0 => vec![a, shared], 1 => vec![b, shared], _ => vec![shared] };
            let idx: Vec<usize> = match route { 0 => vec![0, 2], 1 => vec![1, 2], _ => vec![2] };
            // A cost no touched limit can hold is an error, naming it.
            let smallest = idx.iter().map(|&i| [na, na + 1, nb][i]).min().unwrap();
            if cost > smallest {
                let err = set.check_n(&ids, &step.key, nz(cost)).unwrap_err();
                let is_cost_error = matches!(err, ate_ratelimit::Error::CostOverLimit { .. });
                prop_assert!(is_cost_error, "{:?}", err);
                continue;
            }
            let got = if cost == 1 {
                set.check(&ids, &step.key)
            } else {
                set.check_n(&ids, &step.key, nz(cost)).unwrap()
            };
            let peeks: Vec<Decision> = idx.iter().map(|&i| models[i].peek_n(&step.key, now, cost)).collect();
            let all_allow = peeks.iter().all(Decision::is_allowed);
            let want: Vec<Decision> = match policy {
                Policy::CountDenied => idx.iter().map(|&i| models[i].check_n(step.key, now, cost)).collect(),
                Policy::AllowedOnly if all_allow => idx.iter().map(|&i| models[i].check_n(step.key, now, cost)).collect(),
                Policy::AllowedOnly => peeks,
            };
            let got_decisions: Vec<Decision> = got.decisions().iter().map(|(_, d)| *d).collect();
            prop_assert_eq!(&got_decisions, &want);
            prop_assert_eq!(got.is_allowed(), want.iter().all(Decision::is_allowed));
            let denied: Vec<&str> = got.denied_by();
            let want_denied: Vec<&str> = idx.iter().zip(&want)
                .filter(|(_, d)| !d.is_allowed())
                .map(|(&i, _)| ["route_a", "route_b", "shared"][i])
                .collect();
            prop_assert_eq!(denied, want_denied);
            if !got.is_allowed() {
                let wait = idx.iter().map(|&i| models[i].wait_n(&step.key, now, cost)).max().unwrap();
                prop_assert_eq!(got.retry_after(), Some(wait));
            }
        }
    }
}

/// The reference model is public (`test-util`): users compare their own
/// integration against it, so its own rules are pinned here, not only
/// through the limiters that agree with it.
#[test]
fn the_reference_model_counts_records_and_waits_exactly() {
    let q = Quota::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(10)).unwrap();
    let t = Timestamp::from_secs;
    let mut m = Model::new(q, Policy::CountDenied);
    m.record(1u8, t(100));
    assert_eq!(m.count(&1, t(100)), 1);
    assert_eq!(m.wait(&1, t(100)), Duration::ZERO);
    assert_eq!(m.peek(&1, t(100)), Decision::Allowed { remaining: 1 });
    m.record(1, t(104));
    // Two inside, the limit: allowed again once the one at 100 s leaves.
    assert_eq!(m.count(&1, t(105)), 2);
    assert_eq!(m.wait(&1, t(105)), Duration::from_secs(5));
    assert_eq!(
        m.peek(&1, t(105)),
        Decision::Denied {
            retry_after: Duration::from_secs(5)
        }
    );
    // Exactly a window later the one at 100 s no longer counts.
    assert_eq!(m.count(&1, t(110)), 1);
    assert_eq!(m.wait(&1, t(110)), Duration::ZERO);
    // count_within: the attempts in (now - span, now].
    let s = Duration::from_secs;
    assert_eq!(m.count_within(&1, t(110), s(10)), 1, "100 s is a span back");
    assert_eq!(m.count_within(&1, t(110), s(11)), 2);
    assert_eq!(m.count_within(&1, t(103), s(60)), 1, "104 s is after now");
    assert_eq!(m.count_within(&2, t(110), s(60)), 0, "another key");
    // A check records per the policy: a denial counts under CountDenied.
    assert!(!m.check(1, t(106)).is_allowed());
    assert_eq!(m.count(&1, t(106)), 3);
    let mut allowed_only = Model::new(q, Policy::AllowedOnly);
    allowed_only.record(1u8, t(100));
    allowed_only.record(1, t(104));
    assert!(!allowed_only.check(1, t(106)).is_allowed());
    assert_eq!(allowed_only.count(&1, t(106)), 2);
}
