//! The inventory: every ConfigMap/Secret and its key names, for `--inventory`.

use std::collections::{BTreeSet, HashMap};

use super::ctx::unique;
use crate::error::InputError;
use crate::model::{Inventory, Manifests, ObjectId};

/// A names-only inventory of `manifests`' config objects.
pub fn inventory(manifests: &Manifests) -> Inventory {
    let mut objects = manifests.objects.clone();
    objects.sort_by(|a, b| a.id.cmp(&b.id));
    Inventory {
        version: Inventory::VERSION,
        objects,
    }
}

/// A previous inventory's key names by object: one of another format
/// version, or one that lists an object twice (which of its key lists
/// holds?), is unusable input.
pub(super) fn inventory_index(
    inv: &Inventory,
) -> Result<HashMap<&ObjectId, &BTreeSet<String>>, InputError> {
    const AT: &str = "previous inventory";
    if inv.version != Inventory::VERSION {
        return Err(InputError::Invalid {
            at: AT.into(),
            message: format!(
                "format version {} is not one this build reads (version {})",
                inv.version,
                Inventory::VERSION
            ),
        });
    }
    Ok(
        unique(&inv.objects, |o| &o.id, |first, _| first.id.to_string(), AT)?
            .into_iter()
            .map(|(id, o)| (id, &o.keys))
            .collect(),
    )
}
