//! Reading Kubernetes workloads (feature `k8s`).
#![cfg(feature = "k8s")]

use ate_generation::k8s::controller_observed;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, StatefulSet, StatefulSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn deployment(generation: Option<i64>, observed: Option<i64>) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("prod".into()),
            generation,
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            observed_generation: observed,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn controller_observed_iff_observed_generation_reaches_generation() {
    assert_eq!(controller_observed(&deployment(Some(3), Some(3))), Ok(true));
    assert_eq!(
        controller_observed(&deployment(Some(3), Some(2))),
        Ok(false)
    );
}

#[test]
fn missing_observed_generation_is_not_converged() {
    assert_eq!(controller_observed(&deployment(Some(1), None)), Ok(false));
    let mut d = deployment(Some(1), None);
    d.status = None;
    assert_eq!(controller_observed(&d), Ok(false));
}

#[test]
fn missing_or_negative_generation_is_an_error() {
    let err = controller_observed(&deployment(None, Some(1))).unwrap_err();
    assert!(err.to_string().contains("Deployment/prod/web"), "{err}");
    assert!(controller_observed(&deployment(Some(-1), Some(1))).is_err());
    assert!(controller_observed(&deployment(Some(1), Some(-2))).is_err());
}

#[test]
fn statefulsets_are_read_too() {
    let s = StatefulSet {
        metadata: ObjectMeta {
            generation: Some(2),
            ..Default::default()
        },
        status: Some(StatefulSetStatus {
            observed_generation: Some(2),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(controller_observed(&s), Ok(true));
}
