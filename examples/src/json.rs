//! JSON request bodies parsed strictly: an object with the same key twice,
//! at any depth, is refused.
//!
//! `serde_json` keeps the last of two equal keys; other parsers keep the
//! first. A body with a key twice therefore means different things to
//! different readers (a validating proxy could approve `{"replicas": 2,
//! "replicas": 3}` as 2 while the service applied 3), so the services
//! answer 400 instead of picking one.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `body` as JSON, refusing a key that appears twice in one object.
/// The error is a message for a 400 response, with `serde_json`'s line and
/// column: `the body is ambiguous: the key "replicas" appears twice in one
/// object at line 1 column 30`, or `the body must be JSON: ...`.
pub fn parse(body: &[u8]) -> Result<Value, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        // serde_json's "EOF while parsing a value at line 1 column 0".
        return Err("the body is empty: it must be JSON".into());
    }
    serde_json::from_slice::<Strict>(body)
        .map(|Strict(v)| v)
        .map_err(|e| {
            if e.is_data() {
                // Any JSON text is a Value: only a repeated key gets here.
                format!("the body is ambiguous: {e}")
            } else {
                format!("the body must be JSON: {e}")
            }
        })
}

/// A [`Value`] whose objects were checked for repeated keys.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity; `from` maps them to null.
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key {key:?} appears twice in one object"
                )));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// `value` with every number that is a whole number written as a float
/// (`1.0`, `-0.0`, `2e3`) as that integer, so that two specs that differ
/// only in how a number is written compare equal: `{"replicas": 1}` and
/// `{"replicas": 1.0}` are one desired state (as for the Kubernetes API
/// server, which decodes both into the same integer field). Floats beyond
/// 2^53, where whole numbers are no longer exact, stay as they are.
pub fn canonical(value: &Value) -> Value {
    match value {
        Value::Number(n) => {
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
            match n.as_f64() {
                Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() <= EXACT => {
                    // In range and whole: the conversion is exact.
                    #[allow(clippy::cast_possible_truncation)]
                    Value::from(f as i64)
                }
                _ => value.clone(),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), canonical(v)))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_body_says_so() {
        for body in ["", " \r\n\t"] {
            assert_eq!(
                parse(body.as_bytes()),
                Err("the body is empty: it must be JSON".into()),
                "{body:?}"
            );
        }
    }

    #[test]
    fn parses_what_serde_json_parses_when_no_key_repeats() {
        for text in [
            r#"{"a": 1, "b": [true, null, -2, 3.5, "x", {"a": {}}], "c": 18446744073709551615}"#,
            "[]",
            "\"s\"",
            "1e400",
            "{}",
        ] {
            let ours = parse(text.as_bytes()).map_err(|e| e.to_string());
            let theirs = serde_json::from_str::<Value>(text)
                .map_err(|e| format!("the body must be JSON: {e}"));
            assert_eq!(ours, theirs, "{text}");
        }
    }

    #[test]
    fn whole_floats_compare_as_integers_at_any_depth_and_large_ones_stay_apart() {
        assert_eq!(
            canonical(&json!({"r": 2.0, "xs": [1.0, {"a": -0.0, "b": 2e3}], "s": "1.0"})),
            json!({"r": 2, "xs": [1, {"a": 0, "b": 2000}], "s": "1.0"})
        );
        assert_eq!(canonical(&json!(1.5)), json!(1.5));
        // Past 2^53 a float is left as it is: two different ones must not
        // meet at one integer (a spec change would then go unseen).
        assert_eq!(canonical(&json!(1e20)), json!(1e20));
        assert_ne!(canonical(&json!(1e20)), canonical(&json!(2e20)));
        assert_eq!(
            canonical(&json!(9_007_199_254_740_992.0)),
            json!(9_007_199_254_740_992_i64)
        );
    }

    #[test]
    fn a_key_twice_at_any_depth_is_an_error_naming_it() {
        for (text, key) in [
            (r#"{"a": 1, "a": 1}"#, "a"),
            (r#"{"x": {"b": 1, "c": 2, "b": 3}}"#, "b"),
            (r#"[{"ok": 1}, {"k": 1, "k": 2}]"#, "k"),
        ] {
            let e = parse(text.as_bytes()).unwrap_err();
            assert!(
                e.starts_with("the body is ambiguous: ")
                    && e.contains(&format!("the key {key:?} appears twice")),
                "{text}: {e}"
            );
        }
        assert_eq!(
            parse(br#"{"a": {"n": 1}, "b": {"n": 1}}"#).unwrap(),
            json!({"a": {"n": 1}, "b": {"n": 1}})
        );
    }

    fn value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_value_without_a_repeated_key_reads_back_as_serde_json_reads_it(v in value()) {
            let text = serde_json::to_string(&v).unwrap();
            let theirs: Value = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(parse(text.as_bytes()).unwrap(), theirs);
        }

        #[test]
        fn a_repeated_key_is_refused_whatever_the_values(
            key in ".{0,6}", a in value(), b in value(), nested in proptest::bool::ANY,
        ) {
            let key_json = serde_json::to_string(&key).unwrap();
            let object = format!("{{{key_json}: {a}, \"other\": 1, {key_json}: {b}}}");
            let text = if nested { format!("[{{\"x\": {object}}}]") } else { object };
            let error = parse(text.as_bytes()).unwrap_err();
            proptest::prop_assert!(
                error.contains(&format!("the key {key:?} appears twice")),
                "{}: {}", text, error
            );
        }
    }

    #[test]
    fn the_recursion_limit_still_applies() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(parse(deep.as_bytes()).is_err());
    }
}
