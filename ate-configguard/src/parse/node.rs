//! The names-only document tree: [`Node`], read with duplicate keys
//! refused and every value field (`data`, `stringData`, `binaryData`,
//! kept annotations) read by the deserializer itself as key names and
//! value shapes, never values. (One file: the tree and the value fields
//! deserialize each other.)

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

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

/// A `data`-like field with its values skipped unread: the key names of a
/// map; for a list (an ExternalSecret's `spec.data`, a SecretProviderClass's
/// `secretObjects[].data`, a custom resource's own), the key names each
/// item gives ([`ListItem`]); anything else, nothing.
#[derive(Debug)]
pub(super) enum DataField {
    /// The key names, and those whose value is no string, with what it
    /// is instead ([`ValueKind`]).
    Names(
        BTreeSet<String>,
        Vec<(String, &'static str)>,
        Lengths,
        Vec<(String, u64)>,
    ),
    List(Vec<ListItem>),
    Other,
}

/// What is left of a `data`-like map's string values: lengths, and the
/// first key whose value is not base64 (which matters for a Secret's `data`
/// and a ConfigMap's `binaryData`, not known while parsing).
#[derive(Debug, Default)]
pub(super) struct Lengths {
    /// Their bytes as text.
    pub(super) text: u64,
    /// The bytes those that are base64 decode to.
    pub(super) decoded: u64,
    pub(super) not_base64: Option<String>,
}

/// What a `data`-like map holds for a key, its value skipped unread: a
/// string, or what it is instead (`null`, `a number`, ...). A ConfigMap's
/// or a Secret's must be a string: the API server refuses a number or a
/// boolean, and `kubectl apply` and `helm upgrade` delete a key whose value
/// is null from the object they update.
///
/// Of a string it keeps its length and, if it is base64, the length it
/// decodes to: the API server refuses an object whose values total more
/// than 1 MiB. Lengths, never the value.
///
/// And a keyed digest of a string ([`value_digest`]): kept only for an
/// immutable object, to tell whether its values change.
struct ValueKind(Option<&'static str>, u64, Option<u64>, Option<u64>);

/// A digest of a value, keyed with a key drawn at random once per run:
/// equal values give equal digests within the run, and nothing derived
/// from a value means anything outside the process (the digests are never
/// printed or written, and another run's key is another). SipHash-1-3
/// keyed with 128 random bits (`std`'s `RandomState`).
pub(crate) fn value_digest(value: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    KEY.get_or_init(std::hash::RandomState::new).hash_one(value)
}

impl<'de> Deserialize<'de> for ValueKind {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ValueKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value")
            }
            fn visit_unit<E>(self) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("null"), 0, None, None))
            }
            fn visit_none<E>(self) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("null"), 0, None, None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a boolean"), 0, None, None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a number"), 0, None, None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a number"), 0, None, None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a number"), 0, None, None))
            }
            fn visit_str<E>(self, v: &str) -> Result<ValueKind, E> {
                // Looked at, not kept: whether it is base64 is all that
                // is left of it.
                Ok(ValueKind(
                    None,
                    v.len() as u64,
                    std_base64_len(v),
                    Some(value_digest(v.as_bytes())),
                ))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ValueKind, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ValueKind(Some("a list"), 0, None, None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ValueKind, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ValueKind(Some("a map"), 0, None, None))
            }
        }
        d.deserialize_any(V)
    }
}

/// How many bytes `v` decodes to if the API server decodes it as base64
/// (Go's `StdEncoding`, as `encoding/json` reads a `[]byte`): the standard
/// alphabet in whole groups of four, the last one padded with `=` or `==`;
/// line breaks (`\r`, `\n`) are skipped anywhere. `None` if it does not.
pub(crate) fn std_base64_len(v: &str) -> Option<u64> {
    let (mut len, mut pad) = (0u64, 0u64);
    for b in v.bytes() {
        match b {
            b'\r' | b'\n' => continue,
            b'=' => pad += 1,
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' if pad == 0 => {}
            _ => return None,
        }
        len += 1;
    }
    (len % 4 == 0 && pad <= 2).then(|| len / 4 * 3 - pad)
}

/// The key of the map that stands, in a [`DataField::Names`] read as a
/// [`Node`], for its [`Lengths`]: `{(value bytes): [TEXT, DECODED, KEY]}`,
/// TEXT its string values' bytes as text, DECODED the bytes those that are
/// base64 decode to, KEY the first key whose value is not base64 (or
/// null). Present when some value is a non-empty string.
pub(crate) const VALUE_BYTES: &str = "(value bytes)";

/// The key of the map that stands, in a [`DataField::Names`] read as a
/// [`Node`], for a key whose value is no string: `{(not a string): [KEY,
/// WHAT]}`.
pub(crate) const NOT_A_STRING: &str = "(not a string)";

/// The key of the map that stands, in a [`DataField::Names`] read as a
/// [`Node`], for its values' keyed digests ([`value_digest`]): `{(value
/// digests): {KEY: DIGEST, ...}}`. The loader keeps them for immutable
/// objects alone.
pub(crate) const VALUE_DIGESTS: &str = "(value digests)";

impl<'de> Deserialize<'de> for DataField {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DataField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of key names")
            }
            fn visit_unit<E>(self) -> Result<DataField, E> {
                Ok(DataField::Names(
                    BTreeSet::new(),
                    Vec::new(),
                    Lengths::default(),
                    Vec::new(),
                ))
            }
            fn visit_none<E>(self) -> Result<DataField, E> {
                Ok(DataField::Names(
                    BTreeSet::new(),
                    Vec::new(),
                    Lengths::default(),
                    Vec::new(),
                ))
            }
            scalars_answer!(DataField, DataField::Other);
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DataField, A::Error> {
                let mut keys = BTreeSet::new();
                let mut not_strings = Vec::new();
                let mut lengths = Lengths::default();
                let mut digests = Vec::new();
                while let Some(Key(key, read_as)) = map.next_key()? {
                    let ValueKind(kind, len, decodes_to, digest) = map.next_value()?;
                    if let Some(d) = digest {
                        digests.push((key.clone(), d));
                    }
                    if !keys.insert(key.clone()) {
                        return Err(duplicate(&key, read_as));
                    }
                    lengths.text = lengths.text.saturating_add(len);
                    match (kind, decodes_to) {
                        (Some(kind), _) => not_strings.push((key, kind)),
                        (None, Some(n)) => lengths.decoded = lengths.decoded.saturating_add(n),
                        (None, None) => {
                            lengths.not_base64.get_or_insert(key);
                        }
                    }
                }
                Ok(DataField::Names(keys, not_strings, lengths, digests))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DataField, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<ListItem>()? {
                    items.push(item);
                }
                Ok(DataField::List(items))
            }
        }
        d.deserialize_any(V)
    }
}

/// The fields of a `data` list item that name a key of the Secret made from
/// it, never a value: an ExternalSecret's `secretKey`, a
/// SecretProviderClass's `key`.
const LIST_ITEM_NAMES: [&str; 2] = ["secretKey", "key"];

/// A `data` list item's key names ([`LIST_ITEM_NAMES`], those that are
/// strings), if it is a map; `None` for anything else. Every other field
/// is skipped unread.
#[derive(Debug)]
pub(super) struct ListItem(pub(super) Option<Vec<(&'static str, String)>>);

impl<'de> Deserialize<'de> for ListItem {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ListItem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list item")
            }
            fn visit_unit<E>(self) -> Result<ListItem, E> {
                Ok(ListItem(None))
            }
            fn visit_none<E>(self) -> Result<ListItem, E> {
                Ok(ListItem(None))
            }
            scalars_answer!(ListItem, ListItem(None));
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ListItem, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ListItem(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListItem, A::Error> {
                let mut found = Vec::new();
                while let Some(Key(key, read_as)) = map.next_key()? {
                    match LIST_ITEM_NAMES.iter().find(|n| **n == key) {
                        Some(name) => {
                            if found.iter().any(|(n, _)| n == name) {
                                return Err(duplicate(&key, read_as));
                            }
                            // A name, not a value; anything but a string is none.
                            if let Node::String(s) = map.next_value_seed(NodeSeed(false))? {
                                found.push((*name, s));
                            }
                        }
                        None => {
                            let _: IgnoredAny = map.next_value()?;
                        }
                    }
                }
                Ok(ListItem(Some(found)))
            }
        }
        d.deserialize_any(V)
    }
}

/// The annotations whose values are read (Helm's and Argo CD's hooks:
/// when they are created, in what order, whether they are deleted again;
/// Argo CD's sync waves and sync options, Helm's resource policy: whether a
/// prune leaves the object), and what the rollout gate reads (its own
/// `ate.dev/` settings, and how a load balancer drains and health-checks a
/// backend): names of tools' settings and numbers, never configuration.
/// Every other annotation's value is dropped unread.
pub(crate) const KEPT_ANNOTATIONS: [&str; 18] = [
    "helm.sh/hook",
    "helm.sh/hook-weight",
    "helm.sh/hook-delete-policy",
    "helm.sh/resource-policy",
    "argocd.argoproj.io/hook",
    "argocd.argoproj.io/sync-wave",
    "argocd.argoproj.io/hook-delete-policy",
    "argocd.argoproj.io/sync-options",
    // What the rollout gate reads: its own settings, and how load
    // balancers drain and check a backend (numbers and names).
    "ate.dev/single-writer",
    "ate.dev/rollout-allow",
    "ate.dev/drain-timeout-seconds",
    "ate.dev/prestop-seconds",
    "cloud.google.com/backend-config",
    "beta.cloud.google.com/backend-config",
    "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout",
    "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes",
    "alb.ingress.kubernetes.io/target-group-attributes",
    "alb.ingress.kubernetes.io/healthcheck-path",
];

/// An `annotations` map: every name, and the values of the
/// [`KEPT_ANNOTATIONS`] alone (any other is null).
pub(super) struct KeptAnnotations(pub(super) Vec<(String, Node)>);

impl<'de> Deserialize<'de> for KeptAnnotations {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeptAnnotations;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_unit<E>(self) -> Result<KeptAnnotations, E> {
                Ok(KeptAnnotations(Vec::new()))
            }
            fn visit_none<E>(self) -> Result<KeptAnnotations, E> {
                Ok(KeptAnnotations(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeptAnnotations, A::Error> {
                let mut seen = BTreeSet::new();
                let mut kept = Vec::new();
                while let Some(Key(key, read_as)) = map.next_key()? {
                    let value = if KEPT_ANNOTATIONS.contains(&key.as_str()) {
                        map.next_value_seed(NodeSeed(false))?
                    } else {
                        let _: IgnoredAny = map.next_value()?;
                        Node::Null
                    };
                    kept.push((key.clone(), value));
                    if !seen.insert(key.clone()) {
                        return Err(duplicate(&key, read_as));
                    }
                }
                Ok(KeptAnnotations(kept))
            }
        }
        d.deserialize_any(V)
    }
}
