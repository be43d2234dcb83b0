//! What one check knows while it judges references: both states and the
//! proposed input indexed by identity, the previous inventory, what the
//! change prunes and retires ([`Ctx`]), and the objects the platform
//! itself keeps ([`CONTROL_PLANE_OBJECTS`]).

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap, HashSet};

use crate::error::InputError;
use crate::model::{ConfigKind, ConfigObject, ObjectId, Reference, ServiceAccount, WorkloadId};

/// ConfigMaps that the platform itself keeps in every namespace (re-created
/// at once if deleted), with the one key each holds: `--prune` never
/// counts them as deleted, and a reference to that key resolves even when
/// the input lists no ConfigMaps (`kubectl get pods -o yaml`).
/// `kube-root-ca.crt` (`ca.crt`) is mounted by every pod's service-account
/// token volume (`kube-api-access-*`); OpenShift adds
/// `openshift-service-ca.crt` (`service-ca.crt`) to that projection in
/// every namespace.
pub const CONTROL_PLANE_OBJECTS: [(ConfigKind, &str, &str); 2] = [
    (ConfigKind::ConfigMap, "kube-root-ca.crt", "ca.crt"),
    (
        ConfigKind::ConfigMap,
        "openshift-service-ca.crt",
        "service-ca.crt",
    ),
];

/// Whether `id` is one of the [`CONTROL_PLANE_OBJECTS`].
pub(super) fn is_control_plane_object(id: &ObjectId) -> bool {
    CONTROL_PLANE_OBJECTS
        .iter()
        .any(|(kind, name, _)| id.kind == *kind && id.name == *name)
}

/// Whether the platform itself keeps `target` (and `key` in it) in every
/// namespace ([`CONTROL_PLANE_OBJECTS`]); another key of it does not
/// resolve.
pub(super) fn kept_by_control_plane(target: &ObjectId, key: Option<&str>) -> bool {
    CONTROL_PLANE_OBJECTS.iter().any(|(kind, name, held)| {
        target.kind == *kind && target.name == *name && key.is_none_or(|k| k == *held)
    })
}

pub(super) type Index<'a> = HashMap<&'a ObjectId, &'a ConfigObject>;

pub(super) type Accounts<'a> = HashMap<(&'a str, &'a str), &'a ServiceAccount>;

/// `items` by `key`, borrowed; two items with one key in one state are an
/// input error naming it (`name`).
pub(super) fn unique<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
    name: impl Fn(&T, &T) -> String,
    at: &str,
) -> Result<HashMap<K, &'a T>, InputError> {
    let mut map = HashMap::with_capacity(items.len());
    for item in items {
        if let Some(first) = map.insert(key(item), item) {
            return Err(InputError::Invalid {
                at: at.into(),
                message: format!("{} appears twice", name(first, item)),
            });
        }
    }
    Ok(map)
}

/// Objects by identity, borrowed (no copies of key sets).
pub(super) fn index<'a>(objects: &'a [ConfigObject], at: &str) -> Result<Index<'a>, InputError> {
    fn made(o: &ConfigObject) -> &str {
        o.made_by.as_deref().unwrap_or("the input itself")
    }
    unique(
        objects,
        |o| &o.id,
        |first, second| match (&first.made_by, &second.made_by) {
            (None, None) => first.id.to_string(),
            // Two controllers would write it: which keys it ends with is
            // not known.
            _ => format!(
                "{} (made by {} and by {})",
                first.id,
                made(first),
                made(second)
            ),
        },
        at,
    )
}

/// ServiceAccounts by namespace and name.
pub(super) fn accounts<'a>(
    list: &'a [ServiceAccount],
    at: &str,
) -> Result<Accounts<'a>, InputError> {
    unique(
        list,
        |a| (a.namespace.as_str(), a.name.as_str()),
        |_, a| format!("ServiceAccount/{}/{}", a.namespace, a.name),
        at,
    )
}

pub(super) struct Ctx<'a> {
    pub(super) current: &'a Index<'a>,
    /// The state after the change.
    pub(super) proposed: &'a Index<'a>,
    /// The objects of the proposed input alone.
    pub(super) proposed_in: &'a Index<'a>,
    pub(super) inventory: HashMap<&'a ObjectId, &'a BTreeSet<String>>,
    /// (namespace, key) -> objects holding that key in the proposed state;
    /// built on the first missing key (it only feeds the message).
    pub(super) holders: OnceCell<HashMap<(&'a str, &'a str), Vec<&'a ObjectId>>>,
    /// Current workloads that `--prune` deletes along with the change.
    pub(super) pruned: HashSet<&'a WorkloadId>,
    /// Keys the change retires on purpose.
    pub(super) retired: HashSet<(&'a ObjectId, &'a str)>,
    /// The references of each workload of the proposed input.
    pub(super) proposed_refs: HashMap<&'a WorkloadId, &'a [Reference]>,
}

impl<'a> Ctx<'a> {
    pub(super) fn holders(&self, namespace: &str, key: &str) -> Vec<String> {
        let holders = self.holders.get_or_init(|| {
            let mut map: HashMap<(&str, &str), Vec<&ObjectId>> = HashMap::new();
            for (id, o) in self.proposed {
                for k in &o.keys {
                    map.entry((id.namespace.as_str(), k.as_str()))
                        .or_default()
                        .push(id);
                }
            }
            map
        });
        let mut found: Vec<String> = holders
            .get(&(namespace, key))
            .map(|ids| ids.iter().map(|i| i.to_string()).collect())
            .unwrap_or_default();
        found.sort();
        found
    }
}
