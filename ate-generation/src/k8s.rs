//! Reading `metadata.generation` / `status.observedGeneration` from
//! Kubernetes workloads (feature `k8s`).
//!
//! Unlike kstatus, a missing `observedGeneration` is NOT converged: the
//! controller has not said it saw anything.
//!
//! [`ObservedWorkload`] is implemented for the workloads whose controllers
//! report `status.observedGeneration` (Deployment, StatefulSet, DaemonSet,
//! ReplicaSet, ReplicationController), for HorizontalPodAutoscaler
//! (`autoscaling/v2`) and PodDisruptionBudget, and for Pod.
//!
//! A Pod's `metadata.generation` advances when its spec changes in place (a
//! resize of a running pod's resources), and the kubelet reports
//! `status.observedGeneration` once it has acted on that spec: so
//! [`controller_observed`] says whether a resize was applied, where a
//! healthy `Running` phase says nothing about it. That needs a cluster that
//! tracks pod generations (feature `PodObservedGenerationTracking`,
//! Kubernetes 1.33 and later); an older one sets no `metadata.generation`
//! on Pods, and the Pod is an error saying so.
//!
//! Implement it for your own custom resource:
//!
//! ```
//! use ate_generation::k8s::{ObservedWorkload, controller_observed};
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! struct Gateway { metadata: ObjectMeta, observed_generation: Option<i64> }
//!
//! impl ObservedWorkload for Gateway {
//!     const KIND: &'static str = "Gateway";
//!     fn meta(&self) -> &ObjectMeta { &self.metadata }
//!     fn observed_generation(&self) -> Option<i64> { self.observed_generation }
//! }
//!
//! let gw = Gateway {
//!     metadata: ObjectMeta { generation: Some(4), ..Default::default() },
//!     observed_generation: Some(3),
//! };
//! assert_eq!(controller_observed(&gw), Ok(false));
//! ```
//!
//! [`condition_stale`] asks the same of one `metav1.Condition` in a status.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::error::Error;

/// A workload whose controller reports `status.observedGeneration`.
pub trait ObservedWorkload {
    /// The Kubernetes kind.
    const KIND: &'static str;
    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// `status.observedGeneration`, if reported.
    fn observed_generation(&self) -> Option<i64>;
}

macro_rules! observed_workload {
    ($ty:ty, $kind:literal) => {
        impl ObservedWorkload for $ty {
            const KIND: &'static str = $kind;
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn observed_generation(&self) -> Option<i64> {
                self.status.as_ref().and_then(|s| s.observed_generation)
            }
        }
    };
}

observed_workload!(Deployment, "Deployment");
observed_workload!(StatefulSet, "StatefulSet");
observed_workload!(DaemonSet, "DaemonSet");
observed_workload!(ReplicaSet, "ReplicaSet");
observed_workload!(ReplicationController, "ReplicationController");
observed_workload!(HorizontalPodAutoscaler, "HorizontalPodAutoscaler");
observed_workload!(PodDisruptionBudget, "PodDisruptionBudget");
observed_workload!(Pod, "Pod");

/// Whether the workload's controller has observed its latest spec:
/// `status.observedGeneration == metadata.generation`.
///
/// A missing `observedGeneration` is `Ok(false)`. A missing or negative
/// `metadata.generation`, a negative observed generation, or one above the
/// generation (a controller cannot have seen a spec that does not exist
/// yet: the object did not come from an API server, or was pieced
/// together from two reads) is an error.
///
/// # Errors
///
/// [`Error::InvalidObject`] naming the object and what is wrong.
pub fn controller_observed<W: ObservedWorkload>(workload: &W) -> Result<bool, Error> {
    let generation = generation_of(W::KIND, workload.meta())?;
    match workload.observed_generation() {
        None => Ok(false),
        Some(o) if o < 0 => Err(invalid(
            W::KIND,
            workload.meta(),
            format!("status.observedGeneration {o} is negative"),
        )),
        Some(o) if o > generation => Err(invalid(
            W::KIND,
            workload.meta(),
            format!("status.observedGeneration {o} is above metadata.generation {generation}"),
        )),
        Some(o) => Ok(o == generation),
    }
}

/// Whether a status condition of an object of kind `kind` with metadata
/// `meta` is stale: its `observedGeneration` is below `metadata.generation`,
/// so it describes an older spec than the current one (SPEC 2).
///
/// A condition without `observedGeneration` is stale too: it does not say
/// which spec it describes. A missing or negative `metadata.generation`, or
/// a negative condition `observedGeneration`, is an error naming the object
/// and the condition's type.
///
/// # Errors
///
/// [`Error::InvalidObject`] naming the object and the condition type for a
/// missing or negative `metadata.generation` or a negative observed
/// generation.
///
/// ```
/// use ate_generation::k8s::condition_stale;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
///
/// let meta = ObjectMeta { name: Some("gw".into()), generation: Some(5), ..Default::default() };
/// // As read from the API server (`status.conditions[]`):
/// let ready: Condition = serde_json::from_str(r#"{
///     "type": "Ready", "status": "True", "reason": "Programmed", "message": "",
///     "lastTransitionTime": "2026-11-29T10:00:00Z", "observedGeneration": 4
/// }"#).unwrap();
/// // "Ready" describes generation 4; the spec is at 5.
/// assert_eq!(condition_stale("Gateway", &meta, &ready), Ok(true));
/// ```
pub fn condition_stale(
    kind: &str,
    meta: &ObjectMeta,
    condition: &Condition,
) -> Result<bool, Error> {
    let generation = generation_of(kind, meta)?;
    match condition.observed_generation {
        None => Ok(true),
        Some(o) if o < 0 => Err(invalid(
            kind,
            meta,
            format!(
                "condition {:?} observedGeneration {o} is negative",
                condition.type_
            ),
        )),
        Some(o) => Ok(o < generation),
    }
}

/// `metadata.generation`, which an API server always sets (from 1).
fn generation_of(kind: &str, meta: &ObjectMeta) -> Result<i64, Error> {
    match meta.generation {
        None if kind == "Pod" => Err(invalid(
            kind,
            meta,
            "metadata.generation is missing (clusters before Kubernetes 1.33, or without \
             PodObservedGenerationTracking, do not set it on Pods)"
                .into(),
        )),
        None => Err(invalid(kind, meta, "metadata.generation is missing".into())),
        Some(g) if g < 0 => Err(invalid(
            kind,
            meta,
            format!("metadata.generation {g} is negative"),
        )),
        Some(g) => Ok(g),
    }
}

fn invalid(kind: &str, meta: &ObjectMeta, reason: String) -> Error {
    Error::InvalidObject {
        object: format!(
            "{kind}/{}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        ),
        reason,
    }
}
