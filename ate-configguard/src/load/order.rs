//! When an object is applied: Helm and Argo CD hooks, sync waves, and
//! what a prune keeps.

use super::options::bad;
use crate::error::InputError;
use crate::model::{Hook, HookPhase};
use crate::parse::Node;

/// When `doc` is applied (see [`order_from`]).
pub(super) fn order(doc: &Node, at: &str) -> Result<Order, InputError> {
    let Some(annotations) = doc.get("metadata").and_then(|m| m.get("annotations")) else {
        return Ok(Order::default());
    };
    order_from(
        |name| match annotations.get(name) {
            None | Some(Node::Null) => Ok(None),
            Some(Node::String(v)) => Ok(Some(v.as_str())),
            Some(_) => Err(bad(at, format!("annotation {name} is not a string"))),
        },
        at,
    )
}

/// When an object is applied, from its annotations.
#[derive(Debug, Default)]
pub(super) struct Order {
    /// A Helm or Argo CD hook.
    pub(super) hook: Option<Hook>,
    /// The Argo CD sync wave of a resource that is no hook (or a `Sync`
    /// hook).
    pub(super) sync_wave: Option<i64>,
    /// The annotation that keeps it from a prune (see
    /// [`ConfigObject::kept_on_prune`]).
    pub(super) kept_on_prune: Option<String>,
}

/// Helm's hook types (lower case, as Helm reads them): when an install or
/// upgrade creates a hook of each, `None` for one that it does not run.
/// A type that is not in this list makes Helm skip the resource.
pub(super) const HELM_HOOKS: [(&str, Option<HookPhase>); 10] = [
    ("pre-install", Some(HookPhase::BeforeChange)),
    ("pre-upgrade", Some(HookPhase::BeforeChange)),
    ("post-install", Some(HookPhase::AfterChange)),
    ("post-upgrade", Some(HookPhase::AfterChange)),
    ("pre-delete", None),
    ("post-delete", None),
    ("pre-rollback", None),
    ("post-rollback", None),
    ("test", None),
    ("test-success", None),
];

/// Argo CD's hook types: when a sync creates a hook of each (`Skip`: the
/// resource is not applied).
pub(super) const ARGO_HOOKS: [(&str, HookPhase); 6] = [
    ("PreSync", HookPhase::BeforeChange),
    ("Sync", HookPhase::WithChange),
    ("PostSync", HookPhase::AfterChange),
    ("SyncFail", HookPhase::NotRun),
    ("PostDelete", HookPhase::NotRun),
    ("Skip", HookPhase::NotRun),
];

/// When an object is applied, from its annotations (`annotation` reads
/// one), as Helm and Argo CD read them:
///
/// - `argocd.argoproj.io/hook` names Argo CD's hook types (comma-separated);
///   with none that Argo CD knows, it goes by `helm.sh/hook` (Argo CD
///   makes a `PreSync` hook of `pre-install` / `pre-upgrade`, a `PostSync`
///   one of `post-install` / `post-upgrade`, and runs no other);
/// - `helm.sh/hook` alone: Helm's types (any case); one Helm does not know
///   makes it skip the resource, which then is not created at all;
/// - a hook of several types is created in the earliest of their phases;
///   its weight is `helm.sh/hook-weight` (Helm's) or
///   `argocd.argoproj.io/sync-wave` (Argo CD's);
/// - a hook is deleted once its hooks succeed if either delete policy says
///   so (`helm.sh/hook-delete-policy: hook-succeeded`,
///   `argocd.argoproj.io/hook-delete-policy: HookSucceeded`; Argo CD reads
///   both);
/// - a resource that is no hook, or an Argo CD `Sync` hook, is in its
///   `argocd.argoproj.io/sync-wave`.
///
/// A weight or wave must be a whole number.
pub(super) fn order_from<'a>(
    annotation: impl Fn(&str) -> Result<Option<&'a str>, InputError>,
    at: &str,
) -> Result<Order, InputError> {
    let number = |name: &str| -> Result<Option<i64>, InputError> {
        annotation(name)?
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| bad(at, format!("annotation {name} {v:?} is not a whole number")))
            })
            .transpose()
    };
    fn csv(v: &str) -> impl Iterator<Item = &str> {
        v.split(',').map(str::trim).filter(|t| !t.is_empty())
    }
    // Helm reads its resource policy trimmed and in any case; Argo CD its
    // sync options as a comma-separated list, each as written.
    let helm_keeps = annotation("helm.sh/resource-policy")?
        .filter(|v| v.trim().eq_ignore_ascii_case("keep"))
        .map(|v| format!("helm.sh/resource-policy={v}"));
    let argo_keeps = annotation("argocd.argoproj.io/sync-options")?
        .filter(|v| csv(v).any(|o| o == "Prune=false" || o == "Prune=confirm"))
        .map(|v| format!("argocd.argoproj.io/sync-options={v}"));
    let kept_on_prune = helm_keeps.or(argo_keeps);
    let (helm, argo) = (
        annotation("helm.sh/hook")?,
        annotation("argocd.argoproj.io/hook")?,
    );
    let argo_phase = argo.and_then(|v| {
        csv(v)
            .filter_map(|t| ARGO_HOOKS.iter().find(|(name, _)| *name == t))
            .map(|(_, phase)| *phase)
            .min()
    });
    // Helm's reading: `None` for a resource Helm skips (a type it does not
    // know), else the earliest phase of its types (`NotRun` if none runs).
    let helm_phase = |v: &str| -> Option<HookPhase> {
        let mut phase = HookPhase::NotRun;
        for t in csv(v) {
            let (_, p) = HELM_HOOKS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(t))?;
            if let Some(p) = p
                && *p < phase
            {
                phase = *p;
            }
        }
        Some(phase)
    };
    let (annotation_text, phase, weight, helm_order) = match (argo_phase, argo, helm) {
        (Some(phase), Some(v), _) => (
            format!("argocd.argoproj.io/hook={v}"),
            phase,
            number("argocd.argoproj.io/sync-wave")?,
            false,
        ),
        // Argo CD's annotation with no type it knows: Argo CD goes by Helm's.
        (None, Some(v), helm) => {
            let phase = helm.and_then(helm_phase).unwrap_or(HookPhase::NotRun);
            let by = match helm {
                Some(h) if phase != HookPhase::NotRun => format!("helm.sh/hook={h}"),
                _ => format!("argocd.argoproj.io/hook={v}"),
            };
            (by, phase, number("helm.sh/hook-weight")?, true)
        }
        (_, None, Some(v)) => (
            format!("helm.sh/hook={v}"),
            helm_phase(v).unwrap_or(HookPhase::NotRun),
            number("helm.sh/hook-weight")?,
            true,
        ),
        (_, None, None) => {
            return Ok(Order {
                hook: None,
                sync_wave: number("argocd.argoproj.io/sync-wave")?,
                kept_on_prune,
            });
        }
    };
    let mut deleted_after = None;
    for (name, policy) in [
        ("helm.sh/hook-delete-policy", "hook-succeeded"),
        ("argocd.argoproj.io/hook-delete-policy", "HookSucceeded"),
    ] {
        if let Some(v) = annotation(name)?
            && csv(v).any(|p| p.eq_ignore_ascii_case(policy))
        {
            deleted_after = Some(format!("{name}={v}"));
            break;
        }
    }
    let sync_wave = if phase == HookPhase::WithChange {
        weight
    } else {
        None
    };
    Ok(Order {
        hook: Some(Hook {
            annotation: annotation_text,
            phase,
            weight: weight.unwrap_or(0),
            helm: helm_order,
            deleted_after,
        }),
        sync_wave,
        kept_on_prune,
    })
}
