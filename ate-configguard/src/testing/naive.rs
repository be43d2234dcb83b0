//! The naive resolver, [`naive_safe`]: the rules of [`crate::check`]
//! written again the slow, obvious way, independently, so that the
//! property tests can hold one against the other.

use crate::model::{
    ConfigObject, Hook, HookPhase, Manifests, ObjectId, PULL_SECRET_KEYS, Reference, Workload,
};
use crate::{CheckInput, Deletion};

use super::kept_by_kubernetes;

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
    let Some((current, proposed)) = workloads_as_run(input) else {
        return false;
    };
    hooks_see_what_they_read(input, &proposed) && after_change_resolves(input, &current, &proposed)
}

/// The current and proposed workloads as their pods run: with the pod
/// template they run (an Argo Rollout's `workloadRef`) and the pull
/// secrets of the account they run as. `None` if a template is missing.
fn workloads_as_run(input: &CheckInput) -> Option<(Vec<Workload>, Vec<Workload>)> {
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
    let mine = &input.current.workloads;
    let current = mine
        .iter()
        .map(|w| Some(with_account(run(w, &[], mine)?, &[&input.current])))
        .collect::<Option<Vec<_>>>()?;
    let mine = &input.proposed.workloads;
    let proposed = mine
        .iter()
        .map(|w| {
            let w = run(w, &input.current.workloads, mine)?;
            let states = if proposed_account_first(input, &w) {
                [&input.proposed, &input.current]
            } else {
                [&input.current, &input.proposed]
            };
            Some(with_account(w, &states))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((current, proposed))
}

/// `w` with the pull secrets of the account its pods run as: Kubernetes
/// adds them to the pod, references of its own. The first of `states`
/// that holds the account is the one its pods get.
fn with_account(mut w: Workload, states: &[&Manifests]) -> Workload {
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
}

/// Whether the proposed workload `w`'s pods get the proposed account: the
/// change applies it first. The phases go before the change, with it,
/// after it, never (a hook of none); within the change, by sync wave;
/// within a hook phase, as config objects are created before its hooks.
fn proposed_account_first(input: &CheckInput, w: &Workload) -> bool {
    let rank = |h: Option<&Hook>| match h.map(|h| h.phase) {
        Some(HookPhase::BeforeChange) => 0,
        None | Some(HookPhase::WithChange) => 1,
        Some(HookPhase::AfterChange) => 2,
        Some(HookPhase::NotRun) => 3,
    };
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
}

fn find(objects: &[ConfigObject], id: &ObjectId) -> Option<ConfigObject> {
    objects.iter().find(|o| o.id == *id).cloned()
}

fn resolves(o: &Option<ConfigObject>, r: &Reference) -> bool {
    o.as_ref()
        .is_some_and(|o| r.key.as_ref().is_none_or(|k| o.keys.contains(k)))
}

fn id_of(w: &Workload, r: &Reference) -> ObjectId {
    ObjectId {
        kind: r.kind,
        namespace: w.id.namespace.clone(),
        name: r.name.clone(),
    }
}

/// Whether the proposed config object `o` is a hook of the same phase as
/// workload hook `h` of workload `w`, and created first.
fn created_first_object(w: &Workload, h: &Hook, o: &ConfigObject) -> bool {
    (o.hook.as_ref()).is_some_and(|oh| created_first(h, &w.id.name, oh, &o.id.name))
}

/// Whether the config object `o` is a hook of the same phase as workload
/// hook `h`.
fn same_phase(h: &Hook, o: &ConfigObject) -> bool {
    o.hook.as_ref().is_some_and(|oh| oh.phase == h.phase)
}

/// Whether the proposed workload `w`'s reference `r` is judged by what it
/// sees when its hook phase runs, not by the state after the change.
fn by_hook(input: &CheckInput, w: &Workload, r: &Reference) -> bool {
    match &w.hook {
        Some(h) if h.phase == HookPhase::BeforeChange => true,
        Some(h) if h.phase != HookPhase::WithChange => {
            find(&input.proposed.objects, &id_of(w, r)).is_some_and(|o| same_phase(h, &o))
        }
        _ => false,
    }
}

/// Whether every proposed workload's references resolve in what it sees
/// when it runs, where that is not the state after the change: a hook in
/// what its phase made first or what is there now; any other workload, in
/// the objects a later wave or an after-change hook makes, as they are
/// now too.
fn hooks_see_what_they_read(input: &CheckInput, proposed: &[Workload]) -> bool {
    for w in proposed.iter().filter(|w| w.dormant.is_none()) {
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
    true
}

/// Whether `--prune` deletes `id`: within the namespaces the proposed
/// input touches (all of them when it touches none), but not one whose
/// annotation tells Helm or Argo CD to leave it, nor a hook (neither tool
/// prunes one); or whether it is listed for deletion.
fn deleted(input: &CheckInput, id: &ObjectId) -> bool {
    let in_proposed = |id: &ObjectId| input.proposed.objects.iter().any(|o| o.id == *id);
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
    match input.deletion {
        Deletion::Prune => {
            let nothing = input.proposed.objects.is_empty()
                && input.proposed.workloads.is_empty()
                && input.proposed.service_accounts.is_empty();
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
    }
}

/// `id` in the state after the change: a proposed hook no phase creates,
/// or one deleted once its hooks succeed, is not there.
fn after_change(input: &CheckInput, id: &ObjectId) -> Option<ConfigObject> {
    if let Some(o) = find(&input.proposed.objects, id) {
        let gone = o
            .hook
            .as_ref()
            .is_some_and(|h| h.phase == HookPhase::NotRun || h.deleted_after.is_some());
        return if gone { None } else { Some(o) };
    }
    find(&input.current.objects, id).filter(|_| !deleted(input, id))
}

/// Whether every reference of every current and proposed workload (but a
/// proposed one's judged by its hook) resolves after the change.
fn after_change_resolves(input: &CheckInput, current: &[Workload], proposed: &[Workload]) -> bool {
    let current = current.iter().map(|w| (w, false));
    let proposed = proposed.iter().map(|w| (w, true));
    for (w, is_proposed) in current.chain(proposed) {
        if w.dormant.is_some() {
            continue;
        }
        for r in &w.references {
            if r.optional || (is_proposed && by_hook(input, w, r)) {
                continue;
            }
            if !holds_after_change(input, &id_of(w, r), r) {
                return false;
            }
        }
    }
    true
}

/// Whether reference `r` to `id` holds after the change: the object is
/// there (or Kubernetes keeps it), has the key, keeps a pull secret's
/// key, keeps every key of a bulk load, and is not changed in a way the
/// API server refuses.
fn holds_after_change(input: &CheckInput, id: &ObjectId, r: &Reference) -> bool {
    let id = id.clone();
    let Some(obj) = after_change(input, &id) else {
        // Kubernetes keeps it, if no state gave it (none deleted it).
        let given = find(&input.current.objects, &id).is_some();
        return !given && kept_by_kubernetes(&id, r.key.as_ref());
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
