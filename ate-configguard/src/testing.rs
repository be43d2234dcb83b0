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

/// Whether every non-optional reference of every current and proposed
/// workload that is not dormant resolves, computed the slow, obvious way
/// (a workload that runs another's pod template, [`Workload::template_from`],
/// making that template's references; `false` if its state, or for a
/// proposed one the current state, holds no such template):
///
/// - in the state after the change, where a proposed config object that
///   is a hook no install, upgrade or sync creates, or one deleted once its
///   hooks succeed, is not there;
/// - for a proposed workload that is a hook of a phase (not Argo CD's
///   `Sync`), in a proposed config object that is a hook of the same phase
///   created before it, if there is one; else in the objects before the
///   change, for a hook that runs before it or an object that is a hook of
///   its phase created after it;
/// - for any other proposed workload reading a config object that Argo CD
///   syncs in a later wave, or that only a hook run after the change
///   creates, in that object as it is now as well;
///
/// where `ca.crt` of the root CA ConfigMap Kubernetes keeps
/// ([`CONTROL_PLANE_OBJECTS`](crate::manifest::CONTROL_PLANE_OBJECTS)) is there when no state gives the
/// ConfigMap, and `--prune` never deletes it; where a bulk load must keep
/// every key the object had before the change or in the previous
/// inventory ([`CheckInput::inventory`]), but the ones
/// [`CheckInput::retired`] retires; and where the image pull secrets of
/// the ServiceAccount a pod runs as are references of the pod (a proposed
/// pod runs as the proposed account if the change applies it before the
/// pod's workload: in an earlier phase, an earlier or the same sync wave,
/// or as a hook of its phase created first; else as the current one, if
/// there is one, else the proposed one; a Rollout's pods as its
/// template's).
pub fn naive_safe(input: &CheckInput) -> bool {
    // A workload that runs another's pod template (an Argo Rollout's
    // `workloadRef`) reads what that template reads: the template as its
    // own state has it, else (for a proposed one) as the current state has
    // it. (`check` refuses one whose template is in neither: unsafe here.)
    let run = |w: &Workload, fallback: &[Workload], mine: &[Workload]| {
        let Some(from) = &w.template_from else {
            return Some(w.clone());
        };
        let template = mine
            .iter()
            .chain(fallback)
            .find(|t| t.id == *from && t.template_from.is_none())?;
        let mut w = w.clone();
        w.references.clone_from(&template.references);
        w.service_account.clone_from(&template.service_account);
        Some(w)
    };
    // Kubernetes adds the pull secrets of the account a pod runs as to the
    // pod: references of its own. The first of `states` that holds the
    // account is the one its pods get.
    let with_account = |mut w: Workload, states: &[&Manifests]| {
        let account = states.iter().find_map(|m| {
            m.service_accounts
                .iter()
                .find(|a| a.namespace == w.id.namespace && a.name == w.service_account)
        });
        for name in account.iter().flat_map(|a| &a.image_pull_secrets) {
            let r = Reference::account_pull_secret(&w.service_account, name);
            w.references.push(r);
        }
        w
    };
    let mine = &input.current.workloads;
    let Some(current_workloads) = mine
        .iter()
        .map(|w| Some(with_account(run(w, &[], mine)?, &[&input.current])))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let mine = &input.proposed.workloads;
    // The proposed account is the one a proposed pod gets if the change
    // applies it first: the phases go before the change, with it, after
    // it, never (a hook of none); within the change, by sync wave; within
    // a hook phase, as config objects are created before its hooks.
    let rank = |h: Option<&Hook>| match h.map(|h| h.phase) {
        Some(HookPhase::BeforeChange) => 0,
        None | Some(HookPhase::WithChange) => 1,
        Some(HookPhase::AfterChange) => 2,
        Some(HookPhase::NotRun) => 3,
    };
    let proposed_first = |w: &Workload| {
        let Some(a) = (input.proposed.service_accounts.iter())
            .find(|a| a.namespace == w.id.namespace && a.name == w.service_account)
        else {
            return false;
        };
        match (rank(w.hook.as_ref()), rank(a.hook.as_ref())) {
            (1, 1) => a.sync_wave.unwrap_or(0) <= w.sync_wave.unwrap_or(0),
            (mine, its) if mine != its => its < mine,
            _ => match (&w.hook, &a.hook) {
                (Some(h), Some(ah)) => created_first(h, &w.id.name, ah, &a.name),
                _ => false,
            },
        }
    };
    let Some(proposed_workloads) = mine
        .iter()
        .map(|w| {
            let w = run(w, &input.current.workloads, mine)?;
            let states = if proposed_first(&w) {
                [&input.proposed, &input.current]
            } else {
                [&input.current, &input.proposed]
            };
            Some(with_account(w, &states))
        })
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let find =
        |objects: &'_ [ConfigObject], id: &ObjectId| objects.iter().find(|o| o.id == *id).cloned();
    let resolves = |o: &Option<ConfigObject>, r: &Reference| {
        o.as_ref()
            .is_some_and(|o| r.key.as_ref().is_none_or(|k| o.keys.contains(k)))
    };
    let id_of = |w: &Workload, r: &Reference| ObjectId {
        kind: r.kind,
        namespace: w.id.namespace.clone(),
        name: r.name.clone(),
    };
    // The proposed config object `o` a hook, of the same phase as workload
    // hook `h` of workload `w`, and created first.
    let created_first_object = |w: &Workload, h: &Hook, o: &ConfigObject| {
        (o.hook.as_ref()).is_some_and(|oh| created_first(h, &w.id.name, oh, &o.id.name))
    };
    // The config object `o` a hook of the same phase as workload hook `h`.
    let same_phase =
        |h: &Hook, o: &ConfigObject| o.hook.as_ref().is_some_and(|oh| oh.phase == h.phase);
    // Whether the proposed workload `w`'s reference `r` is judged by what
    // it sees when its hook phase runs, not by the state after the change.
    let by_hook = |w: &Workload, r: &Reference| match &w.hook {
        Some(h) if h.phase == HookPhase::BeforeChange => true,
        Some(h) if h.phase != HookPhase::WithChange => {
            find(&input.proposed.objects, &id_of(w, r)).is_some_and(|o| same_phase(h, &o))
        }
        _ => false,
    };
    for w in proposed_workloads.iter().filter(|w| w.dormant.is_none()) {
        let wave = w.sync_wave.unwrap_or(0);
        for r in w.references.iter().filter(|r| !r.optional) {
            let id = id_of(w, r);
            let mine = find(&input.proposed.objects, &id);
            let now = find(&input.current.objects, &id);
            let seen = match &w.hook {
                Some(h) if h.phase == HookPhase::BeforeChange => {
                    mine.filter(|o| created_first_object(w, h, o)).or(now)
                }
                // A hook of its phase: as made for it if created first,
                // else as it is now; anything else as after the change.
                Some(h) if h.phase != HookPhase::WithChange => match mine {
                    Some(o) if created_first_object(w, h, &o) => Some(o),
                    Some(o) if same_phase(h, &o) => now,
                    _ => continue,
                },
                _ => {
                    let later_wave = |o: &ConfigObject| {
                        o.hook
                            .as_ref()
                            .is_none_or(|h| h.phase == HookPhase::WithChange)
                            && o.sync_wave.unwrap_or(0) > wave
                    };
                    let post_hook = |o: &ConfigObject| {
                        o.hook.as_ref().is_some_and(|h| {
                            h.phase == HookPhase::AfterChange && h.deleted_after.is_none()
                        })
                    };
                    if mine.as_ref().is_some_and(|o| later_wave(o) || post_hook(o)) {
                        now
                    } else {
                        continue;
                    }
                }
            };
            // Kubernetes keeps it, if no state gives it.
            if seen.is_none() && kept_by_kubernetes(&id, r.key.as_ref()) {
                continue;
            }
            if !resolves(&seen, r) {
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
            // ... but not one whose annotation tells Helm or Argo CD to
            // leave it, nor a hook (neither tool prunes one).
            let kept = input
                .current
                .objects
                .iter()
                .any(|o| o.id == *id && (o.kept_on_prune.is_some() || o.hook.is_some()));
            !in_proposed(id)
                && (nothing || touched(&id.namespace))
                && !kept
                && !kept_by_kubernetes(id, None)
        }
        Deletion::Listed => input.delete.contains(id),
    };
    let lookup = |id: &ObjectId| -> Option<ConfigObject> {
        if let Some(o) = find(&input.proposed.objects, id) {
            let gone = o
                .hook
                .as_ref()
                .is_some_and(|h| h.phase == HookPhase::NotRun || h.deleted_after.is_some());
            return if gone { None } else { Some(o) };
        }
        find(&input.current.objects, id).filter(|_| !deleted(id))
    };
    let current = current_workloads.iter().map(|w| (w, false));
    let proposed = proposed_workloads.iter().map(|w| (w, true));
    for (w, is_proposed) in current.chain(proposed) {
        if w.dormant.is_some() {
            continue;
        }
        for r in &w.references {
            if r.optional || (is_proposed && by_hook(w, r)) {
                continue;
            }
            let id = id_of(w, r);
            let Some(obj) = lookup(&id) else {
                // Kubernetes keeps it, if no state gave it (none deleted it).
                let given = find(&input.current.objects, &id).is_some();
                if !given && kept_by_kubernetes(&id, r.key.as_ref()) {
                    continue;
                }
                return false;
            };
            // A pull secret must keep the key the kubelet reads, if it had
            // one; a new one must have it, in a Secret of its type (a
            // Secret without one is `Opaque`).
            let pull_key = |o: &ConfigObject| PULL_SECRET_KEYS.iter().any(|k| o.keys.contains(*k));
            let readable = |o: &ConfigObject| {
                let t = o.secret_type.as_deref().unwrap_or("Opaque");
                (o.keys.contains(".dockerconfigjson") && t == "kubernetes.io/dockerconfigjson")
                    || (o.keys.contains(".dockercfg") && t == "kubernetes.io/dockercfg")
            };
            if r.is_pull_secret() {
                match find(&input.current.objects, &id) {
                    Some(c) if pull_key(&c) && !pull_key(&obj) => return false,
                    None if !readable(&obj) => return false,
                    _ => {}
                }
            }
            if let Some(key) = &r.key
                && !obj.keys.contains(key)
            {
                return false;
            }
            // A bulk load keeps every key it had, now or in the previous
            // inventory, but one retired on purpose.
            let retired = |k: &String| {
                input
                    .retired
                    .iter()
                    .any(|rk| rk.object == id && rk.key == *k)
            };
            let previous = input.inventory.iter().flat_map(|inv| &inv.objects);
            let had = (input.current.objects.iter().chain(previous))
                .filter(|o| o.id == id)
                .flat_map(|o| &o.keys);
            if r.bulk && !had.into_iter().all(|k| obj.keys.contains(k) || retired(k)) {
                return false;
            }
            if let Some(cur) = find(&input.current.objects, &id) {
                // The API server refuses these changes (but a hook is made
                // again).
                if obj.hook.is_none()
                    && ((cur.immutable && (cur.keys != obj.keys || !obj.immutable))
                        || obj
                            .secret_type
                            .as_deref()
                            .is_some_and(|t| cur.secret_type.as_deref().unwrap_or("Opaque") != t)
                            && obj.sets_type_in_place())
                {
                    return false;
                }
            }
        }
    }
    true
}

/// Whether a proposed config object or ServiceAccount named `name`, a hook
/// `theirs`, is created before the workload hook `h` named `workload` runs:
/// of the same phase, and a lower weight, or the same weight and (where
/// Helm orders either) a name that sorts first or is the same (Helm
/// creates them before workloads).
fn created_first(h: &Hook, workload: &str, theirs: &Hook, name: &str) -> bool {
    theirs.phase == h.phase
        && (theirs.weight < h.weight
            || (theirs.weight == h.weight && (!(theirs.helm || h.helm) || name <= workload)))
}

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
