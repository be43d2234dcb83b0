//! What a snapshot reports: the last wait's outcome and count as one
//! value, and the counters of work admitted or refused while draining.

use std::time::Duration;

use ate_readiness::{AdmissionPolicy, Error, Gate, SessionAdmission, WaitOutcome};

/// Lame duck: requests admitted while draining are counted (a metric of
/// how long the load balancer kept routing to the pod); sessions told to
/// close at once count as refused.
#[test]
fn work_admitted_while_draining_is_counted() {
    let gate = Gate::new();
    let before = gate.admit().unwrap();
    assert_eq!(gate.snapshot().admitted_while_draining, 0);
    let _ = gate.begin_drain();
    let a = gate.admit().unwrap();
    let b = gate.admit_owned().unwrap();
    assert!(matches!(
        gate.admit_session(),
        SessionAdmission::AcceptThenClose { .. }
    ));
    let snap = gate.snapshot();
    assert_eq!(snap.admitted_while_draining, 2);
    assert_eq!(snap.refused_while_draining, 1);
    assert_eq!(snap.in_flight, 3);
    drop((before, a, b));
}

/// Strict: refused requests are counted, and nothing is admitted.
#[test]
fn work_refused_under_the_strict_policy_is_counted() {
    let gate = Gate::builder()
        .policy(AdmissionPolicy::Strict {
            retry_after_secs: 5,
        })
        .build();
    let _ = gate.begin_drain();
    for _ in 0..3 {
        assert_eq!(
            gate.admit().unwrap_err(),
            Error::Draining {
                retry_after_secs: 5
            }
        );
    }
    let snap = gate.snapshot();
    assert_eq!(
        (snap.admitted_while_draining, snap.refused_while_draining),
        (0, 3)
    );
    assert_eq!(snap.in_flight, 0);
}

/// The last wait's outcome and its count are one value: every count a
/// wait can report comes back exactly, up to the gate's largest count.
#[test]
fn the_last_wait_is_reported_whole() {
    let gate = Gate::new();
    assert_eq!(gate.snapshot().last_wait, None);
    let guards: Vec<_> = (0..3).map(|_| gate.admit().unwrap()).collect();
    assert_eq!(
        gate.wait_idle(Duration::ZERO),
        WaitOutcome::TimedOut { in_flight: 3 }
    );
    assert_eq!(
        gate.snapshot().last_wait,
        Some(WaitOutcome::TimedOut { in_flight: 3 })
    );
    drop(guards);
    assert_eq!(gate.wait_idle(Duration::ZERO), WaitOutcome::Completed);
    assert_eq!(gate.snapshot().last_wait, Some(WaitOutcome::Completed));
}

/// Waits that end with different counts race with snapshot readers: a
/// reader only ever sees an outcome some wait reported, never one wait's
/// kind with another's count.
#[test]
fn racing_waits_and_readers_never_see_a_torn_outcome() {
    let gate = Gate::new();
    let held: Vec<_> = (0..5).map(|_| gate.admit_owned().unwrap()).collect();
    std::thread::scope(|s| {
        // Waits time out with 5, 6 or 7 in flight as guards come and go.
        let waiter = s.spawn(|| {
            for i in 0..20_000u32 {
                let extra: Vec<_> = (0..i % 3).map(|_| gate.admit().unwrap()).collect();
                let _ = gate.wait_idle(Duration::ZERO);
                drop(extra);
            }
        });
        while !waiter.is_finished() {
            match gate.snapshot().last_wait {
                None | Some(WaitOutcome::TimedOut { in_flight: 5..=7 }) => {}
                other => panic!("a wait never reported {other:?}"),
            }
        }
    });
    drop(held);
}

/// With `serde`, the snapshot carries the last wait and the counters.
#[cfg(feature = "serde")]
#[test]
fn the_serialized_snapshot_keeps_the_last_wait_and_the_counters() {
    let gate = Gate::new();
    let g = gate.admit().unwrap();
    let _ = gate.wait_idle(Duration::ZERO);
    let _ = gate.begin_drain();
    let late = gate.admit().unwrap();
    let json = serde_json::to_value(gate.snapshot()).unwrap();
    assert_eq!(
        json["last_wait"],
        serde_json::json!({"outcome": "timed_out", "in_flight": 1})
    );
    assert_eq!(json["admitted_while_draining"], 1);
    assert_eq!(json["refused_while_draining"], 0);
    assert_eq!(json["state"], "Draining");
    drop((g, late));
    let _ = gate.wait_idle(Duration::ZERO);
    let json = serde_json::to_value(gate.snapshot()).unwrap();
    assert_eq!(
        json["last_wait"],
        serde_json::json!({"outcome": "completed"})
    );
}
