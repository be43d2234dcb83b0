//! The value fields (`data`, `stringData`, `binaryData`, kept annotations):
//! read as key names and value shapes, never values.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::node::{Key, Node, NodeSeed, duplicate};

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
