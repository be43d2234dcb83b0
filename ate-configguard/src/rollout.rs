//! The rollout gate: whether the manifests that roll a service out would
//! drop requests while they do, checked before they are applied, failing
//! closed.
//!
//! The service side of a safe rollout (the readiness gate drains, the
//! preStop hook flips `/ready`, the in-flight wait is bounded) holds only
//! if the manifest around it lets it. [`rollout`] reads workloads
//! (Deployments, StatefulSets, DaemonSets, and kinds named in
//! [`LoadOptions::allow_kinds`](crate::LoadOptions::allow_kinds)), the
//! Services that select them, Ingresses, PodDisruptionBudgets,
//! HorizontalPodAutoscalers and GKE BackendConfigs, and applies one rule
//! per code:
//!
//! | code | fails when |
//! |---|---|
//! | `probe-split` | a serving container has no readinessProbe, or its readiness and liveness ask the same endpoint (named ports resolved, paths spelled one way); no liveness is a warning |
//! | `liveness-first` | (warning) liveness would restart a pod before readiness takes it out |
//! | `prestop` | a serving container has no working preStop hook (exec `drain` or `sleep`, or native `sleep`) |
//! | `grace-budget` | `terminationGracePeriodSeconds` (30 unset) < preStop + drain wait + margin; a budget it cannot read is a warning naming the annotation that states it |
//! | `lb-drain` | a load balancer drains a backend longer than its pods live, or health-checks another path than readiness |
//! | `image-identity` | an image is malformed, tag-and-digest, `latest` or untagged; a digest pulled `Always`; a mutable tag is a warning (a failure with [`RolloutOptions::require_digest`]) |
//! | `headroom` | a served Deployment's rollout leaves no pod serving; a PodDisruptionBudget at odds with it, or `Recreate`, is a warning |
//! | `single-writer` | a workload annotated `ate.dev/single-writer: "true"` can run two pods at once |
//!
//! A [`Waiver`] or the annotation `ate.dev/rollout-allow: CODE,...` sets a
//! rule aside for a workload; what it set aside is listed in
//! [`Report::waived`](crate::Report::waived). The gate never reads a
//! ConfigMap or a Secret: it skips them unread.
//!
//! ```
//! use ate_configguard::LoadOptions;
//! use ate_configguard::rollout::{RolloutOptions, load_str, rollout};
//!
//! let fleet = load_str(r#"
//! apiVersion: apps/v1
//! kind: Deployment
//! metadata: {name: web}
//! spec:
//!   replicas: 3
//!   selector: {matchLabels: {app: web}}
//!   template:
//!     metadata: {labels: {app: web}}
//!     spec:
//!       containers:
//!         - name: web
//!           image: registry.example/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
//!           ports: [{name: http, containerPort: 8080}]
//!           readinessProbe: {httpGet: {path: /ready, port: http}}
//!           livenessProbe: {httpGet: {path: /ready/, port: 8080}}
//!           lifecycle: {preStop: {sleep: {seconds: 10}}}
//! ---
//! apiVersion: v1
//! kind: Service
//! metadata: {name: web}
//! spec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}
//! "#, "web.yaml", &LoadOptions::default())?;
//! let report = rollout(&fleet, &RolloutOptions::default())?;
//! // `/ready/` on 8080 is `/ready` on `http`: a draining pod is restarted.
//! assert_eq!(report.failures[0].code, "probe-split");
//! assert_eq!(report.exit_code(), 1);
//! # Ok::<(), ate_configguard::InputError>(())
//! ```

use std::collections::HashMap;

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::check::{Report, Verdict};
use crate::error::InputError;
use crate::model::Finding;

mod balancer;
mod endpoint;
mod fleet;
mod headroom;
mod image;
mod load;
mod probes;
mod rollback;
mod termination;
mod units;
mod waiver;

pub use fleet::{BackendConfig, Fleet, RolloutObject};
pub use load::{load_paths, load_str};
pub use rollback::{RollbackEntry, RollbackPlan, rollback_plan};
pub use waiver::Waiver;

/// How the gate judges.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RolloutOptions {
    /// Seconds the grace period must leave over preStop + drain wait
    /// (default 5; the CLI's `--grace-margin`).
    pub grace_margin: i64,
    /// The environment variable that holds a container's in-flight drain
    /// wait in seconds (default `ATE_DRAIN_TIMEOUT_SECS`; the CLI's
    /// `--drain-timeout-env`).
    pub drain_timeout_env: String,
    /// A mutable tag fails instead of warning (`--require-digest`).
    pub require_digest: bool,
    /// Waivers (`--allow`).
    pub allow: Vec<Waiver>,
}

impl Default for RolloutOptions {
    fn default() -> Self {
        Self {
            grace_margin: 5,
            drain_timeout_env: "ATE_DRAIN_TIMEOUT_SECS".into(),
            require_digest: false,
            allow: Vec::new(),
        }
    }
}

/// Checks the rollout of every workload in `fleet`: exit code 0 safe, 1 a
/// rule failed ([`Report::exit_code`](crate::Report::exit_code)).
///
/// # Errors
///
/// [`InputError::Invalid`] for what the API server would refuse and the
/// gate cannot judge: a negative grace period, a percentage over 100 %, a
/// preStop hook of no known form, a malformed `ate.dev/` annotation or
/// load-balancer annotation.
pub fn rollout(fleet: &Fleet, options: &RolloutOptions) -> Result<Report, InputError> {
    let mut services = Vec::new();
    let mut ingresses = Vec::new();
    let mut pdbs = Vec::new();
    let mut hpas = Vec::new();
    let mut backend_configs = Vec::new();
    for (object, _) in &fleet.objects {
        match object {
            RolloutObject::Service(s) => services.push(&**s),
            RolloutObject::Ingress(i) => ingresses.push(&**i),
            RolloutObject::PodDisruptionBudget(p) => pdbs.push(&**p),
            RolloutObject::HorizontalPodAutoscaler(h) => hpas.push(&**h),
            RolloutObject::BackendConfig(b) => backend_configs.push(b),
            _ => {}
        }
    }
    let units = units::units(fleet);
    let mut findings: Vec<Finding> = Vec::new();
    let mut annotated = Vec::new();
    let mut containers = 0;
    // By namespace: each workload meets its own namespace's alone.
    let (hpas, pdbs) = (by_namespace(hpas), by_namespace(pdbs));
    for unit in &units {
        containers += unit.containers().len();
        probes::check(unit, &mut findings);
        termination::check(unit, options, &mut findings)?;
        image::check(unit, options, &mut findings);
        let ns = unit.id.namespace.as_str();
        headroom::check(
            unit,
            hpas.get(ns).map_or(&[], Vec::as_slice),
            pdbs.get(ns).map_or(&[], Vec::as_slice),
            &mut findings,
        )?;
        let codes = waiver::annotated(unit)?;
        if !codes.is_empty() {
            annotated.push((unit.id.clone(), codes));
        }
    }
    balancer::check(
        &units,
        &services,
        &ingresses,
        &backend_configs,
        &mut findings,
    )?;
    let (kept, waived) = waiver::apply(findings, &options.allow, &annotated);
    let (failures, warnings): (Vec<Finding>, Vec<Finding>) = kept
        .into_iter()
        .partition(|f| f.severity == crate::Severity::Failure);
    Ok(Report {
        result: Verdict::of(&failures),
        workloads_checked: units.len(),
        workloads_current: 0,
        workloads_proposed: units.len(),
        references_checked: containers,
        failures,
        warnings,
        waived,
    })
}

/// Objects grouped by their namespace.
fn by_namespace<T: Metadata<Ty = ObjectMeta>>(objects: Vec<&T>) -> HashMap<&str, Vec<&T>> {
    let mut map: HashMap<&str, Vec<&T>> = HashMap::new();
    for o in objects {
        map.entry(o.metadata().namespace.as_deref().unwrap_or("default"))
            .or_default()
            .push(o);
    }
    map
}

impl Report {
    /// Human-readable text of a rollout check: each failure, warning and
    /// waived finding on a line (`FILE:LINE: ` first where it was read),
    /// then a summary.
    pub fn to_rollout_text(&self) -> String {
        let mut out = String::new();
        let at = |f: &Finding| {
            f.source
                .as_ref()
                .map_or_else(String::new, |p| format!("{}:{}: ", p.file, p.line))
        };
        for f in self.failures.iter().chain(&self.warnings) {
            out.push_str(&format!("{}{f}\n", at(f)));
        }
        for f in &self.waived {
            out.push_str(&format!("{}WAIVED {f}\n", at(f)));
        }
        out.push_str(&format!(
            "{}: {} failure(s), {} warning(s), {} waived; {}\n",
            self.result.as_str().to_uppercase(),
            self.failures.len(),
            self.warnings.len(),
            self.waived.len(),
            self.rollout_checked()
        ));
        out
    }

    /// What a rollout check covered, in words.
    pub(crate) fn rollout_checked(&self) -> String {
        format!(
            "{} workload(s), {} container(s) checked",
            self.workloads_checked, self.references_checked
        )
    }
}
