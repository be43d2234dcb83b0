//! Reading manifests: multi-document YAML or JSON, into a names-only form.
//!
//! Values never survive parsing: the `data`, `stringData`, `binaryData` and
//! `annotations` fields of every document are read as key names with an
//! ignored value, so a Secret's values (and the copy of them `kubectl apply`
//! leaves in an annotation) are dropped by the deserializer itself.
//! Everything else is read into a [`Node`] tree that refuses duplicate
//! keys, and workloads
//! are then decoded into k8s-openapi types with every ignored field
//! reported (k8s-openapi silently drops fields it does not know).

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::InputError;

/// Fields whose values are configuration values (never kept). The names of
/// `annotations` are kept but not their values: `kubectl apply` copies a
/// whole object, a Secret's values included, into its
/// `kubectl.kubernetes.io/last-applied-configuration` annotation, and no
/// check here reads an annotation's value.
/// A SealedSecret's `encryptedData` holds ciphertexts: dropped as well.
pub(crate) const VALUE_FIELDS: [&str; 5] = [
    "data",
    "stringData",
    "binaryData",
    "encryptedData",
    "annotations",
];

/// The one key of the map that stands for a `data`-like field holding a
/// list (an ExternalSecret's or a SecretProviderClass's `data`): for each
/// item, a map of the key names it gives (`secretKey`, `key`), or null for
/// an item that is no map.
pub(crate) const DATA_LIST: &str = "(list)";

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
                    DataField::Names(names, not_strings, lengths) => Node::Seq(
                        names
                            .into_iter()
                            .map(Node::String)
                            .chain(not_strings.into_iter().map(|(key, kind)| {
                                Node::Map(vec![(
                                    NOT_A_STRING.to_owned(),
                                    Node::Seq(vec![Node::String(key), Node::String(kind.into())]),
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

struct NodeSeed(bool);

impl<'de> DeserializeSeed<'de> for NodeSeed {
    type Value = Node;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor {
            keep_values: self.0,
        })
    }
}

/// A whole document, with values of `data`-like fields dropped.
struct Redacted(Node);

impl<'de> Deserialize<'de> for Redacted {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeSeed(false).deserialize(d).map(Redacted)
    }
}

/// A whole document with every value kept.
struct Full(Node);

impl<'de> Deserialize<'de> for Full {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NodeSeed(true).deserialize(d).map(Full)
    }
}

trait Wrapped: for<'de> Deserialize<'de> {
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
struct Key(String, Option<&'static str>);

/// The error for a key met twice in one map (`read_as`: what YAML read the
/// second one as, if not a string).
fn duplicate<E: de::Error>(key: &str, read_as: Option<&str>) -> E {
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
fn go_float_key(v: f64) -> String {
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

/// The `visit_*` methods of a [`Visitor`] for every scalar (a bool, a
/// number, a string), each skipping the value and answering `$answer`.
macro_rules! scalars_answer {
    ($value:ty, $answer:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_str<E>(self, _: &str) -> Result<$value, E> {
            Ok($answer)
        }
    };
}

/// A `data`-like field with its values skipped unread: the key names of a
/// map; for a list (an ExternalSecret's `spec.data`, a SecretProviderClass's
/// `secretObjects[].data`, a custom resource's own), the key names each
/// item gives ([`ListItem`]); anything else, nothing.
#[derive(Debug)]
enum DataField {
    /// The key names, and those whose value is no string, with what it
    /// is instead ([`ValueKind`]).
    Names(BTreeSet<String>, Vec<(String, &'static str)>, Lengths),
    List(Vec<ListItem>),
    Other,
}

/// What is left of a `data`-like map's string values: lengths, and the
/// first key whose value is not base64 (which matters for a Secret's `data`
/// and a ConfigMap's `binaryData`, not known while parsing).
#[derive(Debug, Default)]
struct Lengths {
    /// Their bytes as text.
    text: u64,
    /// The bytes those that are base64 decode to.
    decoded: u64,
    not_base64: Option<String>,
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
struct ValueKind(Option<&'static str>, u64, Option<u64>);

impl<'de> Deserialize<'de> for ValueKind {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ValueKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value")
            }
            fn visit_unit<E>(self) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("null"), 0, None))
            }
            fn visit_none<E>(self) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("null"), 0, None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a boolean"), 0, None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a number"), 0, None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a number"), 0, None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<ValueKind, E> {
                Ok(ValueKind(Some("a number"), 0, None))
            }
            fn visit_str<E>(self, v: &str) -> Result<ValueKind, E> {
                // Looked at, not kept: whether it is base64 is all that
                // is left of it.
                Ok(ValueKind(None, v.len() as u64, std_base64_len(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ValueKind, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ValueKind(Some("a list"), 0, None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ValueKind, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ValueKind(Some("a map"), 0, None))
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
                ))
            }
            fn visit_none<E>(self) -> Result<DataField, E> {
                Ok(DataField::Names(
                    BTreeSet::new(),
                    Vec::new(),
                    Lengths::default(),
                ))
            }
            scalars_answer!(DataField, DataField::Other);
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DataField, A::Error> {
                let mut keys = BTreeSet::new();
                let mut not_strings = Vec::new();
                let mut lengths = Lengths::default();
                while let Some(Key(key, read_as)) = map.next_key()? {
                    let ValueKind(kind, len, decodes_to) = map.next_value()?;
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
                Ok(DataField::Names(keys, not_strings, lengths))
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
struct ListItem(Option<Vec<(&'static str, String)>>);

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
/// prune leaves the object): names of tools' settings, never configuration.
/// Every other annotation's value is dropped unread.
pub(crate) const KEPT_ANNOTATIONS: [&str; 8] = [
    "helm.sh/hook",
    "helm.sh/hook-weight",
    "helm.sh/hook-delete-policy",
    "helm.sh/resource-policy",
    "argocd.argoproj.io/hook",
    "argocd.argoproj.io/sync-wave",
    "argocd.argoproj.io/hook-delete-policy",
    "argocd.argoproj.io/sync-options",
];

/// An `annotations` map: every name, and the values of the
/// [`KEPT_ANNOTATIONS`] alone (any other is null).
struct KeptAnnotations(Vec<(String, Node)>);

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

/// Turns a parser message into one that cannot echo input values: quoted
/// and back-ticked spans are redacted unless they are a duplicate key name.
pub(crate) fn redact(message: &str) -> String {
    // serde ends an unknown field's or variant's message with the names the
    // type has ("expected `a` or `b`", "expected one of `a`, `b`, `c`"):
    // the type's names, kept whole, however many.
    let first = message.lines().next().unwrap_or("");
    let (message, names) = match first.rfind("expected ") {
        Some(at) if names_listed(&first[at + "expected ".len()..]) => {
            let at = at + "expected ".len();
            (&first[..at], &first[at..])
        }
        _ => (message, ""),
    };
    let mut out = String::with_capacity(message.len() + names.len());
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '"' | '`' | '\'') {
            let close = c;
            let mut inner = String::new();
            let mut closed = false;
            for d in chars.by_ref() {
                if d == close {
                    closed = true;
                    break;
                }
                inner.push(d);
            }
            // Field and key names are names, never values.
            let keep = closed
                && ["duplicate key ", "missing field ", "unknown field "]
                    .iter()
                    .any(|before| out.ends_with(before));
            out.push(close);
            out.push_str(if keep { &inner } else { "…" });
            if closed {
                out.push(close);
            }
        } else {
            out.push(c);
        }
    }
    // Parser messages can quote a scalar without quotes ("found string x"):
    // keep only the first line and cap the length.
    let first = out.lines().next().unwrap_or("").to_owned();
    let capped = if first.chars().count() > 160 {
        first.chars().take(160).collect::<String>() + "…"
    } else {
        first
    };
    capped + names
}

/// Whether `tail` is, to its end, serde's list of a type's names: "`a`",
/// "`a` or `b`" or "one of `a`, `b`, ...", each a name (letters, digits,
/// `_ - . $ @`).
fn names_listed(tail: &str) -> bool {
    let name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$' | '@'))
    };
    let quoted = |item: &str| {
        item.strip_prefix('`')
            .and_then(|i| i.strip_suffix('`'))
            .is_some_and(name)
    };
    match tail.strip_prefix("one of ") {
        Some(list) => list.split(", ").all(quoted),
        None => match tail.split_once(" or ") {
            Some((a, b)) => quoted(a) && quoted(b),
            None => quoted(tail),
        },
    }
}

/// Splits `text` (from `source`) into documents, dropping every value of
/// `data`, `stringData` and `binaryData` while parsing.
pub(crate) fn documents(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    parse_documents::<Redacted>(text, source)
}

/// Splits `text` into documents keeping every value (drift check only,
/// after the kind was checked with [`documents`]).
pub(crate) fn documents_with_values(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    parse_documents::<Full>(text, source)
}

/// `text` without a leading byte-order mark (U+FEFF), which YAML allows and
/// kubectl skips, in JSON too.
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

fn parse_documents<W: Wrapped>(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    let text = without_bom(text);
    let trimmed = text.trim_start();
    if source.ends_with(".json") {
        return json_documents::<W>(text, source);
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // JSON by its look; but YAML holds JSON too, and a stream may go
        // on in YAML after a `---` (a JSON document first, then YAML
        // ones): read as YAML what JSON cannot read, and name the JSON
        // error if YAML cannot either.
        return json_documents::<W>(text, source)
            .or_else(|json| yaml_documents::<W>(text, source).map_err(|_| json));
    }
    yaml_documents::<W>(text, source)
}

/// A serde_json error's position (`line L column C`) and its message
/// without it (serde_json's message ends with the same position).
pub(crate) fn json_error(e: &serde_json::Error) -> (String, String) {
    let location = format!("line {} column {}", e.line(), e.column());
    let message = e.to_string();
    let message = match message.strip_suffix(&format!(" at {location}")) {
        Some(m) => m.to_owned(),
        None => message,
    };
    (location, message)
}

/// One JSON document, or a stream of them one after another (what `jq -c
/// '.items[]'` prints), read with one deserializer so that an error's
/// line is the file's.
fn json_documents<W: Wrapped>(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut out = Vec::new();
    loop {
        let node = W::deserialize(&mut de).map(W::node).map_err(|e| {
            let (location, message) = json_error(&e);
            InputError::Parse {
                file: source.into(),
                location,
                message: redact(&message),
            }
        })?;
        match node {
            // A bare JSON array of objects is a document list.
            Node::Seq(items) => out.extend(items),
            other => out.push(other),
        }
        if de.end().is_ok() {
            return Ok(out);
        }
    }
}

/// A multi-document YAML stream.
fn yaml_documents<W: Wrapped>(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    let chunks = split_stream(
        text,
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
    );
    if chunks.len() == 1 {
        return parse_yaml::<W>(text, source, 0);
    }
    // A big stream: its documents are parsed in parallel, one chunk of
    // whole documents per core, and concatenated in order.
    let results: Vec<Result<Vec<Node>, InputError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|&(line, chunk)| scope.spawn(move || parse_yaml::<W>(chunk, source, line)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(InputError::Invalid {
                        at: source.into(),
                        message: "internal error while parsing".into(),
                    })
                })
            })
            .collect()
    });
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// Below this size a stream is parsed on one thread.
const PARALLEL_PARSE_BYTES: usize = 512 * 1024;

/// Cuts a YAML stream into about `parts` pieces at document-start lines
/// (`---` at column 0, which can only be a document marker: YAML forbids it
/// inside scalars), returning each piece with the number of lines before it.
fn split_stream(text: &str, parts: usize) -> Vec<(usize, &str)> {
    if parts < 2 || text.len() < PARALLEL_PARSE_BYTES || text.starts_with('%') {
        return vec![(0, text)];
    }
    let bytes = text.as_bytes();
    let mut cuts = vec![0usize];
    for k in 1..parts {
        let mut pos = (text.len() * k / parts).max(*cuts.last().unwrap_or(&0));
        let found = loop {
            let Some(off) = text[pos..].find("\n---") else {
                break None;
            };
            let start = pos + off + 1;
            match bytes.get(start + 3) {
                None | Some(b' ' | b'\n' | b'\r' | b'\t') => break Some(start),
                _ => pos = start,
            }
        };
        match found {
            Some(start) if start > *cuts.last().unwrap_or(&0) => cuts.push(start),
            _ => break,
        }
    }
    cuts.push(text.len());
    let mut line = 0;
    let mut out = Vec::with_capacity(cuts.len() - 1);
    for w in cuts.windows(2) {
        out.push((line, &text[w[0]..w[1]]));
        line += text[w[0]..w[1]].bytes().filter(|&b| b == b'\n').count();
    }
    out
}

/// The parser's message without its own location suffix: the error's
/// `location` field holds it, counted from the start of the whole stream,
/// where the parser's own count starts at the chunk it was given (a chunk
/// of a large stream said "line 200001" and "line 100000" for one error).
/// Other lines it names (an alias's definition) get the chunk's offset.
fn yaml_message(e: &serde_saphyr::Error, line_offset: usize) -> String {
    use serde_saphyr::Location;
    use serde_saphyr::localizer::Localizer;
    struct LocatedElsewhere;
    impl Localizer for LocatedElsewhere {
        fn attach_location<'a>(
            &self,
            base: std::borrow::Cow<'a, str>,
            _: Location,
        ) -> std::borrow::Cow<'a, str> {
            base
        }
    }
    let formatter = serde_saphyr::DefaultMessageFormatter.with_localizer(&LocatedElsewhere);
    let mut options = serde_saphyr::RenderOptions::default();
    options.formatter = &formatter;
    options.snippets = serde_saphyr::SnippetMode::Off;
    options.line_offset = line_offset as u64;
    e.render_with_options(options)
        // Advice to the parser's caller (this tool), not to its user.
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
}

fn parse_yaml<W: Wrapped>(
    text: &str,
    source: &str,
    line_offset: usize,
) -> Result<Vec<Node>, InputError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    // YAML 1.1, as kubectl reads it: `010` is eight (a key `010:` is the key
    // `8`; `defaultMode: 0644` is 420).
    options.legacy_octal_numbers = true;
    // `.inf` and `.nan` reach the visitors as floats (kubectl reads them so,
    // and the API server refuses them): a data value then says "a number",
    // as any other unquoted number does, instead of a parser policy error.
    options.non_finite_float_policy = serde_saphyr::options::NonFiniteFloatPolicy::PassThrough;
    // The default budget (1,024 documents, 250k nodes) is meant for config
    // files; rendered manifests of a whole cluster are far larger. Alias
    // and depth limits stay at their defaults (alias bombs are still
    // refused).
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 10_000_000;
    budget.max_nodes = 200_000_000;
    budget.max_events = 400_000_000;
    budget.max_total_scalar_bytes = 4 << 30;
    budget.max_reader_input_bytes = None;
    options.budget = Some(budget);
    let docs: Vec<Option<W>> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
            let location = e
                .location()
                .map(|l| {
                    format!(
                        "line {} column {}",
                        l.line() as usize + line_offset,
                        l.column()
                    )
                })
                .unwrap_or_else(|| "unknown location".into());
            InputError::Parse {
                file: source.into(),
                location,
                message: redact(&yaml_message(&e, line_offset)),
            }
        })?;
    Ok(docs
        .into_iter()
        .flatten()
        .map(W::node)
        .filter(|n| *n != Node::Null)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_keys_are_written_as_kubectl_writes_them() {
        // Each pair: a key as written, and the key `kubectl annotate --local
        // -o json` printed for it (kubectl 1.3x, sigs.k8s.io/yaml).
        for (key, kubectl) in [
            ("1.5", "1.5"),
            ("0.1", "0.1"),
            ("1.0", "1"),
            ("1e3", "1000"),
            (".5", "0.5"),
            ("-1.5", "-1.5"),
            ("0.0001", "0.0001"),
            ("0.00001", "1e-05"),
            ("1e-7", "1e-07"),
            ("0.000123", "0.000123"),
            ("123456.7", "123456.7"),
            ("999999", "999999"),
            ("1e6", "1e+06"),
            ("1e21", "1e+21"),
            ("3.14159265358979", "3.1415927"),
            ("-0.0", "-0"),
            ("007.5", "7.5"),
            (".inf", ".inf"),
        ] {
            let v: f64 = key.replace(".inf", "inf").parse().unwrap();
            assert_eq!(go_float_key(v), kubectl, "{key}");
        }
        assert_eq!(go_float_key(f64::NAN), ".nan");
        assert_eq!(go_float_key(f64::NEG_INFINITY), "-.inf");
        assert_eq!(go_float_key(1e300), ".inf");
    }

    #[test]
    fn data_values_are_dropped_while_parsing() {
        let docs = documents(
            "kind: Secret\napiVersion: v1\ndata:\n  A: c2VjcmV0\nstringData:\n  B: hunter2\n",
            "x.yaml",
        )
        .unwrap();
        let text = format!("{:?}", docs);
        assert!(
            !text.contains("hunter2") && !text.contains("c2VjcmV0"),
            "{text}"
        );
        assert!(text.contains("\"A\"") && text.contains("\"B\""));
    }

    #[test]
    fn annotation_values_are_dropped_while_parsing() {
        // What `kubectl get secret -o yaml` prints for a Secret created by
        // `kubectl apply`: its values again, inside an annotation.
        let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  annotations:\n    \
            kubectl.kubernetes.io/last-applied-configuration: |\n      \
            {\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"stringData\":{\"B\":\"hunter2\"}}\n\
            data:\n  B: aHVudGVyMg==\n";
        let docs = documents(secret, "x.yaml").unwrap();
        let text = format!("{docs:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("aHVudGVy"),
            "{text}"
        );
        assert!(text.contains("last-applied-configuration"), "{text}");
    }

    #[test]
    fn a_data_field_that_is_a_list_or_a_scalar_is_read_without_its_values() {
        // An ExternalSecret's `spec.data` is a list; a SealedSecret's
        // `encryptedData` holds ciphertexts. Neither was readable before
        // (a data field had to be a map), and no value survives.
        let text = "kind: ExternalSecret\nspec:\n  data:\n  - secretKey: password\n    \
            remoteRef: {key: prod/db, property: password}\n  - plain-item\n  - [nested-item]\n---\n\
            kind: SealedSecret\nspec:\n  encryptedData: {token: AgBy3i4OJSWK}\n---\n\
            kind: Other\ndata: hunter2\n";
        let docs = documents(text, "x.yaml").unwrap();
        let debug = format!("{docs:?}");
        for value in ["prod/db", "AgBy3i4", "hunter2", "plain-item", "nested-item"] {
            assert!(!debug.contains(value), "{value} in {debug}");
        }
        let data = docs[0].get("spec").unwrap().get("data").unwrap();
        assert_eq!(
            data.get(DATA_LIST),
            Some(&Node::Seq(vec![
                Node::Map(vec![("secretKey".into(), Node::String("password".into()))]),
                Node::Null,
                Node::Null
            ]))
        );
        let encrypted = docs[1].get("spec").unwrap().get("encryptedData").unwrap();
        // Its key, and the lengths of its value (as text, and decoded).
        assert_eq!(
            encrypted,
            &Node::Seq(vec![
                Node::String("token".into()),
                Node::Map(vec![(
                    VALUE_BYTES.into(),
                    Node::Seq(vec![
                        Node::Number(12.into()),
                        Node::Number(9.into()),
                        Node::Null
                    ])
                )]),
            ])
        );
        assert_eq!(docs[2].get("data"), Some(&Node::Map(Vec::new())));
    }

    #[test]
    fn the_values_of_hook_annotations_are_kept_and_no_others() {
        let job = "kind: Job
metadata:
  annotations:
    helm.sh/hook: pre-upgrade
    \
            helm.sh/hook-weight: \"-1\"\n    note: hunter2\n    \
            helm.sh/hook-delete-policy: hook-succeeded\n    \
            argocd.argoproj.io/hook-delete-policy: HookSucceeded\n    \
            helm.sh/resource-policy: keep\n    \
            argocd.argoproj.io/sync-options: Prune=false\n";
        let docs = documents(job, "x.yaml").unwrap();
        let annotations = docs[0].get("metadata").unwrap().get("annotations").unwrap();
        let value = |k| annotations.get(k).and_then(Node::as_str);
        assert_eq!(value("helm.sh/hook"), Some("pre-upgrade"));
        assert_eq!(value("helm.sh/hook-weight"), Some("-1"));
        assert_eq!(value("helm.sh/hook-delete-policy"), Some("hook-succeeded"));
        assert_eq!(
            value("argocd.argoproj.io/hook-delete-policy"),
            Some("HookSucceeded")
        );
        assert_eq!(value("helm.sh/resource-policy"), Some("keep"));
        assert_eq!(
            value("argocd.argoproj.io/sync-options"),
            Some("Prune=false")
        );
        assert_eq!(annotations.get("note"), Some(&Node::Null));
        assert!(!format!("{docs:?}").contains("hunter2"));
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        for (text, name, key) in [
            ("a: 1\na: 2\n", "x.yaml", "a"),
            ("a:\n  b: 1\n  b: 2\n", "x.yaml", "b"),
            (r#"{"a": {"b": 1, "b": 2}}"#, "x.json", "b"),
            ("data:\n  k: 1\n  k: 2\n", "x.yaml", "k"),
        ] {
            let err = documents(text, name).unwrap_err().to_string();
            assert!(
                err.contains(name) && err.contains("duplicate"),
                "{text}: {err}"
            );
            // The key, once, and the position once (serde_json repeats it).
            assert!(err.trim_end_matches('`').ends_with(key), "{text}: {err}");
            assert_eq!(err.matches("column").count(), 1, "{err}");
        }
        // Inside an ExternalSecret's data item, and among annotations
        // (whose values are otherwise skipped unread). Only JSON reaches
        // these checks: YAML's parser refuses a duplicate itself.
        for text in [
            r#"{"kind": "ExternalSecret", "spec": {"data": [{"secretKey": "a", "secretKey": "b"}]}}"#,
            r#"{"metadata": {"annotations": {"note": "a", "note": "b"}}}"#,
        ] {
            let err = documents(text, "x.json").unwrap_err().to_string();
            assert!(err.contains("duplicate key"), "{err}");
        }
    }

    #[test]
    fn integer_keys_are_their_decimal_digits() {
        let docs = documents("data:\n  -5: eA==\n  7: eA==\nspec:\n  -5: z\n", "x.yaml").unwrap();
        assert_eq!(
            docs[0].get("data"),
            Some(&Node::Seq(vec![
                Node::String("-5".into()),
                Node::String("7".into()),
                // 8 bytes of text, 2 decoded.
                Node::Map(vec![(
                    VALUE_BYTES.into(),
                    Node::Seq(vec![
                        Node::Number(8.into()),
                        Node::Number(2.into()),
                        Node::Null
                    ])
                )]),
            ]))
        );
        assert!(docs[0].get("spec").unwrap().get("-5").is_some());
    }

    #[test]
    fn null_documents_are_no_documents_and_non_finite_numbers_are_refused() {
        let docs = documents("a: 1\n---\n~\n---\nnull\n---\nb: 2\n", "x.yaml").unwrap();
        assert_eq!(docs.len(), 2);
        // `kubectl apply` cannot send `.inf` (JSON has no such number).
        let err = documents("spec:\n  replicas: .inf\n", "x.yaml").unwrap_err();
        assert!(err.to_string().contains("non-finite"), "{err}");
        // A data value of `.inf` is "a number", named by the loader.
        assert!(documents("data:\n  k: .inf\n", "x.yaml").is_ok());
    }

    #[test]
    fn streams_split_only_at_document_markers() {
        let doc = "a: |\n  ---not a marker\nb: 1\n";
        let text = format!("{}---\n", doc).repeat(40_000);
        let chunks = split_stream(&text, 4);
        assert!(chunks.len() > 1);
        let mut joined = String::new();
        let mut line = 0;
        for (first_line, chunk) in &chunks {
            assert_eq!(*first_line, line);
            assert!(
                *first_line == 0 || chunk.starts_with("---"),
                "{:?}",
                &chunk[..10]
            );
            line += chunk.matches('\n').count();
            joined.push_str(chunk);
        }
        assert_eq!(joined, text);
        let parsed = documents(&text, "big.yaml").unwrap();
        assert_eq!(parsed.len(), 40_000);
    }

    #[test]
    fn parse_errors_in_later_chunks_report_the_stream_line() {
        let mut text = "a: 1\n---\n".repeat(100_000);
        text.push_str("bad: [\n");
        let err = documents(&text, "big.yaml").unwrap_err().to_string();
        assert!(err.contains("line 200001"), "{err}");
        // The parser counts from its chunk: its own "at line 100000" used
        // to follow the stream's line, contradicting it.
        assert_eq!(err.matches("line").count(), 1, "{err}");
    }

    #[test]
    fn parse_errors_name_the_location_once_and_no_parser_option() {
        let err = documents("a: 1\nb:\n  c: 1\n  c: 2\n", "x.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "cannot parse x.yaml at line 4 column 3: duplicate mapping key: c"
        );
    }

    #[test]
    fn redaction_hides_quoted_spans_but_keeps_duplicate_key_names() {
        assert_eq!(
            redact("invalid type: string \"s3cr3t\", expected u64"),
            "invalid type: string \"…\", expected u64"
        );
        assert_eq!(redact("duplicate key `name`"), "duplicate key `name`");
        // serde's expected names are the type's, and kept in full, however
        // many; the value it did not know is not.
        let fields: Vec<String> = (0..40).map(|i| format!("`field_{i}`")).collect();
        let unknown = format!("unknown field `x`, expected one of {}", fields.join(", "));
        assert_eq!(redact(&unknown), unknown);
        assert_eq!(
            redact("unknown variant `s3cr3t`, expected `Always` or `Never`"),
            "unknown variant `…`, expected `Always` or `Never`"
        );
        assert_eq!(
            redact("unknown variant `s3cr3t`, expected `Always`"),
            "unknown variant `…`, expected `Always`"
        );
        // Only a whole list of names ending the message is kept.
        for text in [
            "expected `A`, found `s3cr3t`",
            "unknown variant `x`, expected one of `A`, `s3 cr3t`",
            "unknown variant `x`, expected `A` or `B` or `s3cr3t`",
            "invalid value: string \"s3cr3t\", expected `A` and `s3cr3t`",
        ] {
            assert!(!redact(text).contains("s3cr3t"), "{text}");
            assert!(!redact(text).contains("s3 cr3t"), "{text}");
        }
        // An unclosed span, a second line, a long line: none can echo input.
        assert_eq!(redact("duplicate key `s3cr3t"), "duplicate key `…");
        assert_eq!(redact("bad value\nfound s3cr3t"), "bad value");
        let long = format!("found {}", "x".repeat(300));
        let capped = redact(&long);
        assert_eq!(capped.chars().count(), 161);
        assert!(capped.ends_with('…'));
    }
}
