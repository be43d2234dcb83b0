//! Testing support (feature `test-util`): a naive resolver written
//! independently of [`crate::check`], and proptest strategies for random
//! config states, workloads and proposed transitions.
//!
//! # Example
//!
//! ```
//! use ate_configguard::testing::{naive_safe, transition};
//! use proptest::prelude::*;
//!
//! proptest!(|(input in transition())| {
//!     let report = ate_configguard::check(&input).unwrap();
//!     prop_assert_eq!(report.is_safe(), naive_safe(&input));
//! });
//! ```

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::model::{
    ConfigKind, ConfigObject, Manifests, ObjectId, PreApplyHook, Reference, Workload, WorkloadId,
};
use crate::{CheckInput, Deletion};

/// Whether every non-optional reference of every current and proposed
/// workload that is not dormant resolves in the proposed state, computed
/// the slow, obvious way; for a proposed workload that runs as a hook
/// before the change, in the state before it (the current objects, or a
/// proposed hook object of the same id created before that workload); for
/// one that Argo CD syncs in an earlier wave than an object it reads, in
/// that object as it is now as well.
pub fn naive_safe(input: &CheckInput) -> bool {
    // A proposed workload that starts before the change reaches an object
    // it reads sees that object as it is now (or, for a hook, as a hook of
    // the proposed input created before it made it): a hook that runs
    // before the change, or a workload Argo CD syncs in an earlier wave.
    for w in input
        .proposed
        .workloads
        .iter()
        .filter(|w| w.dormant.is_none())
    {
        let wave = w.sync_wave.unwrap_or(0);
        for r in w.references.iter().filter(|r| !r.optional) {
            let named = |o: &&ConfigObject| {
                o.id.kind == r.kind && o.id.namespace == w.id.namespace && o.id.name == r.name
            };
            let mut proposed = input.proposed.objects.iter().filter(named);
            let now = input.current.objects.iter().find(named);
            let seen = match &w.pre_apply {
                Some(hook) => proposed
                    .find(|o| {
                        let weight_first = |h: &PreApplyHook| h.weight < hook.weight;
                        let same_weight_first = |h: &PreApplyHook| {
                            h.weight == hook.weight
                                && (!(h.helm || hook.helm) || o.id.name < w.id.name)
                        };
                        o.pre_apply
                            .as_ref()
                            .is_some_and(|h| weight_first(h) || same_weight_first(h))
                    })
                    .or(now),
                None if proposed
                    .any(|o| o.pre_apply.is_none() && o.sync_wave.unwrap_or(0) > wave) =>
                {
                    now
                }
                None => continue,
            };
            if !seen.is_some_and(|o| r.key.as_ref().is_none_or(|k| o.keys.contains(k))) {
                return false;
            }
        }
    }
    let in_proposed = |id: &ObjectId| input.proposed.objects.iter().any(|o| o.id == *id);
    // `--prune` deletes within the namespaces the proposed input touches
    // (all of them when it touches none).
    let touched = |ns: &str| {
        input.proposed.objects.iter().any(|o| o.id.namespace == ns)
            || input
                .proposed
                .workloads
                .iter()
                .any(|w| w.id.namespace == ns)
            || input
                .proposed
                .service_accounts
                .iter()
                .any(|a| a.namespace == ns)
    };
    let deleted = |id: &ObjectId| match input.deletion {
        Deletion::Prune => {
            let nothing = input.proposed.objects.is_empty()
                && input.proposed.workloads.is_empty()
                && input.proposed.service_accounts.is_empty();
            !in_proposed(id) && (nothing || touched(&id.namespace))
        }
        Deletion::Listed => input.delete.contains(id),
    };
    let lookup = |id: &ObjectId| -> Option<&ConfigObject> {
        if let Some(o) = input.proposed.objects.iter().find(|o| o.id == *id) {
            return Some(o);
        }
        input
            .current
            .objects
            .iter()
            .find(|o| o.id == *id && !deleted(id))
    };
    let current_of = |id: &ObjectId| input.current.objects.iter().find(|o| o.id == *id);
    // (A proposed hook that runs before the change was judged above.)
    let after = input
        .proposed
        .workloads
        .iter()
        .filter(|w| w.pre_apply.is_none());
    for w in input.current.workloads.iter().chain(after) {
        if w.dormant.is_some() {
            continue;
        }
        for r in &w.references {
            if r.optional {
                continue;
            }
            let id = ObjectId {
                kind: r.kind,
                namespace: w.id.namespace.clone(),
                name: r.name.clone(),
            };
            let Some(obj) = lookup(&id) else { return false };
            if let Some(key) = &r.key
                && !obj.keys.contains(key)
            {
                return false;
            }
            if let Some(cur) = current_of(&id) {
                if r.bulk && !cur.keys.iter().all(|k| obj.keys.contains(k)) {
                    return false;
                }
                if cur.immutable && cur.keys != obj.keys {
                    return false;
                }
            }
        }
    }
    true
}

fn kind() -> impl Strategy<Value = ConfigKind> {
    prop_oneof![Just(ConfigKind::ConfigMap), Just(ConfigKind::Secret)]
}

/// Now and then an Argo CD sync wave, 0 to 2.
fn sync_wave() -> impl Strategy<Value = Option<i64>> {
    proptest::option::weighted(0.3, 0i64..3)
}

/// Now and then a hook that runs before the change, of weight 0 to 2,
/// ordered by Helm's rule or Argo CD's.
fn pre_apply() -> impl Strategy<Value = Option<PreApplyHook>> {
    proptest::option::weighted(
        0.3,
        (0i64..3, any::<bool>()).prop_map(|(weight, helm)| PreApplyHook {
            annotation: "helm.sh/hook=pre-upgrade".into(),
            weight,
            helm,
        }),
    )
}

fn object() -> impl Strategy<Value = ConfigObject> {
    (
        kind(),
        0u8..3,
        proptest::collection::btree_set(0u8..5, 0..4),
        proptest::bool::weighted(0.1),
        pre_apply(),
        sync_wave(),
    )
        .prop_map(
            |(kind, n, keys, immutable, pre_apply, sync_wave)| ConfigObject {
                id: ObjectId {
                    kind,
                    namespace: "default".into(),
                    name: format!("obj{n}"),
                },
                keys: keys.into_iter().map(|k| format!("K{k}")).collect(),
                immutable,
                pre_apply,
                sync_wave,
                made_by: None,
            },
        )
}

fn objects() -> impl Strategy<Value = Vec<ConfigObject>> {
    proptest::collection::vec(object(), 0..6).prop_map(|v| {
        let mut seen = BTreeSet::new();
        v.into_iter()
            .filter(|o| seen.insert(o.id.clone()))
            .collect()
    })
}

fn reference() -> impl Strategy<Value = Reference> {
    (
        kind(),
        0u8..3,
        proptest::option::weighted(0.6, 0u8..5),
        proptest::bool::weighted(0.15),
    )
        .prop_map(|(kind, n, key, optional)| Reference {
            container: Some("app".into()),
            site: if key.is_some() {
                "env[X].valueFrom".into()
            } else {
                "envFrom[0]".into()
            },
            kind,
            name: format!("obj{n}"),
            bulk: key.is_none(),
            key: key.map(|k| format!("K{k}")),
            optional,
        })
}

fn workloads(prefix: &'static str) -> impl Strategy<Value = Vec<Workload>> {
    let workload = (
        proptest::collection::vec(reference(), 0..4),
        proptest::bool::weighted(0.15),
        pre_apply(),
        sync_wave(),
    );
    proptest::collection::vec(workload, 0..3).prop_map(move |ws| {
        ws.into_iter()
            .enumerate()
            .map(
                |(i, (references, dormant, pre_apply, sync_wave))| Workload {
                    id: WorkloadId {
                        kind: if dormant { "ReplicaSet" } else { "Deployment" }.into(),
                        namespace: "default".into(),
                        name: format!("{prefix}{i}"),
                    },
                    references,
                    dormant: dormant.then(|| "an old revision".into()),
                    service_account: "default".into(),
                    pre_apply,
                    sync_wave,
                },
            )
            .collect()
    })
}

/// A random transition: current objects and workloads, proposed ones, and
/// a deletion mode.
pub fn transition() -> impl Strategy<Value = CheckInput> {
    (
        objects(),
        workloads("w"),
        objects(),
        // Named after ("w") or before ("a") the objects ("obj"), which
        // decides Helm's order between hooks of one weight.
        prop_oneof![workloads("w"), workloads("a")],
        any::<bool>(),
        proptest::collection::vec((kind(), 0u8..3), 0..2),
    )
        .prop_map(|(cur_objs, cur_w, prop_objs, prop_w, prune, deletes)| {
            let delete: Vec<ObjectId> = if prune {
                Vec::new()
            } else {
                deletes
                    .into_iter()
                    .map(|(kind, n)| ObjectId {
                        kind,
                        namespace: "default".into(),
                        name: format!("obj{n}"),
                    })
                    .filter(|id| !prop_objs.iter().any(|o| o.id == *id))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect()
            };
            CheckInput {
                current: Manifests {
                    objects: cur_objs,
                    workloads: cur_w,
                    notes: Vec::new(),
                    service_accounts: Vec::new(),
                },
                proposed: Manifests {
                    objects: prop_objs,
                    workloads: prop_w,
                    notes: Vec::new(),
                    service_accounts: Vec::new(),
                },
                inventory: None,
                deletion: if prune {
                    Deletion::Prune
                } else {
                    Deletion::Listed
                },
                delete,
            }
        })
}

/// A transition that turns on one proposed workload with one reference,
/// named before or after the objects: a hook that runs before the change,
/// or a workload in an Argo CD sync wave. What it sees when it starts is
/// all that decides the check, so random cases often land on the order
/// (a hook's weight, then Helm's name or Argo CD's kind; a later wave).
pub fn order_transition() -> impl Strategy<Value = CheckInput> {
    (
        objects(),
        objects(),
        reference(),
        (0i64..3, any::<bool>(), prop_oneof![Just("a0"), Just("w0")]),
        (any::<bool>(), sync_wave()),
    )
        .prop_map(
            |(cur_objs, prop_objs, r, (weight, helm, name), (hook, wave))| {
                let job = Workload {
                    id: WorkloadId {
                        kind: "Job".into(),
                        namespace: "default".into(),
                        name: name.into(),
                    },
                    references: vec![r],
                    dormant: None,
                    service_account: "default".into(),
                    pre_apply: hook.then(|| PreApplyHook {
                        annotation: "helm.sh/hook=pre-upgrade".into(),
                        weight,
                        helm,
                    }),
                    sync_wave: if hook { None } else { wave },
                };
                let state = |objects, workloads| Manifests {
                    objects,
                    workloads,
                    notes: Vec::new(),
                    service_accounts: Vec::new(),
                };
                CheckInput {
                    current: state(cur_objs, Vec::new()),
                    proposed: state(prop_objs, vec![job]),
                    inventory: None,
                    deletion: Deletion::Listed,
                    delete: Vec::new(),
                }
            },
        )
}
