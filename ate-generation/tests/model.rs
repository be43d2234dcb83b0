//! Property test: random reconciler histories against the reference model.

use ate_generation::testing::{Model, Op, ops};
use ate_generation::{Decision, Latch};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn latch_matches_model_and_keeps_its_invariants(seq in ops(60)) {
        let mut latch = Latch::new();
        let mut model = Model::new();
        for op in &seq {
            let before = latch;
            let refused = Model::drive(&mut latch, op);
            prop_assert_eq!(refused, model.refuses(op), "{:?} from {:?}", op, model);
            model.apply(op);
            prop_assert_eq!(latch.generation(), model.generation, "{:?}", op);
            prop_assert_eq!(latch.observed_generation(), model.observed, "{:?}", op);
            prop_assert!(latch.observed_generation() <= latch.generation());
            prop_assert!(latch.observed_generation() >= before.observed_generation());
            prop_assert!(latch.generation() >= before.generation());
            prop_assert_eq!(latch.is_converged(), model.converged());
            prop_assert_eq!(matches!(latch.gate(), Decision::Skip), model.converged());
        }
    }
}

#[test]
fn a_spec_change_during_an_apply_at_the_last_generation_is_refused_and_the_apply_recorded() {
    // The bump overflows (an error, never a wrap), the apply it raced is
    // still recorded: the drive reports the refusal, as the model says.
    let mut latch = Latch::from_parts(u64::MAX, u64::MAX - 1).unwrap();
    let model = Model {
        generation: u64::MAX,
        observed: u64::MAX - 1,
    };
    let op = Op::ApplyOkWithSpecChangeDuring;
    assert!(model.refuses(&op));
    assert!(Model::drive(&mut latch, &op));
    assert_eq!(latch.observed_generation(), u64::MAX);
    assert_eq!(latch.generation(), u64::MAX);
}

/// Operations whose control-plane writes land near `u64::MAX`, where the
/// latch starts: the model must refuse exactly where the latch does and
/// never overflow (it used to panic in debug builds on a spec change at
/// `u64::MAX`, while `refuses` said the step was refused).
fn ops_near_the_maximum() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => Just(Op::SpecChange),
        4 => Just(Op::ApplyOk),
        2 => Just(Op::ApplyOkWithSpecChangeDuring),
        3 => (0u64..8).prop_map(|d| Op::ControlWrite(u64::MAX - d)),
        1 => Just(Op::StatusChange),
    ];
    proptest::collection::vec(op, 0..=30)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_model_refuses_exactly_where_the_latch_does_at_the_maximum(
        gap in 0u64..6, lag in 0u64..4, seq in ops_near_the_maximum(),
    ) {
        let generation = u64::MAX - gap;
        let observed = generation - lag;
        let mut latch = Latch::from_parts(generation, observed).unwrap();
        let mut model = Model { generation, observed };
        for op in &seq {
            let refused = Model::drive(&mut latch, op);
            prop_assert_eq!(refused, model.refuses(op), "{:?} from {:?}", op, model);
            model.apply(op);
            prop_assert_eq!(latch.generation(), model.generation, "{:?}", op);
            prop_assert_eq!(latch.observed_generation(), model.observed, "{:?}", op);
        }
    }
}
