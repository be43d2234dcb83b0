//! One reference at one workload: which rule it breaks, if any, and the
//! finding that says so (one method per question a reference raises).

use std::collections::BTreeSet;

use super::ctx::{CONTROL_PLANE_OBJECTS, Ctx, kept_by_control_plane};
use crate::model::{
    Code, ConfigObject, Finding, Hook, HookPhase, ObjectId, PULL_SECRET_KEYS, PULL_SECRET_TYPES,
    Reference, Severity, Side, Workload,
};

/// How a warning about an optional reference ends.
pub(super) const OPTIONAL_NOTE: &str = " (optional reference: not a failure)";

/// A reference of a proposed workload that is a hook (of a phase other
/// than Argo CD's `Sync`): it resolves in the state when its phase runs
/// (before the change: the current one; after it, or not run by it: the
/// state after the change), or in a config object that is a hook of its
/// phase created before it. What only comes later (with the change, or
/// with a hook of its phase created after it) is a failure of its own
/// (`applied-after-hook`); anything else is checked as any proposed
/// reference is.
pub(super) fn check_hook(
    ctx: &Ctx<'_>,
    w: &Workload,
    hook: &Hook,
    r: &Reference,
    out: &mut BTreeSet<Finding>,
) {
    let target = r.target(&w.id.namespace);
    let brought = ctx.proposed_in.get(&target).copied();
    let earlier = brought.filter(|o| {
        o.hook
            .as_ref()
            .is_some_and(|h| hook.runs_after(&w.id.name, h, &o.id.name))
    });
    let before = hook.phase == HookPhase::BeforeChange;
    // A hook of its phase created after it is still as it is now.
    let later_of_phase = earlier.is_none()
        && brought.is_some_and(|o| o.hook.as_ref().is_some_and(|h| h.phase == hook.phase));
    let base = if before || later_of_phase {
        ctx.current.get(&target).copied()
    } else {
        ctx.proposed.get(&target).copied()
    };
    match earlier.or(base) {
        Some(o) if r.resolves_in(o) => {
            // Read in the state after the change: all of its checks.
            if earlier.is_none() && !before && !later_of_phase {
                check_reference(ctx, w, Side::Proposed, r, out);
            }
            return;
        }
        // A hook object made for it, without what it reads.
        Some(_) if earlier.is_some() => return check_reference(ctx, w, Side::Proposed, r, out),
        _ => {}
    }
    let later_hook = |phase: HookPhase| {
        if before {
            phase != HookPhase::NotRun
        } else {
            phase == hook.phase
        }
    };
    let later = if before {
        ctx.proposed.get(&target).copied()
    } else {
        None
    }
    .or(brought.filter(|o| o.hook.as_ref().is_some_and(|h| later_hook(h.phase))));
    let Some(later) = later.filter(|o| r.resolves_in(o)) else {
        return check_reference(ctx, w, Side::Proposed, r, out);
    };
    let what = match &r.key {
        Some(key) if base.is_some() => format!("key {key}"),
        _ => r.kind.to_string(),
    };
    let message = match (before, &later.hook) {
        (true, _) => format!(
            "runs as a hook before the change is applied ({}), and the {what} comes only with \
             the change: make the {} a hook that is created before it (a lower weight), or run \
             this workload after the change (post-install / post-upgrade, PostSync)",
            hook.annotation, r.kind
        ),
        (false, later) => format!(
            "runs as a hook ({}), and the {what} comes only with a hook of its phase created \
             after it ({}): give the {} a lower weight",
            hook.annotation,
            later.as_ref().map_or("", |h| h.annotation.as_str()),
            r.kind
        ),
    };
    out.insert(too_late(Code::AppliedAfterHook, w, r, target, message));
}

/// A reference of a proposed workload (no hook, or an Argo CD `Sync` one)
/// to a config object that the change brings only after the workload's new
/// pods start, so that they start while it is as it is now:
///
/// - in a later Argo CD sync wave (`later-sync-wave`): Argo CD waits for
///   the pods to be healthy before it syncs the next wave;
/// - with a hook that runs after the change (Helm `post-install` /
///   `post-upgrade`, Argo CD `PostSync`; `created-by-post-hook`): Argo CD
///   (or `helm --wait`) waits for the pods to be ready before it runs any.
///
/// What that object brings and the current one lacks is a failure of its
/// own. (What the state after the change lacks is [`check_reference`]'s to
/// report.)
pub(super) fn check_arrives_later(
    ctx: &Ctx<'_>,
    w: &Workload,
    r: &Reference,
    out: &mut BTreeSet<Finding>,
) {
    let target = r.target(&w.id.namespace);
    let wave = w.sync_wave.unwrap_or(0);
    let Some(later) = ctx.proposed_in.get(&target).copied() else {
        return;
    };
    let post_hook = later
        .hook
        .as_ref()
        .filter(|h| h.phase == HookPhase::AfterChange && h.kept_after());
    let in_later_wave = later
        .hook
        .as_ref()
        .is_none_or(|h| h.phase == HookPhase::WithChange)
        && later.sync_wave.unwrap_or(0) > wave;
    if post_hook.is_none() && !in_later_wave {
        return;
    }
    let now = ctx.current.get(&target);
    if !r.resolves_in(later) || now.is_some_and(|o| r.resolves_in(o)) {
        return;
    }
    let kind = r.kind;
    let (code, message) = match post_hook {
        Some(hook) => {
            let what = match &r.key {
                Some(key) if now.is_some() => format!("key {key}"),
                _ => kind.to_string(),
            };
            let message = format!(
                "the {what} comes only with a hook that runs after the change is applied \
                 ({}): its new pods cannot start until then, and Argo CD (or `helm --wait`) \
                 waits for them first; make the {kind} no hook, or one that runs before the \
                 change (pre-install / pre-upgrade, PreSync)",
                hook.annotation
            );
            (Code::CreatedByPostHook, message)
        }
        None => {
            let later_wave = later.sync_wave.unwrap_or(0);
            let what = match &r.key {
                Some(key) if now.is_some() => format!(
                    "the key {key} comes only with the {kind}'s change in wave {later_wave}"
                ),
                _ => format!("the {kind} is created only in wave {later_wave}"),
            };
            let message = format!(
                "is synced in wave {wave}, and {what}: its new pods cannot start, and Argo CD \
                 waits for them before the next wave; put the {kind} in wave {wave} or earlier"
            );
            (Code::LaterSyncWave, message)
        }
    };
    out.insert(too_late(code, w, r, target, message));
}

/// A proposed workload's reference to what the change brings only after
/// the workload starts: a failure, or a warning for an optional one.
fn too_late(
    code: Code,
    w: &Workload,
    r: &Reference,
    target: ObjectId,
    mut message: String,
) -> Finding {
    if r.optional {
        message.push_str(OPTIONAL_NOTE);
    }
    Finding {
        severity: if r.optional {
            Severity::Warning
        } else {
            Severity::Failure
        },
        code,
        workload: Some(w.id.clone()),
        side: Some(Side::Proposed),
        container: r.container.clone(),
        site: Some(r.site.clone()),
        object: Some(target),
        key: r.key.clone(),
        message,
        source: w.source.clone(),
    }
}

/// A reference that no pod reads (an Ingress's or a Gateway's TLS Secret)
/// is a warning when the proposed state deletes its object, or when the
/// input holds no such object to tell; nothing when it resolves.
pub(super) fn outside_note(ctx: &Ctx<'_>, note: &Finding) -> Option<Finding> {
    let Some(object) = note.object.as_ref() else {
        return Some(note.clone());
    };
    if ctx.proposed.contains_key(object) {
        return None;
    }
    let mut note = note.clone();
    note.message = if ctx.current.contains_key(object) {
        format!(
            "the proposed state deletes this {}, which is named outside any pod spec: \
             a warning, not a failure (this guard checks what pods read)",
            object.kind
        )
    } else {
        format!(
            "reference outside a pod spec to a {} the input does not hold (one that a \
             controller such as cert-manager writes, say): reported, not checked",
            object.kind
        )
    };
    Some(note)
}

pub(super) fn check_reference(
    ctx: &Ctx<'_>,
    w: &Workload,
    side: Side,
    r: &Reference,
    out: &mut BTreeSet<Finding>,
) {
    let target = r.target(&w.id.namespace);
    let mut site = Site {
        severity: if r.optional || w.dormant.is_some() {
            Severity::Warning
        } else {
            Severity::Failure
        },
        current: ctx.current.get(&target).copied(),
        target,
        ctx,
        w,
        side,
        r,
        out,
    };
    let Some(object) = ctx.proposed.get(&site.target).copied() else {
        site.absent();
        return;
    };
    site.refused_in_place(object);
    if r.unprojected {
        let file = r.key.as_deref().unwrap_or_default();
        site.report(
            Code::MissingKey,
            r.key.as_deref(),
            format!(
                "the subPath names {file}, which the volume's items do not project (an \
                 item's path renamed while the mount still names the old file?): the \
                 container gets an empty directory there"
            ),
        );
        return;
    }
    match &r.key {
        Some(key) if !object.readable_by(r, key) => site.missing_key(object, key),
        Some(_) => {}
        None if r.is_pull_secret() => site.pull_secret(object),
        None if r.bulk => site.bulk_keys(object),
        None => {}
    }
}

/// One reference of one workload being checked: what each question about
/// it needs, and where its findings go.
struct Site<'c, 'a> {
    ctx: &'c Ctx<'a>,
    w: &'c Workload,
    side: Side,
    r: &'c Reference,
    target: ObjectId,
    /// The object in the current state.
    current: Option<&'a ConfigObject>,
    /// A failure, or a warning for an optional reference or a dormant
    /// workload.
    severity: Severity,
    out: &'c mut BTreeSet<Finding>,
}

impl Site<'_, '_> {
    /// Records a finding about this reference.
    fn report(&mut self, code: Code, key: Option<&str>, mut message: String) {
        let (ctx, w, r, side) = (self.ctx, self.w, self.r, self.side);
        let target = self.target.clone();
        let retired = key.is_some_and(|k| ctx.retired.contains(&(&target, k)));
        // Retiring a key on purpose waives its loss from a bulk load (the
        // pods start without that variable or file), never a reference by
        // name (the pods would not start).
        let waived = retired && code == "bulk-key-removed";
        if retired && code == "missing-key" {
            message.push_str(
                " (it is retired, which waives its loss from bulk loads only: a reference by \
                 name still fails; remove the reference in an earlier step)",
            );
        }
        if r.optional {
            message.push_str(OPTIONAL_NOTE);
        }
        if let Some(why) = &w.dormant {
            message.push_str(&format!(
                " (not serving: {why}; not a failure, but starting it again would fail)"
            ));
        }
        // A pull secret a ServiceAccount names reaches every pod that runs
        // as it, of either template: one finding for both sides, with the
        // account's step, not the template's.
        let account = r
            .site
            .strip_prefix("serviceAccount ")
            .and_then(|rest| rest.split_once('.'))
            .map(|(name, _)| name);
        if let Some(account) = account.filter(|_| self.severity == Severity::Failure && !waived) {
            message.push_str(&format!(
                "; ServiceAccount {account} names it for every pod that runs as it: remove it \
                 from the account in an earlier step of its own, then delete it"
            ));
        } else if side == Side::Current && ctx.pruned.contains(&w.id) {
            message.push_str(
                "; the same change prunes this workload, whose pods serve until it is \
                 deleted: delete it in an earlier step of its own",
            );
        } else if side == Side::Current
            && !waived
            && self.severity == Severity::Failure
            && ctx.proposed_refs.get(&w.id).is_some_and(|refs| {
                !refs
                    .iter()
                    .any(|p| p.kind == r.kind && p.name == r.name && p.key == r.key)
            })
        {
            // The proposed template no longer reads it, but the current
            // one's pods serve until the rollout replaces them.
            message.push_str(
                "; the current template's pods still read it until the rollout replaces them: \
                 roll out the template without this reference in an earlier step of its own, \
                 then remove it",
            );
        }
        self.out.insert(Finding {
            severity: if waived {
                Severity::Warning
            } else {
                self.severity
            },
            code,
            workload: Some(w.id.clone()),
            side: Some(side),
            container: r.container.clone(),
            site: Some(r.site.clone()),
            object: Some(target.clone()),
            key: key.map(str::to_owned),
            message,
            source: w.source.clone(),
        });
    }

    /// The object is not in the proposed state (or only as a hook that is
    /// gone after the change).
    fn absent(&mut self) {
        let (ctx, r, current) = (self.ctx, self.r, self.current);
        let target = self.target.clone();
        if let Some(hook) = ctx
            .proposed_in
            .get(&target)
            .and_then(|o| o.hook.as_ref())
            .filter(|h| !h.kept_after())
        {
            let (why, fix) = match &hook.deleted_after {
                Some(policy) => (
                    format!("deleted once its hooks succeed ({policy})"),
                    "drop that delete policy, or make it no hook",
                ),
                None => (
                    format!(
                        "that no install, upgrade or sync creates ({})",
                        hook.annotation
                    ),
                    "make it no hook",
                ),
            };
            self.report(
                Code::MissingObject,
                r.key.as_deref(),
                format!(
                    "the proposed state has this {} only as a hook {why}: it is not there \
                     after the change; {fix}",
                    r.kind
                ),
            );
            return;
        }
        let other = ObjectId {
            kind: r.kind.other(),
            ..target.clone()
        };
        // Moved only if this kind is gone and the other is new: an
        // unrelated object of the other kind that was there all along is
        // no move.
        let moved = ctx.proposed.contains_key(&other)
            && current.is_some()
            && !ctx.current.contains_key(&other);
        let platform_key = CONTROL_PLANE_OBJECTS
            .iter()
            .find(|(kind, name, _)| target.kind == *kind && target.name == *name)
            .map(|(_, _, held)| *held);
        if moved {
            self.report(
                Code::Reclassified,
                r.key.as_deref(),
                format!(
                    "the proposed state has no {} of this name, only a {}: moved between kinds while still referenced",
                    r.kind,
                    r.kind.other()
                ),
            );
        } else if current.is_some() {
            self.report(
                Code::MissingObject,
                r.key.as_deref(),
                "the proposed state deletes this object while it is still referenced".into(),
            );
        } else if let (Some(held), Some(key)) = (platform_key, r.key.as_deref())
            && key != held
        {
            // The object is the platform's, there in every namespace; the
            // key is what is wrong.
            self.report(
                Code::MissingKey,
                Some(key),
                format!(
                    "{} is written into every namespace by the control plane and holds \
                     only the key {held}",
                    target.name
                ),
            );
        } else if !kept_by_control_plane(&target, r.key.as_deref()) {
            // The same kind and name in another namespace: a chart that
            // names the namespace on some documents and leaves it to the
            // applier on others (`helm install -n x`).
            let elsewhere: BTreeSet<&str> = ctx
                .current
                .keys()
                .chain(ctx.proposed.keys())
                .filter(|id| {
                    id.kind == target.kind
                        && id.name == target.name
                        && id.namespace != target.namespace
                })
                .map(|id| id.namespace.as_str())
                .collect();
            let hint = match elsewhere.first() {
                Some(ns) => format!(
                    "; a {} {} is in namespace {}: if the workload's manifest leaves its \
                     namespace to the applier (`helm install -n {ns}`), give --namespace {ns}",
                    target.kind,
                    target.name,
                    elsewhere.iter().copied().collect::<Vec<_>>().join(", ")
                ),
                None => format!(
                    " (one that a Job or a controller writes belongs in the current state: \
                     `kubectl get {} {} -n {} -o yaml`, read for its key names only)",
                    target.kind.to_string().to_lowercase(),
                    target.name,
                    target.namespace
                ),
            };
            self.report(
                Code::MissingObject,
                r.key.as_deref(),
                format!("the object exists in neither the current nor the proposed state{hint}"),
            );
        }
    }

    /// What the API server refuses to change in place: the apply fails for
    /// this object, which keeps what it had, and what the change meant to
    /// bring to it never comes. (Not for a hook: Helm and Argo CD delete
    /// one and make it again, by default.)
    fn refused_in_place(&mut self, object: &ConfigObject) {
        let current = self.current;
        if let Some(cur) = current.filter(|_| object.hook.is_none()) {
            if cur.immutable && cur.keys != object.keys {
                self.report(
                    Code::ImmutableChanged,
                    None,
                    "the object is immutable but the proposed state changes its keys".into(),
                );
            } else if cur.immutable && !object.immutable {
                // Once set, `immutable` cannot be unset: the API server
                // refuses the update, and the object keeps what it had.
                self.report(
                    Code::ImmutableChanged,
                    None,
                    "the object is immutable but the proposed state drops immutable: true, which \
                     the API server refuses (delete it in an earlier step, or give it a new name)"
                        .into(),
                );
            } else if cur.immutable
                && let Some(key) = cur.value_digests.iter().find_map(|(k, d)| {
                    object
                        .value_digests
                        .get(k)
                        .is_some_and(|new| new != d)
                        .then_some(k)
                })
            {
                // Compared by keyed digests alone (the values are never
                // kept): the API server refuses any change of an
                // immutable object's data.
                self.report(
                    Code::ImmutableChanged,
                    Some(key),
                    "the object is immutable but the proposed state changes this key's value, \
                     which the API server refuses: the apply fails for it, and its pods keep the \
                     old value (create it under a new name and point the workloads at it)"
                        .into(),
                );
            }
            // A current Secret that spells no type was made without one:
            // it is `Opaque`, as the API server stored it.
            if let Some(new) = &object.secret_type
                && let was = cur.secret_type.as_deref().unwrap_or("Opaque")
                && was != new
                && object.sets_type_in_place()
            {
                self.report(
                    Code::ImmutableChanged,
                    None,
                    format!(
                        "the proposed state changes this Secret's type from {was} to {new}, which \
                     the API server refuses: the apply fails for it, and it keeps its old keys \
                     (delete it in an earlier step, or give it a new name)"
                    ),
                );
            }
        }
    }

    /// The key the reference names is not in the proposed object.
    fn missing_key(&mut self, object: &ConfigObject, key: &str) {
        let (ctx, current) = (self.ctx, self.current);
        let target = self.target.clone();
        let moved = ctx.holders(&target.namespace, key);
        let r = self.r;
        let was_there = current.is_some_and(|c| c.readable_by(r, key));
        let mut msg = if object.keys.contains(key) {
            // There, but in binaryData, which env does not read.
            format!(
                "the proposed ConfigMap holds this key in binaryData, and {} reads data only \
                 (the kubelet: couldn't find key {key} in ConfigMap): keep it in data, or \
                 mount it as a file",
                if r.site.starts_with("envFrom[") {
                    "envFrom"
                } else {
                    "env (configMapKeyRef)"
                }
            )
        } else if was_there {
            "the proposed state removes this key while it is still referenced".to_owned()
        } else {
            "the key exists in neither the current nor the proposed object".to_owned()
        };
        if !moved.is_empty() {
            let moved = moved.join(", ");
            msg.push_str(&if was_there {
                format!("; it is now in {moved} (a stale reference to the old source remains)")
            } else {
                // Not a move: a reference that names the wrong object
                // (a key renamed in a generator, its user not updated).
                format!("; a key of this name is in {moved}, which this reference does not name")
            });
        }
        if let Some(canon) = yaml_boolean(key).filter(|c| object.keys.contains(*c)) {
            msg.push_str(&format!(
                "; the object holds the key {canon}, which an unquoted `{key}:` in its \
                     manifest makes (YAML reads it as a boolean): quote that key"
            ));
        }
        self.report(Code::MissingKey, Some(key), msg);
    }

    /// An image pull secret: the kubelet reads one key of it, from a
    /// Secret of the matching type.
    fn pull_secret(&mut self, object: &ConfigObject) {
        let current = self.current;
        match current {
            Some(current) => {
                if !object.keys.iter().any(|k| pull_key(k))
                    && let Some(had) = current.keys.iter().find(|k| pull_key(k))
                {
                    self.report(
                        Code::MissingKey,
                        Some(had),
                        "the proposed state removes the key the kubelet reads from an image \
                         pull secret: it would skip the secret and pull without credentials"
                            .into(),
                    );
                }
            }
            // A new one must be one the kubelet reads: the key, in a
            // Secret of its type (the API server makes a Secret without a
            // type `Opaque`, and so do the controllers that make them).
            None => {
                let secret_type = object.secret_type.as_deref().unwrap_or("Opaque");
                if !PULL_SECRET_TYPES
                    .iter()
                    .any(|(key, t)| object.keys.contains(*key) && secret_type == *t)
                {
                    let (key, message) = match PULL_SECRET_TYPES
                        .iter()
                        .find(|(key, _)| object.keys.contains(*key))
                    {
                        Some((key, t)) => (
                            *key,
                            format!(
                                "the kubelet reads {key} only from a Secret of type {t}, and \
                                 this new image pull secret is {secret_type}: it would skip it \
                                 and pull without credentials"
                            ),
                        ),
                        None => (
                            PULL_SECRET_KEYS[0],
                            "this new image pull secret has neither .dockerconfigjson nor \
                             .dockercfg: the kubelet would skip it and pull without credentials"
                                .to_owned(),
                        ),
                    };
                    self.report(
                        Code::MissingKey,
                        Some(key),
                        format!(
                            "{message} (if it exists already, give the live Secret in the \
                             current state)"
                        ),
                    );
                }
            }
        }
    }

    /// A bulk load (`envFrom`, a volume without `items`, a volume
    /// plugin's whole Secret): every key it had that goes.
    fn bulk_keys(&mut self, object: &ConfigObject) {
        let (ctx, r, current) = (self.ctx, self.r, self.current);
        let target = self.target.clone();
        // What the reference loads: envFrom skips a ConfigMap's binaryData.
        let mut before: BTreeSet<&String> = current
            .map(|c| c.keys.iter().filter(|k| c.readable_by(r, k)).collect())
            .unwrap_or_default();
        if let Some(inv) = ctx.inventory.get(&target) {
            before.extend(inv.iter());
        }
        for key in before {
            if object.keys.contains(key) && !object.readable_by(r, key) {
                self.report(
                    Code::BulkKeyRemoved,
                    Some(key),
                    "the proposed ConfigMap moves this key to binaryData, which envFrom skips: \
                     the variable silently disappears (keep it in data)"
                        .into(),
                );
            } else if !object.keys.contains(key) {
                let retired = ctx.retired.contains(&(&target, key.as_str()));
                let message = match (r.is_plugin_secret(), retired) {
                    (false, true) => {
                        "the object is bulk-loaded and the proposed state removes this \
                             key, which is retired: the variable or file goes from its pods \
                             (not a failure)"
                    }
                    (false, false) => {
                        "the object is bulk-loaded and the proposed state removes this \
                             key: the variable or file silently disappears"
                    }
                    (true, true) => {
                        "the volume plugin is given every key of this Secret, and the \
                             proposed state removes this key, which is retired: the plugin \
                             no longer gets it (not a failure)"
                    }
                    (true, false) => {
                        "the volume plugin is given every key of this Secret, and the \
                             proposed state removes this key: a mount that needs it fails, \
                             and pods that mount it never start (retire the key if the \
                             plugin does not read it)"
                    }
                };
                self.report(Code::BulkKeyRemoved, Some(key), message.into());
            }
        }
    }
}

/// The key (`true` or `false`) kubectl makes of `word` written as an
/// unquoted map key, if YAML 1.1 reads it as a boolean (`on`, `Yes`, `n`,
/// ...). For `true` and `false` themselves that is the word: a reference
/// to one is missing only where the object holds no such key, so no hint.
fn yaml_boolean(word: &str) -> Option<&'static str> {
    const TRUE: [&str; 4] = ["y", "yes", "on", "true"];
    const FALSE: [&str; 4] = ["n", "no", "off", "false"];
    let is = |words: &[&str]| words.iter().any(|w| w.eq_ignore_ascii_case(word));
    if is(&TRUE) {
        Some("true")
    } else if is(&FALSE) {
        Some("false")
    } else {
        None
    }
}

/// Whether `key` is one the kubelet reads a pull secret's credentials from.
fn pull_key(key: &str) -> bool {
    PULL_SECRET_KEYS.contains(&key)
}
