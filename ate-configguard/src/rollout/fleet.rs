//! What the rollout gate reads: workloads, the Services and load
//! balancers in front of them, and what limits their disruption, each
//! with where it was read.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::model::{Place, WorkloadId};

/// One object the gate reads. ConfigMaps and Secrets are never one: the
/// gate does not read them at all.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RolloutObject {
    /// An `apps/v1` Deployment.
    Deployment(Box<Deployment>),
    /// An `apps/v1` StatefulSet.
    StatefulSet(Box<StatefulSet>),
    /// An `apps/v1` DaemonSet.
    DaemonSet(Box<DaemonSet>),
    /// A kind allowed with `--allow-kind` whose `spec.template` is a pod
    /// template (an Argo Rollout, say): its containers are checked, its
    /// strategy is not read.
    Templated {
        /// Its kind, namespace and name.
        id: WorkloadId,
        /// Its pod template.
        template: Box<PodTemplateSpec>,
        /// Its metadata's annotations.
        annotations: BTreeMap<String, String>,
    },
    /// A Service: what it selects is served.
    Service(Box<Service>),
    /// An Ingress: its backends' load-balancer annotations.
    Ingress(Box<Ingress>),
    /// A `policy/v1` PodDisruptionBudget.
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    /// A HorizontalPodAutoscaler (`autoscaling/v1` is read into `v2`): the
    /// replicas of a workload that leaves `spec.replicas` unset.
    HorizontalPodAutoscaler(Box<HorizontalPodAutoscaler>),
    /// A GKE `BackendConfig` (`cloud.google.com`).
    BackendConfig(BackendConfig),
    /// A live Pod: which image (by digest) its containers run, for
    /// [`rollback_plan`](super::rollback_plan).
    Pod(Box<Pod>),
}

/// What the gate reads of a GKE `BackendConfig`: how long the load
/// balancer keeps draining a backend, and what its health check asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendConfig {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `spec.connectionDraining.drainingTimeoutSec`.
    pub draining_timeout_sec: Option<i64>,
    /// `spec.healthCheck.requestPath`.
    pub health_check_path: Option<String>,
}

/// Objects the rollout gate reads, each with where it was read (`None`
/// for one built in code).
///
/// ```
/// use ate_configguard::rollout::{Fleet, RolloutObject};
/// use k8s_openapi::api::apps::v1::Deployment;
///
/// let mut fleet = Fleet::default();
/// fleet.push(RolloutObject::Deployment(Box::new(Deployment::default())), None);
/// assert_eq!(fleet.objects.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fleet {
    /// The objects, in the order read.
    pub objects: Vec<(RolloutObject, Option<Place>)>,
}

impl Fleet {
    /// Adds one object, read at `place`.
    pub fn push(&mut self, object: RolloutObject, place: Option<Place>) {
        self.objects.push((object, place));
    }

    /// Appends everything `other` holds (as reading one more file does).
    pub fn extend(&mut self, other: Fleet) {
        self.objects.extend(other.objects);
    }
}
