//! Property test: random reconciler histories against the reference model.

use ate_generation::testing::{Model, ops};
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
            let _ = Model::drive(&mut latch, op);
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
