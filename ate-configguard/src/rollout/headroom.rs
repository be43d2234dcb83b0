//! `headroom` and `single-writer`: a rollout keeps pods serving while it
//! replaces them, and a workload that must never run two pods at once
//! never does.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::units::{Shape, Unit, selector_matches};
use crate::error::InputError;
use crate::model::{Code, Finding, Severity};

/// The annotation that marks a workload as one that must never run two
/// pods at once.
pub(super) const SINGLE_WRITER: &str = "ate.dev/single-writer";

/// An int-or-percent of `total`, as Kubernetes scales it (`round_up`:
/// maxSurge and PodDisruptionBudgets round up, maxUnavailable down).
/// A negative number, a percentage over 100 % (where `capped`) or one that
/// is not `N%` is `Err` (the API server refuses each).
pub(super) fn scaled(
    value: &IntOrString,
    total: i64,
    round_up: bool,
    capped: bool,
) -> Result<i64, String> {
    match value {
        IntOrString::Int(n) if *n < 0 => Err(format!("{n} is negative")),
        IntOrString::Int(n) => Ok(i64::from(*n)),
        IntOrString::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .filter(|p| *p >= 0)
                .ok_or_else(|| format!("{s:?} is neither a whole number nor a percentage (N%)"))?;
            if capped && p > 100 {
                return Err(format!("{s} is over 100%"));
            }
            let scaled = total.saturating_mul(p);
            Ok(if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            })
        }
    }
}

/// The HorizontalPodAutoscaler that scales `unit`, if any.
fn autoscaler<'a>(
    unit: &Unit<'_>,
    hpas: &[&'a HorizontalPodAutoscaler],
) -> Option<&'a HorizontalPodAutoscaler> {
    hpas.iter().copied().find(|h| {
        h.metadata.namespace.as_deref().unwrap_or("default") == unit.id.namespace
            && h.spec.scale_target_ref.kind == unit.id.kind
            && h.spec.scale_target_ref.name == unit.id.name
    })
}

/// The replicas a rollout starts from, and the most it may have: from the
/// autoscaler where one scales the workload (its minReplicas, default 1),
/// else `spec.replicas` (default 1).
fn replicas(unit: &Unit<'_>, hpas: &[&HorizontalPodAutoscaler]) -> (i64, i64) {
    if let Some(h) = autoscaler(unit, hpas).map(|h| &h.spec) {
        let min = i64::from(h.min_replicas.unwrap_or(1));
        return (min, i64::from(h.max_replicas).max(min));
    }
    let n = match unit.shape {
        Shape::Deployment(d) => d.spec.replicas,
        Shape::StatefulSet(s) => s.spec.replicas,
        _ => None,
    };
    let n = i64::from(n.unwrap_or(1));
    (n, n)
}

/// The headroom, disruption-budget and single-writer rules for `unit`.
pub(super) fn check(
    unit: &Unit<'_>,
    hpas: &[&HorizontalPodAutoscaler],
    pdbs: &[&PodDisruptionBudget],
    out: &mut Vec<Finding>,
) -> Result<(), InputError> {
    let single_writer = single_writer(unit)?;
    let (replicas, most) = replicas(unit, hpas);
    // Pods that keep serving while the rollout replaces the others.
    let kept = match unit.shape {
        Shape::Deployment(d) => Some(strategy_headroom(unit, d, replicas, single_writer, out)?),
        _ => None,
    };
    if single_writer {
        one_writer_at_most(unit, most, out);
    }
    if !matches!(unit.shape, Shape::Deployment(_) | Shape::StatefulSet(_)) || replicas == 0 {
        return Ok(());
    }
    let Some(labels) = unit.labels() else {
        return Ok(());
    };
    for pdb in pdbs {
        budget_headroom(unit, pdb, labels, replicas, kept, out)?;
    }
    Ok(())
}

/// The workload's single-writer annotation: absent or `"false"`, `"true"`;
/// anything else is unusable input.
fn single_writer(unit: &Unit<'_>) -> Result<bool, InputError> {
    match unit.annotation(SINGLE_WRITER) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(unit.invalid(format!(
            "annotation {SINGLE_WRITER} must be \"true\" or \"false\""
        ))),
    }
}

/// A Deployment's strategy against its replicas: a single writer needs
/// `Recreate`, which leaves a served one without pods; a rolling update
/// must keep one serving. Answers how many pods keep serving.
fn strategy_headroom(
    unit: &Unit<'_>,
    d: &Deployment,
    replicas: i64,
    single_writer: bool,
    out: &mut Vec<Finding>,
) -> Result<i64, InputError> {
    let strategy = d.spec.strategy.as_ref();
    let recreate = strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate");
    if single_writer && !recreate {
        out.push(
            unit.finding(
                Code::SingleWriter,
                Severity::Failure,
                None,
                Some("spec.strategy".into()),
                "it is a single writer, but a RollingUpdate starts the new pod before the old \
             one stops, so two write at once; set `strategy: {type: Recreate}`"
                    .into(),
            ),
        );
    }
    if recreate {
        if !single_writer && unit.served() && replicas > 0 {
            out.push(unit.finding(
                Code::Headroom,
                Severity::Warning,
                None,
                Some("spec.strategy".into()),
                format!(
                    "Recreate stops all {replicas} pod(s) before starting new ones, so the \
                     Service has none meanwhile; use RollingUpdate, or annotate \
                     {SINGLE_WRITER}: \"true\" if two pods must never run at once"
                ),
            ));
        }
        return Ok(0);
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let unavailable = rolling.and_then(|r| r.max_unavailable.clone());
    let surge = rolling.and_then(|r| r.max_surge.clone());
    let quarter = IntOrString::String("25%".into());
    let max_unavailable = scaled(
        unavailable.as_ref().unwrap_or(&quarter),
        replicas,
        false,
        true,
    )
    .map_err(|m| unit.invalid(format!("spec.strategy.rollingUpdate.maxUnavailable {m}")))?;
    let max_surge = scaled(surge.as_ref().unwrap_or(&quarter), replicas, true, false)
        .map_err(|m| unit.invalid(format!("spec.strategy.rollingUpdate.maxSurge {m}")))?;
    let literal_zero = |v: &Option<IntOrString>| {
        matches!(v, Some(IntOrString::Int(0)))
            || matches!(v, Some(IntOrString::String(s)) if s == "0%")
    };
    if literal_zero(&unavailable) && literal_zero(&surge) {
        return Err(
            unit.invalid("maxUnavailable and maxSurge are both 0: the API server refuses it")
        );
    }
    // Both scaled to 0: Kubernetes takes one pod down at a time.
    let max_unavailable = if max_unavailable == 0 && max_surge == 0 {
        1
    } else {
        max_unavailable
    };
    let left = replicas - max_unavailable.min(replicas);
    if unit.served() && replicas > 0 && left == 0 {
        out.push(unit.finding(
            Code::Headroom,
            Severity::Failure,
            None,
            Some("spec.strategy.rollingUpdate".into()),
            format!(
                "{replicas} replica(s) - maxUnavailable {max_unavailable} leaves no pod \
                 serving while the rollout replaces them; set maxUnavailable: 0 and \
                 maxSurge: 1"
            ),
        ));
    }
    Ok(left)
}

/// A single writer must never run twice: at most one replica (an
/// autoscaler included), and no DaemonSet.
fn one_writer_at_most(unit: &Unit<'_>, most: i64, out: &mut Vec<Finding>) {
    let why = match unit.shape {
        Shape::Deployment(_) | Shape::StatefulSet(_) if most > 1 => Some(format!(
            "it is a single writer with up to {most} replicas; set replicas: 1 (and no \
             autoscaler above 1)"
        )),
        Shape::DaemonSet(_) => Some(
            "it is a single writer, but a DaemonSet runs a pod on every node; run it as a \
             Deployment with one replica and strategy Recreate"
                .into(),
        ),
        _ => None,
    };
    if let Some(message) = why {
        out.push(unit.finding(Code::SingleWriter, Severity::Failure, None, None, message));
    }
}

/// A PodDisruptionBudget that selects the workload's pods must allow one
/// disruption, and ask for no more available pods than the rollout keeps.
fn budget_headroom(
    unit: &Unit<'_>,
    pdb: &PodDisruptionBudget,
    labels: &BTreeMap<String, String>,
    replicas: i64,
    kept: Option<i64>,
    out: &mut Vec<Finding>,
) -> Result<(), InputError> {
    let Some(spec) = &pdb.spec else {
        return Ok(());
    };
    let pdb_name = pdb.metadata.name.as_deref().unwrap_or("");
    let same_namespace =
        pdb.metadata.namespace.as_deref().unwrap_or("default") == unit.id.namespace;
    if !same_namespace
        || !spec
            .selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels))
    {
        return Ok(());
    }
    let bad = |m: String| unit.invalid(format!("PodDisruptionBudget {pdb_name}: {m}"));
    let min_available = spec
        .min_available
        .as_ref()
        .map(|v| scaled(v, replicas, true, true).map_err(|m| bad(format!("minAvailable {m}"))))
        .transpose()?;
    let max_unavailable = spec
        .max_unavailable
        .as_ref()
        .map(|v| scaled(v, replicas, true, true).map_err(|m| bad(format!("maxUnavailable {m}"))))
        .transpose()?;
    let site = Some(format!("PodDisruptionBudget/{pdb_name}"));
    if max_unavailable == Some(0) || min_available.is_some_and(|m| m >= replicas) {
        out.push(unit.finding(
            Code::Headroom,
            Severity::Warning,
            None,
            site,
            format!(
                "PodDisruptionBudget {pdb_name} allows no disruption of its {replicas} \
                 pod(s), so a node drain hangs until someone deletes it; let it allow one \
                 (maxUnavailable: 1)"
            ),
        ));
    } else if let (Some(min), Some(left)) = (min_available, kept)
        && min > left
    {
        out.push(unit.finding(
            Code::Headroom,
            Severity::Warning,
            None,
            site,
            format!(
                "PodDisruptionBudget {pdb_name} asks for {min} available pod(s), but the \
                 rollout keeps only {left}; lower minAvailable or maxUnavailable"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::scaled;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn percentages_scale_as_kubernetes_scales_them() {
        assert_eq!(scaled(&pct("25%"), 3, false, true), Ok(0));
        assert_eq!(scaled(&pct("25%"), 3, true, true), Ok(1));
        assert_eq!(scaled(&pct("50%"), 5, false, true), Ok(2));
        assert_eq!(scaled(&pct("50%"), 5, true, true), Ok(3));
        assert_eq!(scaled(&IntOrString::Int(2), 5, false, true), Ok(2));
        assert!(scaled(&pct("101%"), 5, false, true).is_err());
        assert_eq!(scaled(&pct("200%"), 5, true, false), Ok(10));
        assert!(scaled(&IntOrString::Int(-1), 5, false, true).is_err());
        assert!(scaled(&pct("1"), 5, false, true).is_err());
        assert!(scaled(&pct("x%"), 5, false, true).is_err());
    }
}
