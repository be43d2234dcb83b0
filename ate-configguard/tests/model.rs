//! Property test: the guard agrees with a naive resolver on random states,
//! so it never passes a state where a non-optional reference breaks.

use ate_configguard::check;
use ate_configguard::testing::{naive_safe, order_transition, transition};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn guard_agrees_with_naive_resolver(input in transition()) {
        let report = check(&input).unwrap();
        prop_assert_eq!(report.is_safe(), naive_safe(&input), "{}", report.to_text());
    }

    #[test]
    fn a_hook_or_a_sync_wave_sees_what_the_naive_resolver_sees(input in order_transition()) {
        let report = check(&input).unwrap();
        prop_assert_eq!(report.is_safe(), naive_safe(&input), "{}", report.to_text());
    }
}
