//! Config-default drift: the defaults a program compiles in, the base
//! ConfigMap, and each overlay strategic-merged over the base must agree.
//!
//! Values are compared here (they are defaults the user chose to check) but
//! never printed; keys listed as secret are not even compared.

use std::collections::{BTreeMap, BTreeSet};

use crate::check::Report;
use crate::error::InputError;
use crate::model::{Code, ConfigKind, Finding, ObjectId, Severity};
use crate::parse::{Node, documents, documents_with_values};

/// One input file's text and its name (for messages).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The text.
    pub text: &'a str,
    /// The name shown in messages (a path).
    pub name: &'a str,
}

fn bad(at: &str, message: impl Into<String>) -> InputError {
    InputError::Invalid {
        at: at.to_owned(),
        message: message.into(),
    }
}

fn single(source: Source<'_>) -> Result<Node, InputError> {
    let mut docs = documents_with_values(source.text, source.name)?;
    if docs.len() != 1 {
        return Err(bad(
            source.name,
            format!("expected one document, found {}", docs.len()),
        ));
    }
    Ok(docs.remove(0))
}

fn string_map(
    node: &Node,
    at: &str,
    what: &str,
) -> Result<BTreeMap<String, Option<String>>, InputError> {
    let Node::Map(entries) = node else {
        return Err(bad(at, format!("{what} is not a map")));
    };
    let mut out = BTreeMap::new();
    for (k, v) in entries {
        let v = match v {
            Node::String(s) => Some(s.clone()),
            Node::Null => None,
            _ => return Err(bad(at, format!("{what}: the value of {k} is not a string"))),
        };
        out.insert(k.clone(), v);
    }
    Ok(out)
}

/// Checks that `source` is a ConfigMap before its values are read (so a
/// Secret's values are never loaded). `patch` allows an overlay without a
/// kind (a patch names only what it changes).
fn require_configmap(source: Source<'_>, patch: bool) -> Result<(), InputError> {
    let docs = documents(source.text, source.name)?;
    let [doc] = docs.as_slice() else {
        return Err(bad(
            source.name,
            format!("expected one document, found {}", docs.len()),
        ));
    };
    match doc.get("kind").and_then(Node::as_str) {
        Some("ConfigMap") => Ok(()),
        None if patch => Ok(()),
        Some(kind) => Err(bad(
            source.name,
            format!("expected a ConfigMap, found {kind}"),
        )),
        None => Err(bad(source.name, "missing kind")),
    }
}

/// An overlay that names an object names the base's (kustomize matches a
/// patch to its target by name and namespace; one that names another
/// ConfigMap is not a patch of this one). A namespace is compared only
/// where both state one: a base without one takes its overlay's.
fn patches_the_base(
    patch: &Node,
    name: &str,
    namespace: Option<&str>,
    at: &str,
) -> Result<(), InputError> {
    let Some(meta) = patch.get("metadata") else {
        return Ok(());
    };
    for (field, want) in [("name", Some(name)), ("namespace", namespace)] {
        match meta.get(field) {
            None | Some(Node::Null) => {}
            Some(Node::String(got)) if want.is_none_or(|w| w == got) => {}
            Some(Node::String(got)) => {
                let want = want.unwrap_or_default();
                let hint = if field == "name"
                    && unhashed(got)
                        .zip(unhashed(want))
                        .is_some_and(|(a, b)| a == b)
                {
                    "; the two differ only in a kustomize hash suffix, so these are rendered \
                     outputs: give the rendered overlay alone as --base (it holds the merge), \
                     or the patch file itself as --overlay"
                } else {
                    ""
                };
                return Err(bad(
                    at,
                    format!(
                        "the overlay patches ConfigMap {field} {got:?}, not the base's {want:?}{hint}"
                    ),
                ));
            }
            Some(_) => return Err(bad(at, format!("metadata.{field} is not a string"))),
        }
    }
    Ok(())
}

/// A rendered overlay: `None` when the overlay deletes the object.
fn render(
    base: &BTreeMap<String, String>,
    patch: &Node,
    at: &str,
) -> Result<Option<BTreeMap<String, String>>, InputError> {
    let Node::Map(entries) = patch else {
        return Err(bad(at, "an overlay must be an object"));
    };
    let mut replace_all = false;
    for (k, v) in entries {
        if k.starts_with('$') {
            match (k.as_str(), v.as_str()) {
                ("$patch", Some("delete")) => return Ok(None),
                ("$patch", Some("replace")) => replace_all = true,
                ("$patch", Some("merge")) => {}
                _ => return Err(bad(at, format!("unsupported directive {k}"))),
            }
        }
    }
    if patch.get("binaryData").is_some() {
        return Err(bad(at, "binaryData is not supported by the drift check"));
    }
    let mut data = if replace_all {
        BTreeMap::new()
    } else {
        base.clone()
    };
    let Some(patch_data) = patch.get("data") else {
        return Ok(Some(data));
    };
    if *patch_data == Node::Null {
        // `data: null` deletes the field.
        return Ok(Some(BTreeMap::new()));
    }
    let mut map = string_map_with_directives(patch_data, at)?;
    if map.remove("$patch") == Some(Some("replace".into())) {
        data.clear();
    }
    for (k, v) in map {
        match v {
            Some(v) => {
                data.insert(k, v);
            }
            None => {
                data.remove(&k);
            }
        }
    }
    Ok(Some(data))
}

fn string_map_with_directives(
    node: &Node,
    at: &str,
) -> Result<BTreeMap<String, Option<String>>, InputError> {
    let map = string_map(node, at, "data")?;
    for (k, v) in &map {
        if k.starts_with('$')
            && !(k == "$patch" && matches!(v.as_deref(), Some("replace") | Some("merge")))
        {
            return Err(bad(at, format!("unsupported directive {k} in data")));
        }
    }
    Ok(map)
}

/// The compiled-in defaults: a map of strings, none null.
fn read_defaults(defaults: Source<'_>) -> Result<BTreeMap<String, String>, InputError> {
    let defaults_node = single(defaults)?;
    let map = string_map(&defaults_node, defaults.name, "defaults")?
        .into_iter()
        .map(|(k, v)| {
            v.map(|v| (k.clone(), v))
                .ok_or_else(|| bad(defaults.name, format!("defaults: {k} is null")))
        })
        .collect::<Result<_, _>>()?;
    Ok(map)
}

/// The base ConfigMap as read.
struct Base {
    /// Its identity (namespace `default` where it states none).
    object: ObjectId,
    /// The namespace it states, if any.
    explicit_namespace: Option<String>,
    /// Its data (strings, none null).
    data: BTreeMap<String, String>,
}

/// The base ConfigMap (`binaryData` refused).
fn read_base(base: Source<'_>) -> Result<Base, InputError> {
    require_configmap(base, false)?;
    let base_node = single(base)?;
    if base_node.get("binaryData").is_some() {
        return Err(bad(
            base.name,
            "binaryData is not supported by the drift check",
        ));
    }
    let name = base_node
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Node::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad(base.name, "missing metadata.name"))?
        .to_owned();
    // `namespace: ""` is left out too, as kubectl and kustomize take it.
    let explicit_namespace = base_node
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Node::as_str)
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned);
    let namespace = explicit_namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let base_data: BTreeMap<String, String> = match base_node.get("data") {
        None | Some(Node::Null) => BTreeMap::new(),
        Some(d) => string_map(d, base.name, "data")?
            .into_iter()
            .map(|(k, v)| {
                v.map(|v| (k.clone(), v))
                    .ok_or_else(|| bad(base.name, format!("data: {k} is null")))
            })
            .collect::<Result<_, _>>()?,
    };
    let object = ObjectId {
        kind: ConfigKind::ConfigMap,
        namespace,
        name,
    };
    Ok(Base {
        object,
        explicit_namespace,
        data: base_data,
    })
}

/// Runs the drift check. `defaults` is a map of key → string (JSON or
/// YAML), `base` a ConfigMap manifest, each overlay a strategic-merge patch
/// of it (an overlay that names another ConfigMap, by `metadata.name` or
/// `metadata.namespace`, is an input error). Keys in `secret_keys` are
/// checked for presence only.
///
/// # Errors
///
/// [`InputError::Parse`] or [`InputError::Invalid`] naming the source and
/// the place for input it cannot read: defaults that are not a map of
/// strings, a base that is not one ConfigMap, an overlay for another
/// ConfigMap or with a directive it does not apply.
pub fn drift(
    defaults: Source<'_>,
    base: Source<'_>,
    overlays: &[Source<'_>],
    secret_keys: &BTreeSet<String>,
) -> Result<Report, InputError> {
    let defaults_map = read_defaults(defaults)?;
    let Base {
        object,
        explicit_namespace,
        data: base_data,
    } = read_base(base)?;

    let mut rendered = vec![(
        format!("base {}", base.name),
        object.clone(),
        Some(base_data.clone()),
    )];
    for overlay in overlays {
        require_configmap(*overlay, true)?;
        let patch = single(*overlay)?;
        patches_the_base(
            &patch,
            &object.name,
            explicit_namespace.as_deref(),
            overlay.name,
        )?;
        // Where the base states no namespace, the overlay's is the
        // rendered object's (kustomize's `namespace:` or the patch's own).
        let mut rendered_object = object.clone();
        if let Some(ns) = patch
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(Node::as_str)
            .filter(|ns| !ns.is_empty())
        {
            rendered_object.namespace = ns.to_owned();
        }
        rendered.push((
            format!("overlay {}", overlay.name),
            rendered_object,
            render(&base_data, &patch, overlay.name)?,
        ));
    }

    let mut failures = Vec::new();
    let mut compared = 0;
    for (site, object, data) in &rendered {
        let mut finding = |code: Code, key: &str, message: String| {
            failures.push(Finding {
                severity: Severity::Failure,
                code,
                workload: None,
                side: None,
                container: None,
                site: Some(site.clone()),
                object: Some(object.clone()),
                key: Some(key.to_owned()),
                message,
                source: None,
            });
        };
        let Some(data) = data else {
            finding(
                Code::ObjectDeleted,
                "*",
                "the overlay deletes the ConfigMap ($patch: delete)".into(),
            );
            continue;
        };
        for (key, default) in &defaults_map {
            compared += 1;
            match data.get(key) {
                None => finding(Code::MissingDefault, key, "a compiled-in default is missing from the ConfigMap".into()),
                Some(_) if secret_keys.contains(key) => {}
                Some(v) if v != default => finding(
                    Code::ValueDiffers,
                    key,
                    "the ConfigMap value differs from the compiled-in default (values are not printed)".into(),
                ),
                Some(_) => {}
            }
        }
        for key in data.keys() {
            if !defaults_map.contains_key(key) {
                finding(
                    Code::UnknownKey,
                    key,
                    "the ConfigMap holds a key the program's defaults do not know".into(),
                );
            }
        }
    }
    Ok(Report {
        result: crate::check::Verdict::of(&failures),
        workloads_checked: 0,
        workloads_current: 0,
        workloads_proposed: 0,
        references_checked: compared,
        failures,
        warnings: Vec::new(),
        waived: Vec::new(),
    })
}

/// `name` without the hash suffix kustomize's generators append (`-` and
/// ten characters of its hex-derived alphabet), if it has one.
fn unhashed(name: &str) -> Option<&str> {
    let (stem, hash) = name.rsplit_once('-')?;
    (hash.len() == 10 && hash.bytes().all(|b| b"245678bcdfghkmt9".contains(&b))).then_some(stem)
}
