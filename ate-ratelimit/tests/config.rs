//! Limits from environment variables: a table of good and bad values.

use std::num::NonZeroU32;

use ate_ratelimit::{
    Error,
    config::{LimitTable, parse_positive},
};

#[test]
fn env_values_must_be_positive_integers() {
    let good = [("1", 1), ("150", 150), ("007", 7), ("4294967295", u32::MAX)];
    for (value, want) in good {
        assert_eq!(parse_positive("V", value).unwrap().get(), want, "{value:?}");
    }
    let bad = [
        "",
        "0",
        "00",
        "-1",
        "+5",
        " 5",
        "5 ",
        "\t5",
        "5\n",
        "1.5",
        "1e3",
        "abc",
        "0x10",
        "4294967296",
        "99999999999999999999",
        "1_000",
        "١٢",
    ];
    for value in bad {
        let err = parse_positive("ATE_X_PER_MIN", value).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("ATE_X_PER_MIN"), "{msg}");
        assert!(msg.contains(&format!("{value:?}")), "{msg}");
    }
}

#[test]
fn missing_variable_means_the_default_and_set_ones_override() {
    let table = LimitTable::new()
        .limit("notifications", "N_PER_MIN", NonZeroU32::new(150).unwrap())
        .limit("prompt", "P_PER_MIN", NonZeroU32::new(120).unwrap());
    let got = table
        .resolve_with(|v| (v == "P_PER_MIN").then(|| "30".to_string()))
        .unwrap();
    assert_eq!(got[0].1.limit().get(), 150);
    assert_eq!(got[1].1.limit().get(), 30);
}

#[test]
fn invalid_or_zero_value_is_a_startup_error_naming_variable_and_value() {
    let table = LimitTable::new().limit("prompt", "P_PER_MIN", NonZeroU32::new(120).unwrap());
    let err = table.resolve_with(|_| Some("0".to_string())).unwrap_err();
    assert!(
        matches!(err, Error::InvalidEnv { ref var, ref value, .. } if var == "P_PER_MIN" && value == "0")
    );
}

#[test]
fn duplicate_names_are_refused() {
    let table = LimitTable::new()
        .limit("a", "A1", NonZeroU32::new(1).unwrap())
        .limit("a", "A2", NonZeroU32::new(1).unwrap());
    assert_eq!(
        table.resolve_with(|_| None),
        Err(Error::DuplicateLimit("a".into()))
    );
}

#[cfg(feature = "serde")]
#[test]
fn tables_deserialize_with_serde_and_refuse_zero() {
    let json =
        r#"[{"name":"notifications","env":"N","limit":150},{"name":"x","limit":5,"window":10}]"#;
    let table: LimitTable = serde_json::from_str(json).unwrap();
    assert_eq!(table.specs()[0].window.as_secs(), 60);
    assert_eq!(table.specs()[1].window.as_secs(), 10);
    // Each refusal names the bad value (or field).
    for (json, names) in [
        (r#"[{"name":"x","limit":0}]"#, "integer `0`"),
        (r#"[{"name":"x","limit":-5}]"#, "integer `-5`"),
        (r#"[{"name":"x","limit":"150"}]"#, "string \"150\""),
        (
            r#"[{"name":"x","limit":4294967296}]"#,
            "integer `4294967296`",
        ),
        (r#"[{"name":"x","limit":1,"window":0}]"#, "integer `0`"),
        (
            r#"[{"name":"x","limit":1,"bogus":1}]"#,
            "unknown field `bogus`",
        ),
    ] {
        let err = serde_json::from_str::<LimitTable>(json)
            .unwrap_err()
            .to_string();
        assert!(err.contains(names), "{json}: {err}");
    }
}

#[cfg(feature = "serde")]
#[test]
fn tables_serialize_windows_as_whole_seconds_and_refuse_a_fraction() {
    let table = LimitTable::new().limit("a", "A", NonZeroU32::new(5).unwrap());
    let json = serde_json::to_string(&table).unwrap();
    assert_eq!(json, r#"[{"name":"a","env":"A","limit":5,"window":60}]"#);
    assert_eq!(serde_json::from_str::<LimitTable>(&json).unwrap(), table);
    // 1.5 s written as 1 would read back as a different, looser limit.
    let short = table.with_window(std::time::Duration::from_millis(1_500));
    let err = serde_json::to_string(&short).unwrap_err().to_string();
    assert!(
        err.contains("window 1.5s is not a whole number of seconds"),
        "{err}"
    );
}

#[test]
fn a_variable_the_process_does_not_have_means_the_default() {
    // The process environment itself (not a lookup): nothing sets this.
    let var = "ATE_RATELIMIT_TEST_NEVER_SET_6F1C";
    assert!(std::env::var_os(var).is_none());
    let per_min = |n| NonZeroU32::new(n).unwrap();
    let table = LimitTable::new().limit("notifications", var, per_min(150));
    let resolved = table.resolve_env().unwrap();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].0, "notifications");
    assert_eq!(
        resolved[0].1,
        ate_ratelimit::Quota::per_minute(per_min(150))
    );
}
