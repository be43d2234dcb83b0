//! Serialized form (feature `serde`): Kubernetes names, validated input.
#![cfg(feature = "serde")]

use ate_generation::Latch;

#[test]
fn serializes_with_kubernetes_names() {
    let latch = Latch::from_parts(3, 2).unwrap();
    let json = serde_json::to_string(&latch).unwrap();
    assert_eq!(json, r#"{"generation":3,"observedGeneration":2}"#);
    assert_eq!(serde_json::from_str::<Latch>(&json).unwrap(), latch);
}

#[test]
fn deserializing_observed_above_generation_is_a_clear_error() {
    let err = serde_json::from_str::<Latch>(r#"{"generation":2,"observedGeneration":5}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("observed generation 5 is above generation 2"),
        "{err}"
    );
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    for bad in [
        r#"{"generation":-1,"observedGeneration":0}"#,
        r#"{"generation":1}"#,
        r#"{"generation":"1","observedGeneration":0}"#,
        r#"{"generation":18446744073709551616,"observedGeneration":0}"#,
        // A number twice: which one a reader takes differs between parsers.
        r#"{"generation":2,"observedGeneration":1,"generation":1}"#,
        "[]",
        "",
    ] {
        assert!(serde_json::from_str::<Latch>(bad).is_err(), "{bad}");
    }
    // The message names the type the caller asked for, not a private one.
    let err = serde_json::from_str::<Latch>("null")
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected a Latch"), "{err}");
}

/// A stored row with a misspelled field (`observed` for
/// `observedGeneration`) is refused, naming the field, instead of loading
/// as never observed; so is any field the latch does not have.
#[test]
fn unknown_fields_are_refused_naming_them() {
    let err = serde_json::from_str::<Latch>(r#"{"generation":2,"observed":2}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `observed`"), "{err}");
    let err =
        serde_json::from_str::<Latch>(r#"{"generation":2,"observedGeneration":1,"phase":"Ready"}"#)
            .unwrap_err()
            .to_string();
    assert!(err.contains("unknown field `phase`"), "{err}");
}
