//! The workloads a rollout moves, as the rules see them: their pod
//! template, their annotations, the Services that send them traffic and
//! which of their containers serve it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::fleet::{Fleet, RolloutObject};
use crate::error::InputError;
use crate::model::{Code, Finding, Place, Severity, WorkloadId};

/// How a workload's controller replaces its pods.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape<'a> {
    Deployment(&'a Deployment),
    StatefulSet(&'a StatefulSet),
    DaemonSet(&'a DaemonSet),
    /// An allowed kind: its strategy is not read.
    Other,
}

/// One workload with a pod template.
#[derive(Debug)]
pub(super) struct Unit<'a> {
    pub(super) id: WorkloadId,
    pub(super) place: Option<&'a Place>,
    /// The workload's annotations, then its pod template's (the
    /// workload's win).
    pub(super) annotations: BTreeMap<&'a str, &'a str>,
    pub(super) template: &'a PodTemplateSpec,
    pub(super) shape: Shape<'a>,
    /// The Services (in its namespace) whose selector matches its pods.
    pub(super) services: Vec<&'a Service>,
}

impl<'a> Unit<'a> {
    /// The pod template's containers (not init containers).
    pub(super) fn containers(&self) -> &'a [Container] {
        self.template
            .spec
            .as_ref()
            .map_or(&[], |s| s.containers.as_slice())
    }

    /// The pod template's labels.
    pub(super) fn labels(&self) -> Option<&'a BTreeMap<String, String>> {
        self.template.metadata.as_ref()?.labels.as_ref()
    }

    /// `terminationGracePeriodSeconds`, 30 when unset.
    pub(super) fn grace(&self) -> i64 {
        self.template
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
    }

    /// Whether a Service sends this workload traffic.
    pub(super) fn served(&self) -> bool {
        !self.services.is_empty()
    }

    /// The containers that serve a Service's traffic: those declaring a
    /// port a selecting Service targets (by number or name). Where no
    /// container declares one (ports need not be declared), every
    /// container counts.
    pub(super) fn serving(&self) -> Vec<&'a Container> {
        if !self.served() {
            return Vec::new();
        }
        let targets: Vec<IntOrString> = self
            .services
            .iter()
            .filter_map(|s| s.spec.as_ref()?.ports.as_ref())
            .flatten()
            .map(|p| p.target_port.clone().unwrap_or(IntOrString::Int(p.port)))
            .collect();
        let declares = |c: &Container| {
            c.ports.iter().flatten().any(|p| {
                targets.iter().any(|t| match t {
                    IntOrString::Int(n) => p.container_port == *n,
                    IntOrString::String(name) => p.name.as_deref() == Some(name.as_str()),
                })
            })
        };
        let serving: Vec<&Container> = self.containers().iter().filter(|c| declares(c)).collect();
        if serving.is_empty() {
            self.containers().iter().collect()
        } else {
            serving
        }
    }

    /// A finding about this workload (and `container`, if any).
    pub(super) fn finding(
        &self,
        code: Code,
        severity: Severity,
        container: Option<&str>,
        site: Option<String>,
        message: String,
    ) -> Finding {
        Finding {
            severity,
            code,
            workload: Some(self.id.clone()),
            side: None,
            container: container.map(str::to_owned),
            site,
            object: None,
            key: None,
            message,
            source: self.place.cloned(),
        }
    }

    /// Unusable input about this workload, placed where it was read.
    pub(super) fn invalid(&self, message: impl std::fmt::Display) -> InputError {
        InputError::Invalid {
            at: self.place.map_or_else(
                || self.id.to_string(),
                |p| format!("{} (line {})", p.file, p.line),
            ),
            message: format!("{}: {message}", self.id),
        }
    }

    /// An annotation's value, on the workload or its pod template.
    pub(super) fn annotation(&self, name: &str) -> Option<&'a str> {
        self.annotations.get(name).copied()
    }
}

/// Whether `selector`'s labels are all among `labels` (a Service's
/// selector: equality only).
pub(super) fn selects(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether a label selector (`matchLabels` and `matchExpressions`)
/// matches `labels`. An empty selector matches everything, as a
/// PodDisruptionBudget's does; an operator this gate does not know
/// matches nothing.
pub(super) fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = selector.match_expressions.iter().flatten().all(|e| {
        let values: BTreeSet<&str> = e.values.iter().flatten().map(String::as_str).collect();
        let held = labels.get(&e.key).map(String::as_str);
        match e.operator.as_str() {
            "In" => held.is_some_and(|v| values.contains(v)),
            "NotIn" => held.is_none_or(|v| !values.contains(v)),
            "Exists" => held.is_some(),
            "DoesNotExist" => held.is_none(),
            _ => false,
        }
    });
    by_label && by_expression
}

fn meta_names(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

fn annotations<'a>(
    workload: Option<&'a BTreeMap<String, String>>,
    template: &'a PodTemplateSpec,
) -> BTreeMap<&'a str, &'a str> {
    let mut out: BTreeMap<&str, &str> = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    out.extend(
        workload
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    out
}

/// Every workload of `fleet` with its Services.
pub(super) fn units(fleet: &Fleet) -> Vec<Unit<'_>> {
    // By namespace: a Service selects pods of its own namespace only.
    let mut services: std::collections::HashMap<&str, Vec<&Service>> =
        std::collections::HashMap::new();
    for (o, _) in &fleet.objects {
        if let RolloutObject::Service(s) = o {
            services
                .entry(s.metadata.namespace.as_deref().unwrap_or("default"))
                .or_default()
                .push(s);
        }
    }
    let mut out = Vec::new();
    for (object, place) in &fleet.objects {
        let (kind, meta, template, shape, workload_annotations) = match object {
            RolloutObject::Deployment(d) => (
                "Deployment",
                &d.metadata,
                Some(&d.spec.template),
                Shape::Deployment(d),
                d.metadata.annotations.as_ref(),
            ),
            RolloutObject::StatefulSet(s) => (
                "StatefulSet",
                &s.metadata,
                Some(&s.spec.template),
                Shape::StatefulSet(s),
                s.metadata.annotations.as_ref(),
            ),
            RolloutObject::DaemonSet(d) => (
                "DaemonSet",
                &d.metadata,
                Some(&d.spec.template),
                Shape::DaemonSet(d),
                d.metadata.annotations.as_ref(),
            ),
            RolloutObject::Templated {
                id,
                template,
                annotations: a,
            } => {
                out.push(Unit {
                    id: id.clone(),
                    place: place.as_ref(),
                    annotations: annotations(Some(a), template),
                    template,
                    shape: Shape::Other,
                    services: Vec::new(),
                });
                continue;
            }
            _ => continue,
        };
        let Some(template) = template else { continue };
        let (namespace, name) = meta_names(meta);
        out.push(Unit {
            id: WorkloadId {
                kind: kind.into(),
                namespace,
                name,
            },
            place: place.as_ref(),
            annotations: annotations(workload_annotations, template),
            template,
            shape,
            services: Vec::new(),
        });
    }
    for unit in &mut out {
        let Some(labels) = unit.labels() else {
            continue;
        };
        unit.services = services
            .get(unit.id.namespace.as_str())
            .into_iter()
            .flatten()
            .filter(|s| {
                s.spec
                    .as_ref()
                    .and_then(|spec| spec.selector.as_ref())
                    .is_some_and(|sel| selects(sel, labels))
            })
            .copied()
            .collect();
    }
    out
}
