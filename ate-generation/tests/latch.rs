//! Every rule of the latch, named after the behaviour.

use ate_generation::{Advance, Decision, Error, Latch, Observe, Writer, is_condition_stale};

#[derive(Clone, PartialEq)]
struct Obj {
    name: String,  // identity
    replicas: u32, // desired
    image: String, // desired
    phase: String, // status
    healthy: bool, // status
}

fn desired(o: &Obj) -> (u32, String) {
    (o.replicas, o.image.clone())
}

fn obj() -> Obj {
    Obj {
        name: "gw".into(),
        replicas: 1,
        image: "v1".into(),
        phase: "Running".into(),
        healthy: true,
    }
}

#[test]
fn new_object_is_never_converged() {
    let latch = Latch::new();
    assert_eq!((latch.generation(), latch.observed_generation()), (1, 0));
    assert!(!latch.is_converged());
    assert_eq!(latch.lag(), 1);
    assert!(matches!(latch.gate(), Decision::Apply(t) if t.target() == 1));
}

#[test]
fn backfilled_rows_start_converged() {
    let latch = Latch::backfilled(7);
    assert!(latch.is_converged());
    assert!(matches!(latch.gate(), Decision::Skip));
}

#[test]
fn spec_change_on_a_running_object_is_applied() {
    let mut latch = Latch::backfilled(1);
    let old = obj();
    let mut new = obj();
    new.image = "v2".into();
    assert_eq!(
        latch.update_spec_by(&old, &new, desired),
        Ok(Advance::Advanced(2))
    );
    assert_eq!(new.phase, "Running");
    match latch.gate() {
        Decision::Apply(ticket) => assert_eq!(ticket.target(), 2),
        Decision::Skip => panic!("a Running object with a spec change must be applied"),
    }
}

#[test]
fn status_only_change_does_not_bump_generation() {
    let mut latch = Latch::backfilled(3);
    let old = obj();
    let mut new = obj();
    new.phase = "Degraded".into();
    new.healthy = false;
    new.name = "renamed".into();
    assert_eq!(
        latch.update_spec_by(&old, &new, desired),
        Ok(Advance::Unchanged)
    );
    assert_eq!(latch.generation(), 3);
    assert!(latch.is_converged());
}

impl ate_generation::DesiredSpec for Obj {
    fn same_desired_spec(&self, other: &Self) -> bool {
        desired(self) == desired(other)
    }
}

#[test]
fn desired_spec_trait_decides_the_advance() {
    let mut latch = Latch::new();
    let mut new = obj();
    assert_eq!(latch.update_spec(&obj(), &new,), Ok(Advance::Unchanged));
    new.replicas = 3;
    assert_eq!(latch.update_spec(&obj(), &new), Ok(Advance::Advanced(2)));
}

#[test]
fn regression_is_refused_with_both_numbers() {
    let mut latch = Latch::backfilled(5);
    latch.bump().unwrap();
    let err = latch.observe(Writer::ControlPlane, 4).unwrap_err();
    assert_eq!(
        err,
        Error::Regression {
            current: 5,
            attempted: 4
        }
    );
    let msg = err.to_string();
    assert!(msg.contains('4') && msg.contains('5'), "{msg}");
    assert_eq!(latch.observed_generation(), 5);
}

#[test]
fn overshoot_is_refused_with_both_numbers() {
    let mut latch = Latch::new();
    let err = latch.observe(Writer::ControlPlane, 2).unwrap_err();
    assert_eq!(
        err,
        Error::Overshoot {
            generation: 1,
            attempted: 2
        }
    );
    let msg = err.to_string();
    assert!(msg.contains('1') && msg.contains('2'), "{msg}");
    assert_eq!(latch.observed_generation(), 0);
}

#[test]
fn writing_the_current_observed_again_is_a_noop_success() {
    let mut latch = Latch::backfilled(4);
    assert_eq!(
        latch.observe(Writer::ControlPlane, 4),
        Ok(Observe::Unchanged)
    );
    assert_eq!(latch, Latch::backfilled(4));
}

#[test]
fn observed_may_move_up_to_generation() {
    let mut latch = Latch::new();
    latch.bump().unwrap();
    latch.bump().unwrap();
    assert_eq!(
        latch.observe(Writer::ControlPlane, 2),
        Ok(Observe::Advanced { from: 0, to: 2 })
    );
    assert_eq!(
        latch.observe(Writer::ControlPlane, 3),
        Ok(Observe::Advanced { from: 2, to: 3 })
    );
    assert!(latch.is_converged());
}

#[test]
fn client_write_is_refused() {
    let mut latch = Latch::new();
    assert_eq!(
        latch.observe(Writer::Client, 1),
        Err(Error::ClientWrite { attempted: 1 })
    );
    assert_eq!(
        latch.apply_update(Writer::Client, Some(1)),
        Err(Error::ClientWrite { attempted: 1 })
    );
    assert_eq!(latch.observed_generation(), 0);
}

#[test]
fn omitted_observed_is_preserved() {
    let mut latch = Latch::backfilled(2);
    latch.bump().unwrap();
    assert_eq!(
        latch.apply_update(Writer::ControlPlane, None),
        Ok(Observe::Unchanged)
    );
    assert_eq!(
        latch.apply_update(Writer::Client, None),
        Ok(Observe::Unchanged)
    );
    assert_eq!(latch.observed_generation(), 2);
}

#[test]
fn spec_change_during_apply_stays_unobserved_after_apply_succeeds() {
    let mut latch = Latch::new();
    let Decision::Apply(ticket) = latch.gate() else {
        panic!("new object must apply")
    };
    // The spec changes while the apply is running.
    latch.bump().unwrap();
    assert_eq!(
        latch.record(ticket),
        Ok(Observe::Advanced { from: 0, to: 1 })
    );
    assert_eq!((latch.generation(), latch.observed_generation()), (2, 1));
    assert!(!latch.is_converged());
    assert!(matches!(latch.gate(), Decision::Apply(t) if t.target() == 2));
}

#[test]
fn failed_apply_leaves_observed_unchanged_so_it_is_retried() {
    let latch = Latch::new();
    let Decision::Apply(ticket) = latch.gate() else {
        panic!()
    };
    drop(ticket); // the apply failed
    assert_eq!(latch.observed_generation(), 0);
    assert!(matches!(latch.gate(), Decision::Apply(t) if t.target() == 1));
}

#[test]
fn gate_skips_only_when_converged_whatever_the_phase() {
    for phase in ["Running", "Provisioning", "Degraded", "Failed"] {
        let mut latch = Latch::backfilled(1);
        assert!(matches!(latch.gate(), Decision::Skip), "{phase}");
        latch.bump().unwrap();
        assert!(matches!(latch.gate(), Decision::Apply(_)), "{phase}");
    }
}

#[test]
fn overflow_is_an_error_never_a_wrap() {
    let mut latch = Latch::backfilled(u64::MAX);
    assert_eq!(
        latch.bump(),
        Err(Error::Overflow {
            generation: u64::MAX
        })
    );
    let old = obj();
    let mut new = obj();
    new.replicas = 9;
    assert_eq!(
        latch.update_spec_by(&old, &new, desired),
        Err(Error::Overflow {
            generation: u64::MAX
        })
    );
    assert_eq!(latch.generation(), u64::MAX);
}

#[test]
fn from_parts_validates_observed_not_above_generation() {
    assert_eq!(Latch::from_parts(3, 2).unwrap().lag(), 1);
    assert_eq!(Latch::from_parts(9, 2).unwrap().lag(), 7);
    // Equal is a converged row, not an error.
    let converged = Latch::from_parts(3, 3).unwrap();
    assert!(converged.is_converged());
    assert_eq!(converged.lag(), 0);
    let err = Latch::from_parts(2, 3).unwrap_err();
    assert_eq!(
        err,
        Error::Invalid {
            generation: 2,
            observed: 3
        }
    );
    assert!(err.to_string().contains('3'));
}

#[test]
fn condition_below_generation_is_stale() {
    let mut latch = Latch::backfilled(4);
    assert!(!latch.is_condition_stale(4));
    latch.bump().unwrap();
    assert!(latch.is_condition_stale(4));
    assert!(!latch.is_condition_stale(5));
    assert!(is_condition_stale(0, 1));
}

#[test]
fn a_shared_bump_returns_the_new_generation() {
    let shared = ate_generation::SharedLatch::new(Latch::from_parts(4, 4).unwrap());
    assert_eq!(shared.bump(), Ok(5));
    assert_eq!(shared.bump(), Ok(6));
    assert_eq!(shared.get().generation(), 6);
    let full = ate_generation::SharedLatch::new(Latch::backfilled(u64::MAX));
    assert_eq!(
        full.bump(),
        Err(Error::Overflow {
            generation: u64::MAX
        })
    );
}
