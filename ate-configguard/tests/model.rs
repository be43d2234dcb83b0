//! Property test: the guard agrees with a naive resolver on random states,
//! so it never passes a state where a non-optional reference breaks.

use ate_configguard::check;
use ate_configguard::testing::{naive_safe, order_transition, transition};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn guard_agrees_with_naive_resolver(input in transition()) {
        let report = check(&input).unwrap();
        prop_assert_eq!(report.is_safe(), naive_safe(&input), "{}", report.to_text());
    }

    #[test]
    fn a_hook_or_a_sync_wave_sees_what_the_naive_resolver_sees(input in order_transition()) {
        let report = check(&input).unwrap();
        prop_assert_eq!(report.is_safe(), naive_safe(&input), "{}", report.to_text());
    }
}

/// The strategies reach the cases they are for: a passing model test says
/// little if they never make a Rollout, a retired key, a pull secret's key,
/// a typed Secret, an account's pull secret (from an account the change
/// applies after the pods, or a hook account), a key only the previous
/// inventory holds or a read of the root CA ConfigMap Kubernetes keeps, never delete or leave out of
/// a prune what another namespace holds, or never order hooks within a
/// phase.
#[test]
fn the_strategies_reach_every_case_they_are_for() {
    use ate_configguard::manifest::{ConfigKind, HookPhase, PULL_SECRET_KEYS};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeSet;

    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    for _ in 0..2_000 {
        let input = transition().new_tree(&mut runner).unwrap().current();
        let workloads = || {
            input
                .current
                .workloads
                .iter()
                .chain(&input.proposed.workloads)
        };
        let keys =
            || (input.current.objects.iter().chain(&input.proposed.objects)).flat_map(|o| &o.keys);
        if workloads().any(|w| w.template_from.is_some()) {
            seen.insert("a Rollout");
        }
        if !input.retired.is_empty() {
            seen.insert("a retired key");
        }
        if keys().any(|k| k == PULL_SECRET_KEYS[0]) {
            seen.insert("a pull secret's key");
        }
        if keys().any(|k| k == "K0") {
            seen.insert("another key");
        }
        // A pod that gets a pull secret from its account, in `other`.
        if workloads().any(|w| {
            let states = [&input.proposed, &input.current];
            (states.iter().flat_map(|m| &m.service_accounts)).any(|a| {
                a.namespace == w.id.namespace
                    && a.name == w.service_account
                    && !a.image_pull_secrets.is_empty()
            })
        }) {
            seen.insert("an account's pull secret");
        }
        // A pod of the change whose account, with a pull secret, the change
        // applies only after it (a later wave, a hook after the change or
        // none it runs), while the account is there now.
        if (input.proposed.workloads.iter()).any(|w| {
            let late = |a: &&ate_configguard::manifest::ServiceAccount| match &a.hook {
                None => a.sync_wave.unwrap_or(0) > w.sync_wave.unwrap_or(0),
                Some(h) => h.phase > HookPhase::WithChange,
            };
            let account = |m: &ate_configguard::Manifests| {
                (m.service_accounts.iter())
                    .find(|a| a.namespace == w.id.namespace && a.name == w.service_account)
                    .cloned()
            };
            w.hook.is_none()
                && account(&input.current).is_some()
                && account(&input.proposed)
                    .is_some_and(|a| late(&&a) && !a.image_pull_secrets.is_empty())
        }) {
            seen.insert("an account the change applies after its pods");
        }
        if workloads().any(|w| w.id.namespace == "other") {
            seen.insert("a workload in another namespace");
        }
        // A workload in `other` reading an object there (not the root CA,
        // which the strategies place apart).
        let objects = || input.current.objects.iter().chain(&input.proposed.objects);
        if workloads().any(|w| {
            w.id.namespace == "other"
                && (w.references.iter())
                    .filter(|r| r.name != "kube-root-ca.crt")
                    .any(|r| objects().any(|o| o.id.namespace == "other" && o.id.name == r.name))
        }) {
            seen.insert("a read in another namespace");
        }
        if input.delete.iter().any(|id| id.namespace == "other") {
            seen.insert("a deletion in another namespace");
        }
        // A key only the previous inventory holds, which the proposed
        // object lacks.
        let only_previous = |o: &&ate_configguard::manifest::ConfigObject| {
            let has = |objects: &[ate_configguard::manifest::ConfigObject], k: &String| {
                objects.iter().any(|p| p.id == o.id && p.keys.contains(k))
            };
            (input.proposed.objects.iter()).any(|p| p.id == o.id)
                && (o.keys.iter())
                    .any(|k| !has(&input.current.objects, k) && !has(&input.proposed.objects, k))
        };
        if (input.inventory.iter())
            .flat_map(|inv| &inv.objects)
            .any(|o| only_previous(&o))
        {
            seen.insert("a key only the previous inventory holds");
        }
        // The root CA ConfigMap Kubernetes keeps: read where no state
        // gives it, and given by the current state.
        let root_ca = |ns: &str| {
            (input.current.objects.iter())
                .any(|o| o.id.name == "kube-root-ca.crt" && o.id.namespace == ns)
        };
        for w in workloads() {
            if w.references.iter().any(|r| r.name == "kube-root-ca.crt") {
                if root_ca(&w.id.namespace) {
                    seen.insert("a read of the root CA a state gives");
                } else {
                    seen.insert("a read of the root CA no state gives");
                }
            }
        }
        if objects().any(|o| o.secret_type.is_some()) {
            seen.insert("a Secret of a type");
        }
        assert!(
            objects().all(|o| o.secret_type.is_none() || o.id.kind == ConfigKind::Secret),
            "a type on a ConfigMap: {input:?}"
        );
        // A prune that leaves a namespace the proposed input does not touch.
        let touches = |ns: &str| {
            (input.proposed.objects.iter()).any(|o| o.id.namespace == ns)
                || (input.proposed.workloads.iter()).any(|w| w.id.namespace == ns)
                || (input.proposed.service_accounts.iter()).any(|a| a.namespace == ns)
        };
        if input.deletion == ate_configguard::Deletion::Prune
            && touches("default")
            && !touches("other")
            && input
                .current
                .objects
                .iter()
                .any(|o| o.id.namespace == "other")
        {
            seen.insert("a prune that leaves a namespace");
        }
        let input = order_transition().new_tree(&mut runner).unwrap().current();
        let job = &input.proposed.workloads[0];
        if (input.proposed.service_accounts.iter())
            .chain(&input.current.service_accounts)
            .any(|a| {
                a.namespace == job.id.namespace
                    && a.name == job.service_account
                    && !a.image_pull_secrets.is_empty()
            })
        {
            seen.insert("a hook's account's pull secret");
        }
        let Some(hook) = &job.hook else { continue };
        // Its account a hook of its phase, with a pull secret.
        if (input.proposed.service_accounts.iter()).any(|a| {
            a.namespace == job.id.namespace
                && a.name == job.service_account
                && !a.image_pull_secrets.is_empty()
                && a.hook.as_ref().is_some_and(|h| h.phase == hook.phase)
        }) {
            seen.insert("a hook's account a hook of its phase");
        }
        // Only Argo CD's `Sync` hooks are in a sync wave, as the loader reads
        // them.
        if hook.phase == HookPhase::WithChange {
            if job.sync_wave.is_some_and(|w| w > 0) {
                seen.insert("a Sync hook in a later wave");
            }
        } else {
            assert_eq!(job.sync_wave, None, "{hook:?}");
        }
        let same_phase = |h: &&ate_configguard::manifest::Hook| h.phase == hook.phase;
        let weights: BTreeSet<i64> = (input.proposed.objects.iter())
            .filter_map(|o| o.hook.as_ref().filter(same_phase))
            .map(|h| h.weight)
            .collect();
        if weights.len() > 1 {
            seen.insert("config hooks of one phase and several weights");
        }
    }
    let all = [
        "a Rollout",
        "a retired key",
        "a pull secret's key",
        "another key",
        "an account's pull secret",
        "an account the change applies after its pods",
        "a workload in another namespace",
        "a read in another namespace",
        "a deletion in another namespace",
        "a Secret of a type",
        "a key only the previous inventory holds",
        "a read of the root CA a state gives",
        "a read of the root CA no state gives",
        "a prune that leaves a namespace",
        "a hook's account's pull secret",
        "a hook's account a hook of its phase",
        "a Sync hook in a later wave",
        "config hooks of one phase and several weights",
    ];
    assert_eq!(seen, all.into_iter().collect());
}
