//! Reading `metadata.generation` / `status.observedGeneration` from
//! Kubernetes workloads (feature `k8s`).
//!
//! Unlike kstatus, a missing `observedGeneration` is NOT converged: the
//! controller has not said it saw anything.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Error;

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

/// Whether the workload's controller has observed its latest spec:
/// `status.observedGeneration >= metadata.generation`.
///
/// A missing `observedGeneration` is `Ok(false)`. A missing or negative
/// `metadata.generation`, or a negative observed generation, is an error
/// (the object did not come from an API server).
pub fn controller_observed<W: ObservedWorkload>(workload: &W) -> Result<bool, Error> {
    let meta = workload.meta();
    let object = format!(
        "{}/{}/{}",
        W::KIND,
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    );
    let generation = match meta.generation {
        None => {
            return Err(Error::InvalidObject {
                object,
                reason: "metadata.generation is missing".into(),
            });
        }
        Some(g) if g < 0 => {
            return Err(Error::InvalidObject {
                object,
                reason: format!("metadata.generation {g} is negative"),
            });
        }
        Some(g) => g,
    };
    match workload.observed_generation() {
        None => Ok(false),
        Some(o) if o < 0 => Err(Error::InvalidObject {
            object,
            reason: format!("status.observedGeneration {o} is negative"),
        }),
        Some(o) => Ok(o >= generation),
    }
}
