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

/// A controller cannot have observed a spec that does not exist yet: an
/// observed generation above the generation is an invariant error naming
/// both numbers (it used to read as converged).
#[test]
fn observed_generation_above_generation_is_an_error() {
    let err = controller_observed(&deployment(Some(3), Some(4))).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("observedGeneration 4 is above metadata.generation 3"),
        "{msg}"
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
    let err = controller_observed(&deployment(Some(-1), Some(1))).unwrap_err();
    assert!(err.to_string().contains("-1"), "{err}");
    // Every negative value, -1 included.
    for observed in [-1, -2, i64::MIN] {
        let err = controller_observed(&deployment(Some(1), Some(observed))).unwrap_err();
        assert!(err.to_string().contains(&observed.to_string()), "{err}");
    }
}

#[test]
fn zero_is_a_generation_and_an_observed_generation_not_a_negative_one() {
    // Only below zero is an error: 0 is where a latch's observed starts.
    assert_eq!(
        controller_observed(&deployment(Some(1), Some(0))),
        Ok(false)
    );
    assert_eq!(controller_observed(&deployment(Some(0), Some(0))), Ok(true));
}

#[test]
fn only_a_pod_missing_its_generation_is_told_about_pod_generation_tracking() {
    // Pods got `metadata.generation` in Kubernetes 1.33; every other kind
    // always had it, so its absence is said plainly.
    let err = controller_observed(&deployment(None, Some(1)))
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("metadata.generation is missing"), "{err}");
    assert!(!err.contains("Pod"), "{err}");
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

#[test]
fn replicasets_replication_controllers_and_autoscalers_are_read_too() {
    use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
    use k8s_openapi::api::autoscaling::v2::{
        HorizontalPodAutoscaler, HorizontalPodAutoscalerStatus,
    };
    use k8s_openapi::api::core::v1::{ReplicationController, ReplicationControllerStatus};
    let meta = |g| ObjectMeta {
        name: Some("web".into()),
        generation: Some(g),
        ..Default::default()
    };
    let rs = |observed| ReplicaSet {
        metadata: meta(3),
        status: Some(ReplicaSetStatus {
            observed_generation: observed,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(controller_observed(&rs(Some(3))), Ok(true));
    assert_eq!(controller_observed(&rs(Some(2))), Ok(false));
    assert_eq!(controller_observed(&rs(None)), Ok(false));
    let rc = ReplicationController {
        metadata: meta(2),
        status: Some(ReplicationControllerStatus {
            observed_generation: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(controller_observed(&rc), Ok(false));
    let hpa = HorizontalPodAutoscaler {
        metadata: meta(2),
        status: Some(HorizontalPodAutoscalerStatus {
            observed_generation: Some(2),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(controller_observed(&hpa), Ok(true));
    let err = controller_observed(&ReplicationController::default()).unwrap_err();
    assert!(err.to_string().contains("ReplicationController//"), "{err}");
}

mod conditions {
    use ate_generation::k8s::condition_stale;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

    fn meta(generation: Option<i64>) -> ObjectMeta {
        ObjectMeta {
            name: Some("gw".into()),
            namespace: Some("edge".into()),
            generation,
            ..Default::default()
        }
    }

    fn ready(observed: Option<i64>) -> Condition {
        let mut condition = serde_json::json!({
            "type": "Ready", "status": "True", "reason": "Programmed", "message": "",
            "lastTransitionTime": "2026-11-29T10:00:00Z",
        });
        if let Some(o) = observed {
            condition["observedGeneration"] = o.into();
        }
        serde_json::from_value(condition).unwrap()
    }

    #[test]
    fn a_condition_is_stale_iff_its_observed_generation_is_below_generation() {
        assert_eq!(
            condition_stale("Gateway", &meta(Some(5)), &ready(Some(4))),
            Ok(true)
        );
        assert_eq!(
            condition_stale("Gateway", &meta(Some(5)), &ready(Some(5))),
            Ok(false)
        );
        assert_eq!(
            condition_stale("Gateway", &meta(Some(1)), &ready(Some(0))),
            Ok(true)
        );
    }

    #[test]
    fn a_condition_that_does_not_say_what_it_observed_is_stale() {
        assert_eq!(
            condition_stale("Gateway", &meta(Some(1)), &ready(None)),
            Ok(true)
        );
    }

    #[test]
    fn bad_generations_are_errors_naming_the_object_and_the_condition() {
        let err = condition_stale("Gateway", &meta(None), &ready(Some(1))).unwrap_err();
        assert!(err.to_string().contains("Gateway/edge/gw"), "{err}");
        assert!(
            err.to_string().contains("metadata.generation is missing"),
            "{err}"
        );
        let err = condition_stale("Gateway", &meta(Some(-3)), &ready(Some(1))).unwrap_err();
        assert!(err.to_string().contains("-3"), "{err}");
        let err = condition_stale("Gateway", &meta(Some(2)), &ready(Some(-1))).unwrap_err();
        assert!(err.to_string().contains("\"Ready\""), "{err}");
        assert!(err.to_string().contains("-1"), "{err}");
    }
}

#[test]
fn a_pod_resized_in_place_is_observed_once_the_kubelet_reports_its_generation() {
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    let pod = |generation: Option<i64>, observed: Option<i64>| Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some("prod".into()),
            generation,
            ..Default::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".into()),
            observed_generation: observed,
            ..Default::default()
        }),
        ..Default::default()
    };
    // Resized (generation 2) while Running: not applied until the kubelet
    // reports generation 2.
    assert_eq!(controller_observed(&pod(Some(2), Some(1))), Ok(false));
    assert_eq!(controller_observed(&pod(Some(2), Some(2))), Ok(true));
    // A cluster that does not track pod generations sets none: an error
    // that says why, never a guess either way.
    let err = controller_observed(&pod(None, None)).unwrap_err();
    assert!(err.to_string().contains("Pod/prod/web-0"), "{err}");
    assert!(
        err.to_string().contains("PodObservedGenerationTracking"),
        "{err}"
    );
}

#[test]
fn pod_disruption_budgets_are_read_too() {
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
    let pdb = |observed| PodDisruptionBudget {
        metadata: ObjectMeta {
            generation: Some(3),
            ..Default::default()
        },
        status: Some(PodDisruptionBudgetStatus {
            observed_generation: observed,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(controller_observed(&pdb(Some(2))), Ok(false));
    assert_eq!(controller_observed(&pdb(Some(3))), Ok(true));
}
