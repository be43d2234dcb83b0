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
    ConfigKind, ConfigObject, Hook, HookPhase, Inventory, Manifests, ObjectId, PULL_SECRET_KEYS,
    Reference, RetiredKey, ServiceAccount, Workload, WorkloadId,
};
use crate::{CheckInput, Deletion};

mod naive;

pub use naive::naive_safe;

fn kind() -> impl Strategy<Value = ConfigKind> {
    prop_oneof![Just(ConfigKind::ConfigMap), Just(ConfigKind::Secret)]
}

/// Now and then an Argo CD sync wave, 0 to 2.
fn sync_wave() -> impl Strategy<Value = Option<i64>> {
    proptest::option::weighted(0.3, 0i64..3)
}

/// A hook phase, any of the four.
fn phase() -> impl Strategy<Value = HookPhase> {
    prop_oneof![
        Just(HookPhase::BeforeChange),
        Just(HookPhase::WithChange),
        Just(HookPhase::AfterChange),
        Just(HookPhase::NotRun),
    ]
}

/// A hook of `phase`, of weight 0 to 2, ordered by Helm's rule or Argo
/// CD's, now and then deleted once its hooks succeed.
fn hook_of(phase: impl Strategy<Value = HookPhase>) -> impl Strategy<Value = Hook> {
    (
        phase,
        0i64..3,
        any::<bool>(),
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(phase, weight, helm, deleted)| Hook {
            annotation: format!("helm.sh/hook={phase:?}"),
            phase,
            weight,
            helm,
            deleted_after: deleted.then(|| "helm.sh/hook-delete-policy=hook-succeeded".into()),
        })
}

/// Now and then a hook of any phase.
fn hook() -> impl Strategy<Value = Option<Hook>> {
    proptest::option::weighted(0.3, hook_of(phase()))
}

/// A namespace: mostly `default`, now and then `other` (where references
/// of workloads in `default` do not reach, and `--prune` may not either).
fn namespace() -> impl Strategy<Value = &'static str> {
    prop_oneof![4 => Just("default"), 1 => Just("other")]
}

/// A config object, in `default` unless `namespaces`, then in either.
fn object(namespaces: bool) -> impl Strategy<Value = ConfigObject> {
    (
        (
            kind(),
            namespace().prop_map(move |ns| if namespaces { ns } else { "default" }),
        ),
        0u8..3,
        proptest::collection::btree_set(0u8..5, 0..4),
        proptest::bool::weighted(0.1),
        hook(),
        sync_wave(),
        proptest::bool::weighted(0.15),
        // A Secret's type, now and then, when the input gives it.
        proptest::option::weighted(
            0.6,
            prop_oneof![
                Just("Opaque"),
                Just("kubernetes.io/tls"),
                Just("kubernetes.io/dockerconfigjson")
            ],
        ),
    )
        .prop_map(
            |((kind, ns), n, keys, immutable, hook, sync_wave, kept, secret_type)| ConfigObject {
                value_digests: Default::default(),
                id: object_id(kind, ns, n),
                keys: keys.into_iter().map(key_name).collect(),
                binary_keys: BTreeSet::new(),
                immutable,
                secret_type: secret_type
                    .filter(|_| kind == ConfigKind::Secret)
                    .map(str::to_owned),
                hook,
                sync_wave,
                made_by: None,
                kept_on_prune: kept.then(|| "helm.sh/resource-policy=keep".into()),
            },
        )
}

fn objects(namespaces: bool) -> impl Strategy<Value = Vec<ConfigObject>> {
    proptest::collection::vec(object(namespaces), 0..6).prop_map(|v| {
        let mut seen = BTreeSet::new();
        v.into_iter()
            .filter(|o| seen.insert(o.id.clone()))
            .collect()
    })
}

/// Object `n` of the strategies (`obj0`, `obj1`, ...), in `namespace`.
fn object_id(kind: ConfigKind, namespace: &str, n: u8) -> ObjectId {
    ObjectId {
        kind,
        namespace: namespace.into(),
        name: format!("obj{n}"),
    }
}

/// Key `k` of the five the strategies use; the last is the key the kubelet
/// reads from an image pull secret.
fn key_name(k: u8) -> String {
    if k == 4 {
        PULL_SECRET_KEYS[0].into()
    } else {
        format!("K{k}")
    }
}

fn reference() -> impl Strategy<Value = Reference> {
    let read = (
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
            key: key.map(key_name),
            optional,
            unprojected: false,
        });
    // Now and then the root CA ConfigMap Kubernetes keeps in every
    // namespace: its `ca.crt` (as a pod's token volume reads it), all of
    // it, or another key.
    let root_ca = (
        prop_oneof![Just(Some("ca.crt")), Just(None), Just(Some("K0"))],
        proptest::bool::weighted(0.15),
    )
        .prop_map(|(key, optional)| Reference {
            container: Some("app".into()),
            site: "volumes[kube-api-access].projected.sources[1]".into(),
            kind: ConfigKind::ConfigMap,
            name: ROOT_CA.into(),
            bulk: key.is_none(),
            key: key.map(str::to_owned),
            optional,
            unprojected: false,
        });
    // Now and then an image pull secret (a whole Secret, not loaded).
    let pull = (0u8..3).prop_map(|n| Reference {
        container: None,
        site: "imagePullSecrets[0]".into(),
        kind: ConfigKind::Secret,
        name: format!("obj{n}"),
        key: None,
        bulk: false,
        optional: false,
        unprojected: false,
    });
    prop_oneof![8 => read, 1 => root_ca, 1 => pull]
}

/// The ConfigMap Kubernetes itself keeps in every namespace (one of
/// [`CONTROL_PLANE_OBJECTS`](crate::manifest::CONTROL_PLANE_OBJECTS)).
const ROOT_CA: &str = "kube-root-ca.crt";

/// Whether Kubernetes itself keeps `id`, and `key` in it, whatever the
/// input says: `ca.crt` of the root CA ConfigMap.
fn kept_by_kubernetes(id: &ObjectId, key: Option<&String>) -> bool {
    id.kind == ConfigKind::ConfigMap && id.name == ROOT_CA && key.is_none_or(|k| k == "ca.crt")
}

/// A ServiceAccount's name: the namespace's `default` one, or `sa1`.
fn account_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("default"), Just("sa1")]
}

/// Up to two ServiceAccounts, each with up to two pull secrets
/// (of the strategies' object names), now and then a hook or in a sync
/// wave.
fn service_accounts() -> impl Strategy<Value = Vec<ServiceAccount>> {
    let account = (
        namespace(),
        account_name(),
        proptest::collection::vec(0u8..3, 0..3),
        hook(),
        sync_wave(),
    )
        .prop_map(|(ns, name, secrets, hook, sync_wave)| ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
            image_pull_secrets: secrets.into_iter().map(|n| format!("obj{n}")).collect(),
            hook,
            sync_wave,
        });
    proptest::collection::vec(account, 0..3).prop_map(|v| {
        let mut seen = BTreeSet::new();
        v.into_iter()
            .filter(|a| seen.insert((a.namespace.clone(), a.name.clone())))
            .collect()
    })
}

fn workloads(prefix: &'static str) -> impl Strategy<Value = Vec<Workload>> {
    let workload = (
        proptest::collection::vec(reference(), 0..4),
        proptest::bool::weighted(0.15),
        hook(),
        sync_wave(),
        (namespace(), account_name()),
    );
    proptest::collection::vec(workload, 0..3).prop_map(move |ws| {
        ws.into_iter()
            .enumerate()
            .map(
                |(i, (references, dormant, hook, sync_wave, (ns, account)))| Workload {
                    id: WorkloadId {
                        kind: if dormant { "ReplicaSet" } else { "Deployment" }.into(),
                        namespace: ns.into(),
                        name: format!("{prefix}{i}"),
                    },
                    references,
                    dormant: dormant.then(|| "an old revision".into()),
                    service_account: account.into(),
                    hook,
                    sync_wave,
                    template_from: None,
                    kept_on_prune: None,
                    source: None,
                },
            )
            .collect()
    })
}

/// Now and then an Argo Rollout that runs the pod template of the `n`th of
/// the workloads it may name (`spec.workloadRef`), if there is one.
fn rollout() -> impl Strategy<Value = Option<usize>> {
    proptest::option::weighted(0.3, 0usize..4)
}

/// The Rollout `rollout()` picked, running the template of the `n`th of
/// `templates` (in its namespace); none if there are fewer.
fn rollout_of(n: Option<usize>, templates: &[&Workload]) -> Option<Workload> {
    let template = templates.get(n?)?;
    Some(Workload {
        id: WorkloadId {
            kind: "Rollout".into(),
            namespace: template.id.namespace.clone(),
            name: "rollout".into(),
        },
        references: Vec::new(),
        dormant: None,
        service_account: "default".into(),
        hook: None,
        sync_wave: None,
        template_from: Some(template.id.clone()),
        kept_on_prune: None,
        source: None,
    })
}

/// Keys to retire: the ones `held` picks among the keys of `current`'s
/// objects, and the `any` ones.
fn retired(
    current: &[ConfigObject],
    held: &[proptest::sample::Index],
    any: Vec<(ConfigKind, u8, u8)>,
) -> Vec<RetiredKey> {
    let keys: Vec<RetiredKey> = current
        .iter()
        .flat_map(|o| {
            o.keys.iter().map(|k| RetiredKey {
                object: o.id.clone(),
                key: k.clone(),
            })
        })
        .collect();
    let picked = held
        .iter()
        .filter(|_| !keys.is_empty())
        .map(|i| keys[i.index(keys.len())].clone());
    // Any key of an object the current state holds (one it does not is a
    // usage error, exit 2).
    let named = any
        .into_iter()
        .map(|(kind, n, k)| RetiredKey {
            object: object_id(kind, "default", n),
            key: key_name(k),
        })
        .filter(|r| current.iter().any(|o| o.id == r.object));
    picked.chain(named).collect()
}

/// The objects of a previous inventory: the ones `picks` picks among
/// `current` and `proposed`, each with the key it names added (once each).
fn previous_objects(
    current: &[ConfigObject],
    proposed: &[ConfigObject],
    picks: &[(proptest::sample::Index, u8)],
) -> Vec<ConfigObject> {
    let all: Vec<&ConfigObject> = current.iter().chain(proposed).collect();
    let mut objects: Vec<ConfigObject> = Vec::new();
    for (i, k) in picks.iter().filter(|_| !all.is_empty()) {
        let o = all[i.index(all.len())];
        match objects.iter_mut().find(|p| p.id == o.id) {
            Some(p) => {
                p.keys.insert(key_name(*k));
            }
            None => {
                let mut o = o.clone();
                o.keys.insert(key_name(*k));
                objects.push(o);
            }
        }
    }
    objects
}

/// A random transition: current objects, workloads and ServiceAccounts,
/// proposed ones, in two namespaces, a deletion mode, and now and then a
/// retired key, a previous inventory or the root CA ConfigMap that
/// Kubernetes keeps in the current state.
pub fn transition() -> impl Strategy<Value = CheckInput> {
    (
        objects(true),
        workloads("w"),
        objects(true),
        // Named after ("w") or before ("a") the objects ("obj"), which
        // decides Helm's order between hooks of one weight.
        prop_oneof![workloads("w"), workloads("a")],
        any::<bool>(),
        proptest::collection::vec((kind(), namespace(), 0u8..3), 0..2),
        (rollout(), rollout()),
        // Retired keys: mostly keys the current objects hold (which the
        // proposed state then often drops), now and then any key.
        (
            proptest::collection::vec(any::<proptest::sample::Index>(), 0..3),
            proptest::collection::vec((kind(), 0u8..3, 0u8..5), 0..2),
        ),
        (service_accounts(), service_accounts()),
        // Now and then the root CA ConfigMap, as a live state lists it.
        proptest::option::weighted(0.3, namespace()),
        // Now and then a previous inventory: objects of either state, one
        // with a key that neither may hold (lost since, by hand, say).
        proptest::option::weighted(
            0.3,
            proptest::collection::vec((any::<proptest::sample::Index>(), 0u8..5), 1..3),
        ),
    )
        .prop_map(
            |(
                mut cur_objs,
                mut cur_w,
                prop_objs,
                mut prop_w,
                prune,
                deletes,
                rollouts,
                (held, any),
                (cur_accounts, prop_accounts),
                root_ca,
                previous,
            )| {
                cur_objs.extend(root_ca.map(|ns| ConfigObject {
                    value_digests: Default::default(),
                    id: ObjectId {
                        kind: ConfigKind::ConfigMap,
                        namespace: ns.into(),
                        name: ROOT_CA.into(),
                    },
                    keys: BTreeSet::from(["ca.crt".to_owned()]),
                    binary_keys: BTreeSet::new(),
                    immutable: false,
                    secret_type: None,
                    hook: None,
                    sync_wave: None,
                    made_by: None,
                    kept_on_prune: None,
                }));
                // A proposed Rollout may run a template the proposed input
                // leaves as it is (one of the current state's).
                let (cur_rollout, prop_rollout) = rollouts;
                let cur_ro = rollout_of(cur_rollout, &cur_w.iter().collect::<Vec<_>>());
                let prop_ro = rollout_of(
                    prop_rollout,
                    &prop_w.iter().chain(&cur_w).collect::<Vec<_>>(),
                );
                cur_w.extend(cur_ro);
                prop_w.extend(prop_ro);
                let delete: Vec<ObjectId> = if prune {
                    Vec::new()
                } else {
                    deletes
                        .into_iter()
                        .map(|(kind, ns, n)| object_id(kind, ns, n))
                        .filter(|id| !prop_objs.iter().any(|o| o.id == *id))
                        // Naming an object that is not there is a usage
                        // error (exit 2): delete only what the current
                        // state holds.
                        .filter(|id| cur_objs.iter().any(|o| o.id == *id))
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect()
                };
                let retired = retired(&cur_objs, &held, any);
                let inventory = previous.map(|picks| Inventory {
                    version: Inventory::VERSION,
                    objects: previous_objects(&cur_objs, &prop_objs, &picks),
                });
                CheckInput {
                    current: Manifests {
                        objects: cur_objs,
                        workloads: cur_w,
                        notes: Vec::new(),
                        service_accounts: cur_accounts,
                        unplaced: 0,
                        crds: 0,
                    },
                    proposed: Manifests {
                        objects: prop_objs,
                        workloads: prop_w,
                        notes: Vec::new(),
                        service_accounts: prop_accounts,
                        unplaced: 0,
                        crds: 0,
                    },
                    inventory,
                    deletion: if prune {
                        Deletion::Prune
                    } else {
                        Deletion::Listed
                    },
                    delete,
                    retired,
                }
            },
        )
}

/// A transition that turns on one proposed workload with one reference
/// (and the pull secrets of its ServiceAccount, now and then), named
/// before or after the objects, or as one of them: a hook of any
/// phase, or a workload in an Argo CD sync wave. What it sees when it
/// starts is all that decides the check, so random cases often land on the
/// order (a hook's phase and weight, then Helm's name or Argo CD's kind; a
/// later wave; a hook that runs after the change) and on hooks deleted
/// again.
pub fn order_transition() -> impl Strategy<Value = CheckInput> {
    (
        objects(false),
        objects(false),
        reference(),
        // Named before, after or as one of the objects (`obj0`).
        prop_oneof![Just("a0"), Just("w0"), Just("obj0")],
        (
            proptest::option::weighted(0.6, hook_of(phase())),
            sync_wave(),
        ),
        any::<bool>(),
        // The pull secrets its account adds, now as after the change.
        (service_accounts(), service_accounts()),
    )
        .prop_map(
            |(cur_objs, mut prop_objs, r, name, (hook, wave), same_phase, accounts)| {
                // Half the time, every proposed config object is a hook of
                // the job's phase (where the order within a phase decides).
                if let (true, Some(job_hook)) = (same_phase, &hook) {
                    for (i, o) in prop_objs.iter_mut().enumerate() {
                        let h = o.hook.get_or_insert_with(|| Hook {
                            weight: i64::try_from(i % 3).unwrap_or(0),
                            ..job_hook.clone()
                        });
                        h.phase = job_hook.phase;
                    }
                }
                let job = Workload {
                    id: WorkloadId {
                        kind: "Job".into(),
                        namespace: "default".into(),
                        name: name.into(),
                    },
                    references: vec![r],
                    dormant: None,
                    service_account: "default".into(),
                    template_from: None,
                    kept_on_prune: None,
                    source: None,
                    sync_wave: match &hook {
                        Some(h) if h.phase != HookPhase::WithChange => None,
                        _ => wave,
                    },
                    hook,
                };
                let state = |objects, workloads, service_accounts| Manifests {
                    objects,
                    workloads,
                    notes: Vec::new(),
                    service_accounts,
                    unplaced: 0,
                    crds: 0,
                };
                let (cur_accounts, prop_accounts) = accounts;
                CheckInput {
                    current: state(cur_objs, Vec::new(), cur_accounts),
                    proposed: state(prop_objs, vec![job], prop_accounts),
                    inventory: None,
                    deletion: Deletion::Listed,
                    delete: Vec::new(),
                    retired: Vec::new(),
                }
            },
        )
}
