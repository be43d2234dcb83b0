//! The transition rule, one behaviour per test.

#[path = "../common/mod.rs"]
mod common;

use ate_configguard::{
    CheckInput, Deletion, LoadOptions, Severity, Side, check, load_str,
    manifest::{Inventory, inventory, parse_object_id, unplaced_namespace},
};
use common::*;

/// A container reading `DB_HOST` from ConfigMap `cfg` by key.
const KEYREF: &str = "      containers:\n        - name: app\n          image: app:1\n          env:\n            - name: DB_HOST\n              valueFrom:\n                configMapKeyRef:\n                  name: cfg\n                  key: DB_HOST\n";

const ENVFROM_APP: &str = "      containers:\n        - name: app\n          image: app:1\n          envFrom:\n            - configMapRef:\n                name: app-config\n";

mod hooks;
mod input;
mod live;
mod makers;
mod namespaces;
mod references;
mod secret_types;
mod tls;
