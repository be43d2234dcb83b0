//! Names: namespaces, object names, key names and value checks.

use std::collections::BTreeSet;

use super::options::{LoadOptions, bad};
use crate::error::InputError;
use crate::model::ConfigKind;
use crate::parse::{NOT_A_STRING, Node, VALUE_BYTES, VALUE_DIGESTS};

pub(crate) fn meta_names(
    doc: &Node,
    at: &str,
    options: &LoadOptions,
) -> Result<(String, String), InputError> {
    let meta = doc
        .get("metadata")
        .ok_or_else(|| bad(at, "missing metadata"))?;
    let name = meta
        .name_at("name")
        .ok_or_else(|| bad(at, "missing or empty metadata.name"))?;
    Ok((meta_namespace(meta, name, at, options)?, name.to_owned()))
}

/// The metadata and its `generateName`, where that stands in for a
/// missing (or empty) `metadata.name`: the API server makes the object's
/// name from it when it creates the object (`kubectl create`, an Argo CD
/// hook, an Argo Workflow), so it is a new object every time.
pub(super) fn generate_name(doc: &Node) -> Option<(&Node, &str)> {
    let meta = doc.get("metadata")?;
    match meta.get("name") {
        None | Some(Node::Null) => {}
        Some(Node::String(name)) if name.is_empty() => {}
        Some(_) => return None,
    }
    Some((meta, meta.name_at("generateName")?))
}

/// A workload's namespace and name, as [`meta_names`], except that one
/// with only a `metadata.generateName` is named by that prefix and where
/// it was read (`migrate-<generated: jobs.yaml document 2>`): no other
/// object, current or proposed, has that name, as none will have the one
/// the API server makes for it.
pub(super) fn workload_names(
    doc: &Node,
    at: &str,
    options: &LoadOptions,
) -> Result<(String, String), InputError> {
    match generate_name(doc) {
        Some((meta, prefix)) => Ok((
            meta_namespace(meta, prefix, at, options)?,
            format!("{prefix}<generated: {at}>"),
        )),
        None => meta_names(doc, at, options),
    }
}

/// The namespace in `meta` (of the object `name`), or the one given for
/// manifests without one (or with `""`: [`namespace_left_out`]).
pub(super) fn meta_namespace(
    meta: &Node,
    name: &str,
    at: &str,
    options: &LoadOptions,
) -> Result<String, InputError> {
    let stated = meta.get("namespace");
    let namespace = match stated {
        _ if namespace_left_out(stated) => {
            let ns = &options.default_namespace;
            if !is_namespace_name(ns) {
                return Err(bad(
                    at,
                    format!(
                        "{name} has no metadata.namespace, and the namespace given for such \
                         manifests (--namespace, LoadOptions::default_namespace), {ns:?}, \
                         {NOT_A_NAMESPACE}"
                    ),
                ));
            }
            ns.clone()
        }
        Some(Node::String(ns)) => {
            if !is_namespace_name(ns) {
                return Err(bad(
                    at,
                    format!(
                        "{name}: metadata.namespace {ns:?} {NOT_A_NAMESPACE}: the API server \
                         refuses the object"
                    ),
                ));
            }
            ns.clone()
        }
        _ => {
            return Err(bad(
                at,
                format!("{name}: metadata.namespace is not a string"),
            ));
        }
    };
    Ok(namespace)
}

/// Whether a `metadata.namespace` is left out: absent, null or `""`.
/// kubectl and Helm place such an object in the namespace they are given
/// (`-n`, the release's), and the API server in the one of the request.
pub(crate) fn namespace_left_out(ns: Option<&Node>) -> bool {
    match ns {
        None | Some(Node::Null) => true,
        Some(Node::String(ns)) => ns.is_empty(),
        Some(_) => false,
    }
}

/// What a namespace must be, for messages.
pub(crate) const NOT_A_NAMESPACE: &str = "is no namespace name (at most 63 characters of a-z, \
     0-9 and '-', starting and ending with a letter or digit)";

/// A namespace's name as the API server takes it: an RFC 1123 label.
pub(crate) fn is_namespace_name(ns: &str) -> bool {
    ns.len() <= 63 && is_dns_label(ns)
}

/// `a-z`, `0-9` and `-`, not empty, starting and ending with a letter or
/// digit (no length bound).
pub(super) fn is_dns_label(label: &str) -> bool {
    let b = label.as_bytes();
    matches!((b.first(), b.last()), (Some(f), Some(l)) if f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A ConfigMap's or a Secret's name as the API server takes it: an RFC
/// 1123 subdomain, at most 253 characters of `.`-separated labels.
pub(crate) fn object_name_ok(kind: ConfigKind, name: &str, at: &str) -> Result<(), InputError> {
    if name.len() <= 253 && name.split('.').all(is_dns_label) {
        return Ok(());
    }
    Err(bad(
        at,
        format!(
            "{kind} name {name:?} is no name the API server takes (at most 253 characters of \
             a-z, 0-9, '-' and '.', each '.'-separated part starting and ending with a letter \
             or digit): it refuses the object"
        ),
    ))
}

/// The key names of `doc`'s `field`. With `base64` (a Secret's `data`, a
/// ConfigMap's `binaryData`), a value that is not base64 is unusable input
/// as well: the API server refuses the object.
pub(super) fn key_names(
    doc: &Node,
    field: &str,
    at: &str,
    base64: Option<&str>,
) -> Result<BTreeSet<String>, InputError> {
    match doc.get(field) {
        None | Some(Node::Null) => Ok(BTreeSet::new()),
        Some(Node::Seq(keys)) => {
            let names = keys
                .iter()
                .filter(|k| k.get(VALUE_BYTES).is_none() && k.get(VALUE_DIGESTS).is_none())
                .map(|k| match k {
                    Node::String(s) => valid_key(s, field, at).map(|()| s.clone()),
                    Node::Map(_) => match k.get(NOT_A_STRING) {
                        Some(Node::Seq(pair)) => match pair.as_slice() {
                            [Node::String(key), Node::String(kind)] => {
                                Err(bad(at, not_a_string(field, key, kind)))
                            }
                            _ => Err(bad(at, format!("{field} holds a value that is no string"))),
                        },
                        _ => Err(bad(at, format!("{field} has a key that is no string"))),
                    },
                    _ => Err(bad(at, format!("{field} has a key that is no string"))),
                })
                .collect::<Result<BTreeSet<String>, InputError>>()?;
            if let (Some(object), Some((_, _, Some(key)))) = (base64, value_lengths(doc, field)) {
                return Err(bad(at, not_base64(field, key, object)));
            }
            Ok(names)
        }
        Some(_) => Err(bad(at, format!("{field} is not a map"))),
    }
}

/// Whether `key` is one a ConfigMap or Secret can hold ([`valid_key`]).
pub(crate) fn is_key(key: &str) -> bool {
    let chars_ok = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    chars_ok && (1..=253).contains(&key.len()) && key != "." && !key.starts_with("..")
}

/// A ConfigMap's or a Secret's key as the API server takes it: 1 to
/// 253 characters of `a-z`, `A-Z`, `0-9`, `-`, `_` and `.`, not `.` and
/// not starting with `..`. It refuses the whole object for another (a
/// path such as `conf/app.yaml`, from a chart that keys files by their
/// paths), which then keeps the keys it had.
pub(super) fn valid_key(key: &str, field: &str, at: &str) -> Result<(), InputError> {
    if is_key(key) {
        return Ok(());
    }
    Err(bad(
        at,
        format!(
            "{field} key {key:?} is no key the API server takes (1 to 253 characters of \
             a-z, A-Z, 0-9, '-', '_' and '.', not '.' nor starting with '..'): it refuses the \
             object, which keeps the keys it had"
        ),
    ))
}

/// Why a `data`-like value that is no string is unusable input (its value
/// is never named, only what it is).
pub(super) fn not_a_string(field: &str, key: &str, kind: &str) -> String {
    if kind == "null" {
        format!(
            "{field}.{key} has no value (null): `kubectl apply` and `helm upgrade` delete such a \
             key from the object they update; give it a string, \
             \"\" for an empty one (a Helm value that rendered to nothing does this)"
        )
    } else {
        format!(
            "{field}.{key} is {kind}, not a string: the API server refuses the object, so it \
             keeps what it had; quote the value"
        )
    }
}

/// The most the values of one ConfigMap or Secret may total, in bytes
/// (decoded, for base64): the API server refuses a larger object.
pub(super) const MAX_VALUE_BYTES: u64 = 1 << 20;

/// `(text, decoded, not base64)` of `doc`'s `field` (see
/// [`VALUE_BYTES`]): its string values' bytes as text, what those that are
/// base64 decode to, and the first key whose value is not base64. `None`
/// when it has no non-empty string value.
pub(super) fn value_lengths<'a>(doc: &'a Node, field: &str) -> Option<(u64, u64, Option<&'a str>)> {
    let Some(Node::Seq(items)) = doc.get(field) else {
        return None;
    };
    let number = |n: Option<&Node>| match n {
        Some(Node::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    items.iter().find_map(|k| match k.get(VALUE_BYTES) {
        Some(Node::Seq(marker)) => Some((
            number(marker.first()),
            number(marker.get(1)),
            marker.get(2).and_then(Node::as_str),
        )),
        _ => None,
    })
}

/// Why a value that is not base64 where the API server decodes base64 is
/// unusable input (the value is never named).
pub(super) fn not_base64(field: &str, key: &str, object: &str) -> String {
    let plain = if object == "Secret" {
        " (plain text belongs in stringData)"
    } else {
        ""
    };
    format!(
        "{field}.{key} is not base64{plain}: the API server refuses the {object}, which keeps \
         the keys it had"
    )
}
