//! The rule: every workload serving during or after the transition must
//! have each non-optional reference resolve in the PROPOSED config state.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap, HashSet};

use crate::error::InputError;
use crate::model::{
    Code, Finding, Hook, HookPhase, Inventory, Manifests, ObjectId, Reference, RetiredKey,
    ServiceAccount, Severity, Side, Workload, WorkloadId,
};

mod ctx;
mod ids;
mod inventory;
mod report;
mod sites;
pub use ctx::CONTROL_PLANE_OBJECTS;
use ctx::{Ctx, Index, accounts, index, is_control_plane_object, unique};
pub use ids::{parse_object_id, parse_retired_key};
pub use inventory::inventory;
use inventory::inventory_index;
pub use report::{Report, Verdict};
use sites::{check_arrives_later, check_hook, check_reference, outside_note};

/// Which current objects the proposed state deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Deletion {
    /// Only the objects listed (possibly none). The default: an object
    /// absent from the proposed input is left as it is.
    #[default]
    Listed,
    /// Every current object absent from the proposed input is deleted (as
    /// `helm upgrade` or `kubectl apply --prune` would) in the namespaces
    /// the proposed input touches (as `kubectl apply --prune` does: it
    /// prunes only the namespaces of what it applied; an empty proposed
    /// input touches none, and then every namespace is pruned, the reading
    /// that can only fail more), except the ones the
    /// control plane keeps in every namespace whatever is applied
    /// ([`CONTROL_PLANE_OBJECTS`]): live state lists them and every pod
    /// mounts one, but no deploy removes them, the ones annotated to be
    /// left alone by Helm or Argo CD ([`ConfigObject::kept_on_prune`](crate::model::ConfigObject::kept_on_prune)), and
    /// hooks (made by a hook annotation: neither tool counts a hook as a
    /// resource of the release or application, so neither prunes one; it
    /// goes only by its delete policy).
    Prune,
}

/// One finding per reference: where the current and the proposed
/// workload break the same way (the same reference, object, key and
/// words), one finding says so for both (`Side::Both`), placed where the
/// proposed one was read. Order is kept otherwise.
fn once_per_reference(findings: impl IntoIterator<Item = Finding>) -> Vec<Finding> {
    let findings: Vec<Finding> = findings.into_iter().collect();
    // What must agree: everything but the side and the place.
    let key = |f: &Finding| {
        let mut k = f.clone();
        k.side = None;
        k.source = None;
        k
    };
    let mut proposed: HashMap<Finding, Vec<usize>> = HashMap::new();
    for (i, f) in findings.iter().enumerate() {
        if f.side == Some(Side::Proposed) {
            proposed.entry(key(f)).or_default().push(i);
        }
    }
    let mut merged = vec![false; findings.len()];
    let mut both_at: HashMap<usize, usize> = HashMap::new();
    for (i, f) in findings.iter().enumerate() {
        if f.side != Some(Side::Current) {
            continue;
        }
        if let Some(j) = proposed.get_mut(&key(f)).and_then(Vec::pop) {
            merged[i] = true;
            both_at.insert(j, i);
        }
    }
    let mut out = Vec::with_capacity(findings.len());
    for (i, f) in findings.into_iter().enumerate() {
        if merged[i] {
            continue;
        }
        let mut f = f;
        if both_at.contains_key(&i) {
            f.side = Some(Side::Both);
        }
        out.push(f);
    }
    out
}

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct CheckInput {
    /// The serving state: workloads and config objects.
    pub current: Manifests,
    /// The manifests about to be applied.
    pub proposed: Manifests,
    /// A previous names-only inventory (for envFrom key removal).
    pub inventory: Option<Inventory>,
    /// How deletions are decided.
    pub deletion: Deletion,
    /// Objects the proposed state deletes explicitly.
    pub delete: Vec<ObjectId>,
    /// Keys the proposed state removes on purpose: a bulk load that loses
    /// one is a warning, not a failure ([`RetiredKey`]). One that waives
    /// nothing is a warning of its own, `retired-key-unused`.
    pub retired: Vec<RetiredKey>,
}

/// The workloads of a state, each one that runs another's pod template
/// ([`Workload::template_from`]) given that template's references and
/// ServiceAccount: the template's workload in `workloads`, else in
/// `fallback` (the current state, for a proposed input that leaves it as it
/// is). Borrowed as they are when none runs another's template.
fn run_templates<'a>(
    workloads: &'a [Workload],
    fallback: &[Workload],
    at: &str,
) -> Result<Cow<'a, [Workload]>, InputError> {
    if workloads.iter().all(|w| w.template_from.is_none()) {
        return Ok(Cow::Borrowed(workloads));
    }
    let resolve = |w: &Workload| {
        let Some(from) = &w.template_from else {
            return Ok(w.clone());
        };
        let where_ = if fallback.is_empty() {
            "the current input does not hold it"
        } else {
            "neither the proposed nor the current input holds it"
        };
        let template = workloads
            .iter()
            .chain(fallback)
            .find(|t| t.id == *from && t.template_from.is_none())
            .ok_or_else(|| InputError::Invalid {
                at: at.to_owned(),
                message: format!(
                    "{} runs the pod template of {from}, and {where_}: without it, what \
                     its pods read is not known; give {from} too",
                    w.id
                ),
            })?;
        Ok(Workload {
            references: template.references.clone(),
            service_account: template.service_account.clone(),
            ..w.clone()
        })
    };
    workloads
        .iter()
        .map(resolve)
        .collect::<Result<Vec<_>, _>>()
        .map(Cow::Owned)
}

/// Whether the change applies the proposed account `a` before it creates
/// the pods of the proposed workload `w`: in an earlier phase (before the
/// change, with it, after it, never: a hook of a phase the change never
/// runs is never applied), or in the same one, in an Argo CD sync wave no
/// later than `w`'s (a wave's ServiceAccounts come before its workloads),
/// or as a hook of `w`'s phase created before it.
fn applied_first(a: &ServiceAccount, w: &Workload) -> bool {
    let phase = |h: &Option<Hook>| h.as_ref().map_or(HookPhase::WithChange, |h| h.phase);
    let (mine, its) = (phase(&w.hook), phase(&a.hook));
    if its != mine {
        return its < mine;
    }
    match (&w.hook, &a.hook) {
        (Some(h), Some(ah)) if mine != HookPhase::WithChange => {
            h.runs_after(&w.id.name, ah, &a.name)
        }
        _ => a.sync_wave.unwrap_or(0) <= w.sync_wave.unwrap_or(0),
    }
}

/// An object the command line names (`--delete`, `--retire-key`) must be
/// in a state: a typo or a wrong namespace would otherwise delete (or
/// retire) nothing and check nothing, and the answer would be SAFE.
fn names_are_there(
    input: &CheckInput,
    current: &Index<'_>,
    proposed_in: &Index<'_>,
) -> Result<(), InputError> {
    let named = input
        .delete
        .iter()
        .map(|id| ("--delete", id))
        .chain(input.retired.iter().map(|r| ("--retire-key", &r.object)));
    for (flag, id) in named {
        if !current.contains_key(id) && !proposed_in.contains_key(id) {
            let hint = ids::closest(id, current.keys().copied())
                .map(|c| format!(" (did you mean {c}?)"))
                .unwrap_or_default();
            return Err(InputError::Invalid {
                at: flag.into(),
                message: format!("{id} is not in the current state{hint}"),
            });
        }
    }
    Ok(())
}

/// The objects after the change (the current ones, pruned as
/// `--prune` prunes, less `--delete`, plus the proposed input, less its
/// hooks that do not outlive the change), and the current workloads
/// `--prune` deletes.
fn state_after<'a>(
    input: &'a CheckInput,
    current: &Index<'a>,
    proposed_in: &Index<'a>,
) -> Result<(Index<'a>, HashSet<&'a WorkloadId>), InputError> {
    let mut proposed = current.clone();
    let mut pruned = HashSet::new();
    if input.deletion == Deletion::Prune {
        let touched: BTreeSet<&str> = input
            .proposed
            .objects
            .iter()
            .map(|o| o.id.namespace.as_str())
            .chain(
                input
                    .proposed
                    .workloads
                    .iter()
                    .map(|w| w.id.namespace.as_str()),
            )
            .chain(
                input
                    .proposed
                    .service_accounts
                    .iter()
                    .map(|a| a.namespace.as_str()),
            )
            .collect();
        // Workloads are pruned too; their pods serve until they are deleted,
        // so their references still count, but the finding says so.
        let kept: HashSet<&WorkloadId> = input.proposed.workloads.iter().map(|w| &w.id).collect();
        pruned = input
            .current
            .workloads
            .iter()
            .filter(|w| w.kept_on_prune.is_none() && w.hook.is_none())
            .map(|w| &w.id)
            .filter(|id| {
                !kept.contains(id)
                    && (touched.is_empty() || touched.contains(id.namespace.as_str()))
            })
            .collect();
        proposed.retain(|id, object| {
            proposed_in.contains_key(*id)
                // Nothing applied gives no scope: then everything goes.
                || !(touched.is_empty() || touched.contains(id.namespace.as_str()))
                || is_control_plane_object(id)
                // An annotation tells Helm or Argo CD to leave it, or it
                // was made as a hook, which neither prunes.
                || object.kept_on_prune.is_some()
                || object.hook.is_some()
        });
    }
    for id in &input.delete {
        if proposed_in.contains_key(id) {
            return Err(InputError::Invalid {
                at: "--delete".into(),
                message: format!("{id} is both deleted and in the proposed manifests"),
            });
        }
        proposed.remove(id);
    }
    proposed.extend(proposed_in);
    // A hook of the change that it does not create, or deletes again once
    // its hooks succeed, is not there after the change (whatever was there
    // before: an object that becomes such a hook is no longer one the
    // release or the application applies). A live one the change does not
    // name stays as it is.
    proposed.retain(|id, _| {
        proposed_in
            .get(id)
            .and_then(|o| o.hook.as_ref())
            .is_none_or(Hook::kept_after)
    });
    Ok((proposed, pruned))
}

/// A retirement that waived nothing (`retired-key-unused`): kept in a
/// pipeline, it would waive the next, unintended removal of that key.
fn unused_retirements(
    input: &CheckInput,
    ctx: &Ctx<'_>,
    findings: &BTreeSet<Finding>,
) -> Vec<Finding> {
    let waived: HashSet<(&ObjectId, &str)> = findings
        .iter()
        .filter(|f| f.code == "bulk-key-removed")
        .filter_map(|f| Some((f.object.as_ref()?, f.key.as_deref()?)))
        .collect();
    let mut unused = Vec::new();
    for r in &input.retired {
        if waived.contains(&(&r.object, r.key.as_str())) {
            continue;
        }
        let kept = ctx
            .proposed
            .get(&r.object)
            .is_some_and(|o| o.keys.contains(&r.key));
        unused.push(Finding {
            severity: Severity::Warning,
            code: Code::RetiredKeyUnused,
            workload: None,
            side: None,
            container: None,
            site: None,
            object: Some(r.object.clone()),
            key: Some(r.key.clone()),
            message: if kept {
                "retired, but the proposed state keeps this key: nothing was waived (drop the \
                 retirement, or remove the key)"
            } else {
                "retired, but no bulk load in this change loses this key: nothing was waived \
                 (drop the retirement)"
            }
            .into(),
            source: None,
        });
    }
    unused
}

/// A state of CRDs and no workload beside one of workloads
/// (`maybe-truncated`): perhaps a chart's CRDs rendered and its templates
/// did not, or a dump cut short.
fn maybe_truncated(input: &CheckInput) -> Vec<Finding> {
    let mut out = Vec::new();
    for (side, state, other) in [
        ("current", &input.current, &input.proposed),
        ("proposed", &input.proposed, &input.current),
    ] {
        if state.crds > 0 && state.workloads.is_empty() && !other.workloads.is_empty() {
            out.push(Finding {
                severity: Severity::Warning,
                code: Code::MaybeTruncated,
                workload: None,
                side: None,
                container: None,
                site: None,
                object: None,
                key: None,
                message: format!(
                    "the {side} state holds {} CustomResourceDefinition(s) and no workload, \
                     while the other holds {}: it may be truncated (a chart whose CRDs rendered \
                     and templates did not, a dump cut short); check that it is complete",
                    state.crds,
                    other.workloads.len()
                ),
                source: None,
            });
        }
    }
    out
}

/// Runs the check.
///
/// An unsafe transition is a [`Report`] whose failures say why, not an
/// error.
///
/// # Errors
///
/// [`InputError::Invalid`] for states it cannot judge: one object or
/// ServiceAccount twice in a state, an object both deleted (`delete`)
/// and in the proposed manifests, or a previous inventory of another
/// format version than [`Inventory::VERSION`] or listing an object twice.
pub fn check(input: &CheckInput) -> Result<Report, InputError> {
    let current = index(&input.current.objects, "current state")?;
    let proposed_in = index(&input.proposed.objects, "proposed state")?;
    names_are_there(input, &current, &proposed_in)?;
    let (proposed, pruned) = state_after(input, &current, &proposed_in)?;
    let ctx = Ctx {
        current: &current,
        proposed: &proposed,
        proposed_in: &proposed_in,
        inventory: match &input.inventory {
            None => HashMap::new(),
            Some(inv) => inventory_index(inv)?,
        },
        holders: OnceCell::new(),
        pruned,
        proposed_refs: input
            .proposed
            .workloads
            .iter()
            .map(|w| (&w.id, w.references.as_slice()))
            .collect(),
        retired: input
            .retired
            .iter()
            .map(|r| (&r.object, r.key.as_str()))
            .collect(),
    };

    let current_accounts = accounts(&input.current.service_accounts, "current state")?;
    let proposed_accounts = accounts(&input.proposed.service_accounts, "proposed state")?;
    // One workload twice in one state (two files that define it): which
    // one is applied, or which a Rollout runs, depends on their order.
    for (workloads, at) in [
        (&input.current.workloads, "current state"),
        (&input.proposed.workloads, "proposed state"),
    ] {
        unique(workloads, |w| &w.id, |_, w| w.id.to_string(), at)?;
    }
    let mut findings: BTreeSet<Finding> = BTreeSet::new();
    let mut references = 0;
    let current_workloads = run_templates(&input.current.workloads, &[], "current state")?;
    let proposed_workloads = run_templates(
        &input.proposed.workloads,
        &input.current.workloads,
        "proposed state",
    )?;
    let sides = [
        (Side::Current, &current_workloads),
        (Side::Proposed, &proposed_workloads),
    ];
    for (side, workloads) in sides {
        for w in workloads.iter() {
            // The pull secrets its ServiceAccount adds to every pod: the
            // account as it is when the pods of that side are admitted (a
            // proposed workload's get the proposed account if the change
            // applies it first, else the account as it is now, if there is
            // one). They are the pod's own then, judged as the ones its
            // spec names.
            let id = (w.id.namespace.as_str(), w.service_account.as_str());
            let account = match side {
                Side::Current | Side::Both => current_accounts.get(&id),
                Side::Proposed => match proposed_accounts.get(&id) {
                    Some(a) if applied_first(a, w) => Some(a),
                    proposed => current_accounts.get(&id).or(proposed),
                },
            };
            let added: Vec<Reference> = (account.iter())
                .flat_map(|a| &a.image_pull_secrets)
                .map(|secret| Reference::account_pull_secret(&w.service_account, secret))
                .collect();
            for r in w.references.iter().chain(&added) {
                references += 1;
                match (side, &w.hook) {
                    // (A dormant one starts no pod: checked as any, warnings.)
                    (Side::Proposed, Some(hook))
                        if w.dormant.is_none() && hook.phase != HookPhase::WithChange =>
                    {
                        check_hook(&ctx, w, hook, r, &mut findings);
                    }
                    (Side::Proposed, _) if w.dormant.is_none() => {
                        check_reference(&ctx, w, side, r, &mut findings);
                        check_arrives_later(&ctx, w, r, &mut findings);
                    }
                    _ => check_reference(&ctx, w, side, r, &mut findings),
                }
            }
        }
    }
    for note in input.current.notes.iter().chain(&input.proposed.notes) {
        if let Some(note) = outside_note(&ctx, note) {
            findings.insert(note);
        }
    }
    let unused = unused_retirements(input, &ctx, &findings);
    findings.extend(unused);
    findings.extend(maybe_truncated(input));
    let (failures, warnings): (Vec<Finding>, Vec<Finding>) = once_per_reference(findings)
        .into_iter()
        .partition(|f| f.severity == Severity::Failure);
    Ok(Report {
        result: Verdict::of(&failures),
        workloads_checked: input.current.workloads.len() + input.proposed.workloads.len(),
        workloads_current: input.current.workloads.len(),
        workloads_proposed: input.proposed.workloads.len(),
        references_checked: references,
        failures,
        warnings,
        waived: Vec::new(),
    })
}
