//! The names-only document tree: [`Node`], read with duplicate keys
//! refused and every value field redacted by the deserializer itself.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::data::{DataField, KeptAnnotations, NOT_A_STRING, VALUE_BYTES, VALUE_DIGESTS};
use super::{DATA_LIST, VALUE_FIELDS};

/// A document tree without values of `data`-like fields, with duplicate keys
/// refused at every level.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` of a map (replacing its value if present); other nodes
    /// are left as they are.
    pub(crate) fn set(&mut self, key: &str, value: Node) {
        if let Node::Map(entries) = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => entries.push((key.to_owned(), value)),
            }
        }
    }

    /// Moves the node at `path` out (leaving `Null`), without copying it.
    pub(crate) fn take_path(&mut self, path: &[&str]) -> Option<Node> {
        let mut node = self;
        for key in path {
            let Node::Map(entries) = node else {
                return None;
            };
            node = entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)?;
        }
        Some(std::mem::replace(node, Node::Null))
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    /// The name at `key` of a map: a string that is not empty (else none).
    pub(crate) fn name_at(&self, key: &str) -> Option<&str> {
        self.get(key)
            .and_then(Node::as_str)
            .filter(|n| !n.is_empty())
    }

    pub(crate) fn into_json(self) -> serde_json::Value {
        match self {
            Node::Null => serde_json::Value::Null,
            Node::Bool(b) => serde_json::Value::Bool(b),
            Node::Number(n) => serde_json::Value::Number(n),
            Node::String(s) => serde_json::Value::String(s),
            Node::Seq(v) => serde_json::Value::Array(v.into_iter().map(Node::into_json).collect()),
            Node::Map(m) => {
                serde_json::Value::Object(m.into_iter().map(|(k, v)| (k, v.into_json())).collect())
            }
        }
    }

    /// Whether a `containers` list appears anywhere (a pod template).
    pub(crate) fn has_pod_template(&self) -> bool {
        match self {
            Node::Map(entries) => entries.iter().any(|(k, v)| {
                (k == "containers" && matches!(v, Node::Seq(_))) || v.has_pod_template()
            }),
            Node::Seq(items) => items.iter().any(Node::has_pod_template),
            _ => false,
        }
    }
}

#[derive(Clone, Copy)]
struct NodeVisitor {
    /// Keep `data`-like values (only for the drift check's ConfigMaps).
    keep_values: bool,
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML/JSON value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        serde_json::Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom("a non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(NodeSeed(self.keep_values))? {
            out.push(v);
        }
        Ok(Node::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut out: Vec<(String, Node)> = Vec::new();
        while let Some(Key(key, read_as)) = map.next_key()? {
            if out.iter().any(|(k, _)| *k == key) {
                return Err(duplicate(&key, read_as));
            }
            let value = if !self.keep_values && key == "annotations" {
                Node::Map(map.next_value::<KeptAnnotations>()?.0)
            } else if !self.keep_values && VALUE_FIELDS.contains(&key.as_str()) {
                // Nested data fields (a List item, a template) drop values too.
                match map.next_value::<DataField>()? {
                    DataField::Names(names, not_strings, lengths, digests) => Node::Seq(
                        names
                            .into_iter()
                            .map(Node::String)
                            .chain(not_strings.into_iter().map(|(key, kind)| {
                                Node::Map(vec![(
                                    NOT_A_STRING.to_owned(),
                                    Node::Seq(vec![Node::String(key), Node::String(kind.into())]),
                                )])
                            }))
                            .chain((!digests.is_empty()).then(|| {
                                Node::Map(vec![(
                                    VALUE_DIGESTS.to_owned(),
                                    Node::Map(
                                        digests
                                            .into_iter()
                                            .map(|(k, d)| (k, Node::Number(d.into())))
                                            .collect(),
                                    ),
                                )])
                            }))
                            .chain((lengths.text > 0).then(|| {
                                Node::Map(vec![(
                                    VALUE_BYTES.to_owned(),
                                    Node::Seq(vec![
                                        Node::Number(lengths.text.into()),
                                        Node::Number(lengths.decoded.into()),
                                        lengths.not_base64.map_or(Node::Null, Node::String),
                                    ]),
                                )])
                            }))
                            .collect(),
                    ),
                    // Not a map of keys: a map that says so (a ConfigMap's
                    // reader refuses it as "not a map"), the key names
                    // its items give kept for an ExternalSecret's or a
                    // SecretProviderClass's.
                    DataField::List(items) => Node::Map(vec![(
                        DATA_LIST.to_owned(),
                        Node::Seq(
                            items
                                .into_iter()
                                .map(|item| {
                                    item.0.map_or(Node::Null, |names| {
                                        Node::Map(
                                            names
                                                .into_iter()
                                                .map(|(k, v)| (k.to_owned(), Node::String(v)))
                                                .collect(),
                                        )
                                    })
                                })
                                .collect(),
                        ),
                    )]),
                    DataField::Other => Node::Map(Vec::new()),
                }
            } else {
                map.next_value_seed(NodeSeed(self.keep_values))?
            };
            out.push((key, value));
        }
        Ok(Node::Map(out))
    }
}

pub(super) struct NodeSeed(pub(super) bool);

impl<'de> DeserializeSeed<'de> for NodeSeed {
    type Value = Node;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor {
            keep_values: self.0,
        })
    }
}

/// A whole document, with values of `data`-like fields dropped.
pub(super) struct Redacted(pub(super) Node);

impl<'de> Deserialize<'de> for Redacted {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeSeed(false).deserialize(d).map(Redacted)
    }
}

/// A whole document with every value kept.
pub(super) struct Full(pub(super) Node);

impl<'de> Deserialize<'de> for Full {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeSeed(true).deserialize(d).map(Full)
    }
}

pub(super) trait Wrapped: for<'de> Deserialize<'de> {
    fn node(self) -> Node;
}

impl Wrapped for Redacted {
    fn node(self) -> Node {
        self.0
    }
}

impl Wrapped for Full {
    fn node(self) -> Node {
        self.0
    }
}

/// A map key, as kubectl reads it: YAML reads an unquoted `yes`, `on`,
/// `true` or `5` key as a boolean or a number, and kubectl (sigs.k8s.io/yaml)
/// turns it into the key the object then holds: `true`, `false`, the
/// number's decimal digits, or a float as Go prints it (`%g`, of its
/// 32-bit rounding). So `data: {on: x}` makes the key `true`, and a
/// workload reading key `on` finds none. A null key is refused, as kubectl
/// refuses it. (JSON keys are always strings.)
pub(super) struct Key(pub(super) String, pub(super) Option<&'static str>);

/// The error for a key met twice in one map (`read_as`: what YAML read the
/// second one as, if not a string).
pub(super) fn duplicate<E: de::Error>(key: &str, read_as: Option<&str>) -> E {
    match read_as {
        None => E::custom(format!("duplicate key `{key}`")),
        Some(what) => E::custom(format!(
            "duplicate key `{key}` (YAML reads this unquoted key as {what}, as kubectl does; \
             quote it to keep it as written)"
        )),
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned(), None))
            }
            fn visit_string<E>(self, v: String) -> Result<Key, E> {
                Ok(Key(v, None))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string(), Some("a boolean")))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string(), Some("a number")))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string(), Some("a number")))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(go_float_key(v), Some("a number")))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
                Err(E::custom("a map key that is null"))
            }
            fn visit_none<E: de::Error>(self) -> Result<Key, E> {
                Err(E::custom("a map key that is null"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A float map key as sigs.k8s.io/yaml writes it: Go's
/// `strconv.FormatFloat(v, 'g', -1, 32)`, with `.inf`, `-.inf` and `.nan`.
pub(super) fn go_float_key(v: f64) -> String {
    if v.is_nan() {
        return ".nan".into();
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "Go rounds the key to 32 bits, and so must this"
    )]
    let v = v as f32;
    if v.is_infinite() {
        // Infinite, or beyond f32's range: Go prints +Inf or -Inf.
        return if v > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    // Rust's `{:e}` gives the shortest digits that read back as the same
    // f32, as Go's -1 precision does: `d.ddde<exp>`.
    let e = format!("{:e}", v.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v.is_sign_negative() { "-" } else { "" };
    // Go's %g with shortest digits: %e when exp < -4 or exp >= 6.
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{point}{rest}e{esign}{:02}",
            exp.unsigned_abs()
        );
    }
    // %f with as many decimals as the digits need.
    let dp = exp + 1; // digits before the point
    let text = if dp <= 0 {
        format!("0.{}{digits}", "0".repeat(dp.unsigned_abs() as usize))
    } else {
        let dp = dp as usize;
        if digits.len() <= dp {
            format!("{digits}{}", "0".repeat(dp - digits.len()))
        } else {
            format!("{}.{}", &digits[..dp], &digits[dp..])
        }
    };
    format!("{sign}{text}")
}
