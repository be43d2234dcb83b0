//! Property tests: the limiter against the naive full-log model.

use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::testing::{Model, traffic};
use ate_ratelimit::{Clock, Decision, KeyedLimiter, LimitSet, ManualClock, Policy, Quota};
use proptest::prelude::*;

fn quota(n: u32, window_ms: u64) -> Quota {
    Quota::new(
        NonZeroU32::new(n).unwrap(),
        Duration::from_millis(window_ms),
    )
}

fn run(
    policy: Policy,
    n: u32,
    window_ms: u64,
    steps: Vec<ate_ratelimit::testing::Step>,
    evict: bool,
) -> Result<(), TestCaseError> {
    let q = quota(n, window_ms);
    let clock = ManualClock::default();
    let limiter = KeyedLimiter::builder(q)
        .policy(policy)
        .build_with_clock(clock.clone());
    let mut model = Model::new(q, policy);
    for step in steps {
        clock.advance(step.advance);
        if evict {
            // Evicting drained keys must never change a decision.
            limiter.retain_recent();
        }
        let got = limiter.check(&step.key);
        let want = model.check(step.key, clock.now());
        prop_assert_eq!(got, want, "key {} at {:?}", step.key, clock.now());
        for k in 0..4u8 {
            prop_assert_eq!(limiter.peek(&k), model.peek(&k, clock.now()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn count_denied_matches_full_log_model(n in 1u32..6, w in 1u64..20_000, steps in traffic(4, 80)) {
        run(Policy::CountDenied, n, w, steps, false)?;
    }

    #[test]
    fn allowed_only_matches_full_log_model(n in 1u32..6, w in 1u64..20_000, steps in traffic(4, 80)) {
        run(Policy::AllowedOnly, n, w, steps, false)?;
    }

    #[test]
    fn evicting_idle_keys_never_changes_a_decision(n in 1u32..6, w in 1u64..20_000, steps in traffic(4, 80)) {
        run(Policy::CountDenied, n, w, steps, true)?;
    }

    #[test]
    fn combined_check_matches_models(
        policy in prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
        na in 1u32..5, nb in 1u32..8, w in 100u64..10_000,
        steps in traffic(3, 80),
        routes in proptest::collection::vec(0u8..3, 80),
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
        for (step, route) in steps.into_iter().zip(routes) {
            clock.advance(step.advance);
            let now = clock.now();
            let ids = match route { 0 => vec![a, shared], 1 => vec![b, shared], _ => vec![shared] };
            let idx: Vec<usize> = match route { 0 => vec![0, 2], 1 => vec![1, 2], _ => vec![2] };
            let got = set.check(&ids, &step.key);
            let peeks: Vec<Decision> = idx.iter().map(|&i| models[i].peek(&step.key, now)).collect();
            let all_allow = peeks.iter().all(Decision::is_allowed);
            let want: Vec<Decision> = match policy {
                Policy::CountDenied => idx.iter().map(|&i| models[i].check(step.key, now)).collect(),
                Policy::AllowedOnly if all_allow => idx.iter().map(|&i| models[i].check(step.key, now)).collect(),
                Policy::AllowedOnly => peeks,
            };
            let got_decisions: Vec<Decision> = got.decisions.iter().map(|(_, d)| *d).collect();
            prop_assert_eq!(&got_decisions, &want);
            prop_assert_eq!(got.is_allowed(), want.iter().all(Decision::is_allowed));
            let denied: Vec<&str> = got.denied_by();
            let want_denied: Vec<&str> = idx.iter().zip(&want)
                .filter(|(_, d)| !d.is_allowed())
                .map(|(&i, _)| ["route_a", "route_b", "shared"][i])
                .collect();
            prop_assert_eq!(denied, want_denied);
            if !got.is_allowed() {
                let wait = idx.iter().map(|&i| models[i].wait(&step.key, now)).max().unwrap();
                prop_assert_eq!(got.retry_after(), Some(wait));
            }
        }
    }
}
