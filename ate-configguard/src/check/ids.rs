//! The objects and keys a command line names: `kind/namespace/name`, `...:key`.

use crate::error::InputError;
use crate::model::{ConfigKind, ObjectId, RetiredKey};

/// Parses `KIND/NAMESPACE/NAME` for a deletion.
///
/// # Errors
///
/// [`InputError::Invalid`] naming `s`, if it is not three non-empty parts
/// or the kind is not a ConfigMap or Secret.
pub fn parse_object_id(s: &str) -> Result<ObjectId, InputError> {
    let parts: Vec<&str> = s.split('/').collect();
    let shape = "ConfigMap/NAMESPACE/NAME or Secret/NAMESPACE/NAME";
    let [kind, namespace, name] = parts.as_slice() else {
        return Err(not_shaped(s, "--delete", shape));
    };
    object_id(s, [kind, namespace, name], "--delete", shape)
}

/// Parses `KIND/NAMESPACE/NAME/KEY` for a key retired on purpose
/// (`--retire-key`), held to the rules of [`parse_object_id`] and of the
/// keys the API server takes.
///
/// ```
/// let r = ate_configguard::manifest::parse_retired_key("cm/shop/api-config/db_password").unwrap();
/// assert_eq!(r.to_string(), "ConfigMap/shop/api-config/db_password");
/// assert!(ate_configguard::manifest::parse_retired_key("cm/shop/api-config").is_err());
/// ```
///
/// # Errors
///
/// [`InputError::Invalid`] naming `s`, if it is not four non-empty parts,
/// the kind is not a ConfigMap or Secret, the namespace or name is none
/// the API server takes, or the key is none a ConfigMap or Secret can
/// hold.
pub fn parse_retired_key(s: &str) -> Result<RetiredKey, InputError> {
    let at = "--retire-key";
    let shape = "ConfigMap/NAMESPACE/NAME/KEY or Secret/NAMESPACE/NAME/KEY";
    let parts: Vec<&str> = s.split('/').collect();
    let [kind, namespace, name, key] = parts.as_slice() else {
        return Err(not_shaped(s, at, shape));
    };
    let object = object_id(s, [kind, namespace, name], at, shape)?;
    if key.is_empty() {
        return Err(not_shaped(s, at, shape));
    }
    if !crate::load::is_key(key) {
        return Err(InputError::Invalid {
            at: at.into(),
            message: format!(
                "{s:?}: {key:?} is no key a ConfigMap or Secret can hold (at most 253 \
                 characters of a-z, A-Z, 0-9, '-', '_' and '.', not '.' nor starting with '..')"
            ),
        });
    }
    Ok(RetiredKey {
        object,
        key: (*key).to_owned(),
    })
}

fn not_shaped(s: &str, at: &str, shape: &str) -> InputError {
    InputError::Invalid {
        at: at.into(),
        message: format!("{s:?} is not {shape}"),
    }
}

/// The object named by `s`'s parts `[kind, namespace, name]`, for the
/// option `at`.
fn object_id(
    s: &str,
    [kind, namespace, name]: [&str; 3],
    at: &str,
    shape: &str,
) -> Result<ObjectId, InputError> {
    if namespace.is_empty() || name.is_empty() {
        return Err(not_shaped(s, at, shape));
    }
    let kind = ConfigKind::parse(kind).ok_or_else(|| not_shaped(s, at, shape))?;
    // A mistyped namespace (`Prod`) names nothing the current state holds,
    // so the deletion would pass unchecked.
    if !crate::load::is_namespace_name(namespace) {
        return Err(InputError::Invalid {
            at: at.into(),
            message: format!(
                "{s:?}: namespace {namespace:?} {}",
                crate::load::NOT_A_NAMESPACE
            ),
        });
    }
    crate::load::object_name_ok(kind, name, at)?;
    Ok(ObjectId {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// The object of `candidates` closest to `id`, if one is close: the same
/// kind and name in another namespace, or the same name of the other kind,
/// else a name a typo or two away.
pub(super) fn closest<'a>(
    id: &ObjectId,
    candidates: impl Iterator<Item = &'a ObjectId>,
) -> Option<&'a ObjectId> {
    let mut best: Option<(usize, &ObjectId)> = None;
    for c in candidates {
        let distance = if c.name == id.name && (c.kind == id.kind || c.namespace == id.namespace) {
            // The same name in another namespace, or of the other kind.
            0
        } else if c.kind == id.kind && c.namespace == id.namespace {
            edit_distance(&c.name, &id.name)
        } else {
            continue;
        };
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, c));
        }
    }
    let limit = (id.name.chars().count() / 3).max(2);
    best.filter(|(d, _)| *d <= limit).map(|(_, c)| c)
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            previous = here;
        }
    }
    row[b.len()]
}
