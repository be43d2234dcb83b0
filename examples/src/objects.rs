//! How a `PUT /objects/{name}` body splits into what the generation latch
//! cares about, the way Kubernetes splits an object: the DESIRED spec (a
//! change advances `generation`), status (never advances it, never
//! suppressed), identity and server-owned fields (never trusted or stored),
//! and an observed generation (a control-plane write).
//!
//! Two shapes are accepted:
//!
//! - **Kubernetes-shaped**, with a top-level `spec`: only `spec` is desired
//!   state. Beside it only `apiVersion`, `kind`, `metadata`, `name`,
//!   `status`, `generation`, `observedGeneration` and `converged` may
//!   appear, so a body read from `GET /objects/{name}` can be edited and put
//!   back as it is. Any other top-level field is an error (it would
//!   otherwise be dropped silently).
//! - **Bare**: the whole object is the desired spec, except the reserved
//!   top-level fields `apiVersion`, `kind`, `metadata`, `status`,
//!   `generation` and `observedGeneration`. A bare body made only of
//!   reserved fields (say `{"status": {...}}`, a health-only update) leaves
//!   the spec as it is.
//!
//! In both, a `metadata.name` (or a `name` beside `spec`) must be the
//! path's. `generation` and `metadata.generation` are ignored: the server
//! owns the generation. `observedGeneration` (top level or in `status`) is
//! an observed write, which only the control plane may make; echoing the
//! stored value back (a GET, edited and put back) writes nothing.

use serde_json::{Map, Value};

/// Top-level fields of a bare body that are not desired spec.
const RESERVED: [&str; 6] = [
    "apiVersion",
    "kind",
    "metadata",
    "status",
    "generation",
    "observedGeneration",
];

/// Read-only top-level fields `GET /objects/{name}` returns; beside `spec`
/// they are accepted (`name` must be the path's) and not stored, so a GET
/// body can be put back.
const READ_ONLY: [&str; 2] = ["name", "converged"];

/// A `PUT /objects/{name}` body, split.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectWrite {
    /// The new desired spec; `None` leaves the spec as it is.
    pub spec: Option<Value>,
    /// The new status (without `observedGeneration`); `None` leaves it.
    pub status: Option<Value>,
    /// An observed generation the body carries.
    pub observed: Option<u64>,
}

/// The longest object name (a Kubernetes DNS subdomain name's bound).
pub const MAX_NAME_LEN: usize = 253;

/// Checks an object name from the path: a Kubernetes DNS subdomain name
/// (RFC 1123), as `metadata.name` of most kinds must be: at most 253
/// characters, lowercase letters, digits, `-` and `.`, each `.`-separated
/// label starting and ending with a letter or digit. The error is a message
/// for a 400 response that names the value (cut to 64 characters).
pub fn check_object_name(name: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    if name.len() <= MAX_NAME_LEN && name.split('.').all(label_ok) {
        return Ok(());
    }
    Err(format!(
        "object name {} ({} bytes) is not a DNS subdomain name: at most \
         {MAX_NAME_LEN} characters of a-z, 0-9, '-' and '.', each '.'-separated part \
         starting and ending with a letter or digit",
        shown(name),
        name.len()
    ))
}

/// `value` quoted for an error message, cut to its first 64 characters
/// (marked `"..."...` when cut).
pub(crate) fn shown(value: &str) -> String {
    let head: String = value.chars().take(64).collect();
    let cut = if head.len() < value.len() { "..." } else { "" };
    format!("{head:?}{cut}")
}

/// Splits a PUT body for the object `name` (from the path). The error is a
/// message for a 400 response.
pub fn parse_object_write(name: &str, body: &[u8]) -> Result<ObjectWrite, String> {
    let value: Value = crate::json::parse(body)?;
    let Value::Object(mut top) = value else {
        return Err(format!(
            "the body must be a JSON object, not {}",
            kind_of(&value)
        ));
    };
    check_name(name, &top)?;
    let mut status = top.remove("status");
    let observed = observed_generation(&top, status.as_ref())?;
    if let Some(Value::Object(s)) = status.as_mut() {
        s.remove("observedGeneration");
    }
    let spec = match top.remove("spec") {
        Some(spec @ Value::Object(_)) => {
            let known = |k: &str| RESERVED.contains(&k) || READ_ONLY.contains(&k);
            if let Some(other) = top.keys().find(|k| !known(k)) {
                return Err(format!(
                    "unknown top-level field {other:?} beside \"spec\": put desired fields \
                     inside \"spec\"; beside it only {}, {} may appear",
                    RESERVED.join(", "),
                    READ_ONLY.join(", ")
                ));
            }
            Some(spec)
        }
        Some(other) => {
            return Err(format!(
                "\"spec\" must be a JSON object, not {}",
                kind_of(&other)
            ));
        }
        None => bare_spec(top, status.is_some()),
    };
    Ok(ObjectWrite {
        spec,
        status,
        observed,
    })
}

/// A name the body gives (`metadata.name`, or `name` beside `spec`) must
/// be the path's: a body meant for another object is refused, not applied
/// here.
fn check_name(name: &str, top: &Map<String, Value>) -> Result<(), String> {
    let given = [
        (
            "metadata.name",
            top.get("metadata").and_then(|m| m.get("name")),
        ),
        ("name", top.get("name").filter(|_| top.contains_key("spec"))),
    ];
    for (field, value) in given {
        match value {
            None => {}
            Some(Value::String(v)) if v == name => {}
            Some(v) => {
                return Err(format!(
                    "{field} {v} does not match the object in the path, {name:?}"
                ));
            }
        }
    }
    Ok(())
}

/// The desired spec of a bare body: all but the reserved fields. A body of
/// reserved fields only carries no spec.
fn bare_spec(mut top: Map<String, Value>, had_status: bool) -> Option<Value> {
    let had_reserved = had_status || RESERVED.iter().any(|k| top.contains_key(*k));
    for k in RESERVED {
        top.remove(k);
    }
    if top.is_empty() && had_reserved {
        None
    } else {
        Some(Value::Object(top))
    }
}

/// `observedGeneration` at the top level or in `status`; both must agree.
fn observed_generation(
    top: &Map<String, Value>,
    status: Option<&Value>,
) -> Result<Option<u64>, String> {
    let parse = |field: &str, v: &Value| {
        v.as_u64().ok_or_else(|| {
            format!("{field} must be a non-negative integer (at most 2^64 - 1), not {v}")
        })
    };
    let top_level = top
        .get("observedGeneration")
        .map(|v| parse("observedGeneration", v))
        .transpose()?;
    let in_status = status
        .and_then(|s| s.get("observedGeneration"))
        .map(|v| parse("status.observedGeneration", v))
        .transpose()?;
    match (top_level, in_status) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "observedGeneration {a} and status.observedGeneration {b} disagree"
        )),
        (a, b) => Ok(a.or(b)),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ObjectWrite, String> {
        parse_object_write("a", v.to_string().as_bytes())
    }

    #[test]
    fn object_names_are_dns_subdomain_names() {
        let longest = format!("{}.{}", "a".repeat(63), "b".repeat(MAX_NAME_LEN - 64));
        for good in [
            "a",
            "web",
            "gw-2",
            "db.prod",
            "0",
            "a-b.c-d.e",
            longest.as_str(),
        ] {
            assert_eq!(check_object_name(good), Ok(()), "{good}");
        }
        let too_long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "",
            "Web",
            "a_b",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            "a b",
            "a/b",
            "é",
            "\u{fffd}",
            too_long.as_str(),
        ] {
            let err = check_object_name(bad).unwrap_err();
            let shown: String = bad.chars().take(64).collect();
            assert!(err.contains(&format!("{shown:?}")), "{bad:?}: {err}");
        }
        assert!(
            check_object_name(&too_long)
                .unwrap_err()
                .contains("254 bytes")
        );
    }

    #[test]
    fn a_bare_body_is_the_spec_without_reserved_fields() {
        let w = parse(json!({
            "replicas": 2, "generation": 9, "metadata": {"generation": 9},
            "apiVersion": "v1", "kind": "Thing", "status": {"health": "ok"},
        }))
        .unwrap();
        assert_eq!(w.spec, Some(json!({"replicas": 2})));
        assert_eq!(w.status, Some(json!({"health": "ok"})));
        assert_eq!(w.observed, None);
        // `name` and `converged` are ordinary spec fields in a bare body.
        let w = parse(json!({"name": "x", "converged": true})).unwrap();
        assert_eq!(w.spec, Some(json!({"name": "x", "converged": true})));
    }

    #[test]
    fn a_body_of_reserved_fields_only_leaves_the_spec() {
        for body in [
            json!({"status": {"health": "degraded"}}),
            json!({"generation": 4}),
            json!({"metadata": {"name": "a"}, "status": {}}),
        ] {
            assert_eq!(parse(body.clone()).unwrap().spec, None, "{body}");
        }
        // An empty object is an empty spec, not "no spec".
        assert_eq!(parse(json!({})).unwrap().spec, Some(json!({})));
    }

    #[test]
    fn a_kubernetes_shaped_body_takes_only_spec_as_desired() {
        let w = parse(json!({
            "apiVersion": "example/v1", "kind": "Thing",
            "metadata": {"name": "a", "generation": 7},
            "spec": {"replicas": 3}, "status": {"phase": "Running"},
        }))
        .unwrap();
        assert_eq!(w.spec, Some(json!({"replicas": 3})));
        assert_eq!(w.status, Some(json!({"phase": "Running"})));
    }

    #[test]
    fn a_get_response_can_be_put_back() {
        let w = parse(json!({
            "name": "a", "spec": {"replicas": 3}, "status": {},
            "generation": 2, "observedGeneration": 1, "converged": false,
        }))
        .unwrap();
        assert_eq!(w.spec, Some(json!({"replicas": 3})));
        assert_eq!(w.observed, Some(1));
    }

    #[test]
    fn observed_generation_is_read_at_the_top_or_in_status() {
        let w =
            parse(json!({"spec": {}, "status": {"observedGeneration": 3, "ok": true}})).unwrap();
        assert_eq!(w.observed, Some(3));
        assert_eq!(w.status, Some(json!({"ok": true})), "not kept in status");
        let w =
            parse(json!({"observedGeneration": 3, "status": {"observedGeneration": 3}})).unwrap();
        assert_eq!(w.observed, Some(3));
    }

    #[test]
    fn bad_bodies_are_errors_naming_the_bad_value() {
        for (body, needle) in [
            ("not json".to_owned(), "must be JSON"),
            (json!([1]).to_string(), "not an array"),
            (json!(3).to_string(), "not a number"),
            (
                json!({"spec": 1}).to_string(),
                "\"spec\" must be a JSON object, not a number",
            ),
            (
                json!({"spec": {}, "replicas": 2}).to_string(),
                "\"replicas\"",
            ),
            (json!({"observedGeneration": -1}).to_string(), "not -1"),
            (json!({"observedGeneration": 1.5}).to_string(), "not 1.5"),
            (
                json!({"status": {"observedGeneration": "2"}}).to_string(),
                "not \"2\"",
            ),
            (
                json!({"observedGeneration": 1, "status": {"observedGeneration": 2}}).to_string(),
                "disagree",
            ),
            (
                "{\"observedGeneration\": 18446744073709551616}".to_owned(),
                "at most 2^64 - 1",
            ),
            (
                json!({"metadata": {"name": "b"}, "x": 1}).to_string(),
                "metadata.name \"b\" does not match the object in the path, \"a\"",
            ),
            (
                json!({"name": "b", "spec": {}}).to_string(),
                "name \"b\" does not match",
            ),
            (
                json!({"metadata": {"name": 7}}).to_string(),
                "metadata.name 7",
            ),
        ] {
            let err = parse_object_write("a", body.as_bytes()).unwrap_err();
            assert!(err.contains(needle), "{body}: {err}");
        }
    }
}
