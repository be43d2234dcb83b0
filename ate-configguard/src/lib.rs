//! A fail-closed guard against Kubernetes ConfigMap/Secret migrations that
//! would break serving workloads.
//!
//! A deploy that removes or moves a ConfigMap/Secret key while a serving
//! workload still reads it can take down every pod of a service while its
//! liveness stays green. This crate checks the transition BEFORE anything
//! is applied, and fails CLOSED: input it cannot understand is an error,
//! never a pass.
//!
//! # Example
//!
//! ```
//! use ate_configguard::{CheckInput, LoadOptions, load_str};
//!
//! # fn main() -> Result<(), ate_configguard::InputError> {
//! let opts = LoadOptions::default();
//! let current = load_str(r#"
//! apiVersion: v1
//! kind: ConfigMap
//! metadata: { name: app }
//! data: { DB_HOST: db, REDIS_HOST: redis }
//! ---
//! apiVersion: apps/v1
//! kind: Deployment
//! metadata: { name: web }
//! spec:
//!   template:
//!     spec:
//!       containers:
//!         - name: web
//!           image: web:1
//!           envFrom: [ { configMapRef: { name: app } } ]
//! "#, "current.yaml", &opts)?;
//! // The proposed ConfigMap drops REDIS_HOST, which web bulk-loads.
//! let proposed = load_str(r#"
//! apiVersion: v1
//! kind: ConfigMap
//! metadata: { name: app }
//! data: { DB_HOST: db }
//! "#, "proposed.yaml", &opts)?;
//! let report = ate_configguard::check(&CheckInput { current, proposed, ..Default::default() })?;
//! assert!(!report.is_safe());
//! assert_eq!(report.failures[0].key.as_deref(), Some("REDIS_HOST"));
//! # Ok(())
//! # }
//! ```
//!
//! # The rule
//!
//! Every workload serving during or after the transition (each
//! workload of the CURRENT state, whose old pods keep running during the
//! rollout, and each of the PROPOSED state) must have each non-optional
//! reference resolve in the proposed config state: the object exists, in the
//! workload's namespace, as the same kind, and holds the key. Bulk loads
//! (`envFrom`, volumes without `items`) must keep every key they had,
//! unless the change retires that key on purpose ([`RetiredKey`](manifest::RetiredKey): then a
//! warning).
//! A current workload that live state shows to be dormant (a finished Pod
//! or Job, a Deployment's old ReplicaSet at 0 replicas; see
//! [`Workload::dormant`](manifest::Workload::dormant)) serves nothing, so what the transition breaks for
//! it is a warning: rolling back to that revision would fail. A Deployment
//! or StatefulSet at 0 replicas still counts as serving, since an
//! autoscaler may scale it up at any time.
//!
//! A proposed workload that runs as a hook BEFORE the change is applied (a
//! Helm `pre-install` / `pre-upgrade` hook, an Argo CD `PreSync` hook; see
//! [`Hook`](manifest::Hook)), such as a database migration Job, sees the state before the
//! change instead: the current objects, and the ConfigMaps and Secrets
//! that are hooks of its phase created before it. What only the change
//! brings is a failure of its own, `applied-after-hook`. Likewise a
//! workload that Argo CD syncs in an earlier wave than a config object it
//! reads ([`Workload::sync_wave`](manifest::Workload::sync_wave)) starts while that object is as it was:
//! `later-sync-wave`; and one that reads what only a hook run after the
//! change brings (`post-upgrade`, `PostSync`) cannot start before it:
//! `created-by-post-hook`. A config object that is a hook the change does
//! not create (`test`, `pre-rollback`, `Skip`, ...) or deletes once its
//! hooks succeed (`hook-succeeded`, `HookSucceeded`) is not there after
//! the change ([`HookPhase`](manifest::HookPhase)).
//!
//! - [`load_paths`] / [`load_str`] → [`Manifests`]: names only. A
//!   `SealedSecret`, an `ExternalSecret`, a cert-manager `Certificate` or
//!   a `SecretProviderClass` stands for the Secret its controller makes
//!   ([`ConfigObject::made_by`](manifest::ConfigObject::made_by)). A document without a namespace is read
//!   in [`LoadOptions::default_namespace`]; [`unplaced_namespace`](manifest::unplaced_namespace) tells
//!   when that misses the other state (rendered manifests against a live
//!   state of another namespace), unless the user chose it.
//! - Typed objects a service already holds (read with `kube`, say):
//!   [`ConfigObject::from_config_map`](manifest::ConfigObject::from_config_map), [`ConfigObject::from_secret`](manifest::ConfigObject::from_secret),
//!   [`ServiceAccount::from_service_account`](manifest::ServiceAccount::from_service_account) and
//!   [`Workload::from_pod_spec`](manifest::Workload::from_pod_spec) build the same names-only [`Manifests`].
//! - [`check`] with a [`CheckInput`] → [`Report`] ([`Finding`]s).
//! - [`drift`] → [`Report`]: defaults vs base vs overlays.
//! - [`rollout`]: the rollout gate (grace budget, probe split, preStop,
//!   load-balancer draining, image identity, headroom, single writer) and
//!   the [`rollback_plan`](rollout::rollback_plan) from a live state.
//! - [`InputError`]: unusable input (the CLI's exit 2).
//!
//! It reads object and key NAMES only: the values of `data`, `stringData`
//! and `binaryData` are skipped by the deserializer itself, never kept,
//! printed, logged or put in an error. So are the values of every
//! annotation (`kubectl apply` keeps a copy of the whole object, values
//! included, in `kubectl.kubernetes.io/last-applied-configuration`) but the
//! eight that tell how Helm and Argo CD handle the object: when a hook
//! runs and whether it stays (`helm.sh/hook`, `helm.sh/hook-weight`,
//! `helm.sh/hook-delete-policy`, `argocd.argoproj.io/hook`,
//! `argocd.argoproj.io/sync-wave`, `argocd.argoproj.io/hook-delete-policy`),
//! and whether a prune leaves it (`helm.sh/resource-policy`,
//! `argocd.argoproj.io/sync-options`).
//!
//! # Feature flags
//!
//! - `cli`: the `ate-configguard` binary. It enables the newest Kubernetes
//!   version of k8s-openapi, which only a final binary may do; the library
//!   never picks one, so a build of the library alone needs
//!   `K8S_OPENAPI_ENABLED_VERSION` (for example `1.37`) or a k8s-openapi
//!   version feature enabled by your own binary.
//! - `test-util`: the `testing` module (a naive resolver and proptest
//!   strategies for workloads and config states).
#![warn(missing_docs)]

mod check;
mod drift;
mod load;
mod model;
mod operator;
mod parse;
pub mod rollout;
#[cfg(feature = "test-util")]
pub mod testing;

pub use check::{CheckInput, Deletion, Report, Verdict, check};
pub use drift::{Source, drift};
pub use load::{LoadOptions, load_paths, load_str};
pub use model::{Code, Finding, Manifests, Place, Severity, Side};

/// What the guard reads from manifests: config objects, workloads and the
/// references between them, the names it knows the platform provides, and
/// the parsers for the names a user gives on the command line.
pub mod manifest {
    pub use crate::check::{CONTROL_PLANE_OBJECTS, inventory, parse_object_id, parse_retired_key};
    pub use crate::load::{pod_references, unplaced_namespace};
    pub use crate::model::{
        ConfigKind, ConfigObject, Hook, HookPhase, Inventory, ObjectId, PULL_SECRET_KEYS,
        Reference, RetiredKey, ServiceAccount, Workload, WorkloadId,
    };
}

/// Reading input text: files and stdin decoded as the loaders do, and the
/// `--prune-selector` label selector.
pub mod text {
    pub use crate::load::{decode_text, parse_selector, read_text};
}

mod error;
pub use error::InputError;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
