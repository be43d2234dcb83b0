//! The names-only model: config objects, workloads, references, findings.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// ConfigMap or Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigKind {
    /// A `v1/ConfigMap`.
    ConfigMap,
    /// A `v1/Secret`.
    Secret,
}

impl ConfigKind {
    /// The other kind.
    #[must_use]
    pub fn other(self) -> Self {
        match self {
            Self::ConfigMap => Self::Secret,
            Self::Secret => Self::ConfigMap,
        }
    }

    /// Parses `ConfigMap` / `Secret` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "configmap" | "cm" => Some(Self::ConfigMap),
            "secret" => Some(Self::Secret),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        })
    }
}

/// `kind/namespace/name` of a ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// A ConfigMap or Secret: its key NAMES only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigObject {
    /// Identity.
    #[serde(flatten)]
    pub id: ObjectId,
    /// Key names (`data` ∪ `binaryData` / `stringData`).
    pub keys: BTreeSet<String>,
    /// `immutable: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub immutable: bool,
    /// Created as a hook before the change is applied, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_apply: Option<PreApplyHook>,
    /// Its Argo CD sync wave (`argocd.argoproj.io/sync-wave`), if it is no
    /// hook and names one. Argo CD applies a wave, and waits for it to be
    /// healthy, before the next; within a wave, ConfigMaps and Secrets come
    /// before workloads. No wave is wave 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
    /// The object a controller makes it from, if it is not itself in the
    /// input but the Secret of a SealedSecret, an ExternalSecret or a
    /// cert-manager Certificate (`SealedSecret/NAMESPACE/NAME`), with the
    /// key names that object gives. A real Secret of the same name in the same input replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
}

/// A hook that runs before the rest of a change is applied: a Helm
/// `pre-install` or `pre-upgrade` hook (`helm.sh/hook`), or an Argo CD
/// `PreSync` hook (`argocd.argoproj.io/hook`, which Argo CD also makes of
/// Helm's two). A workload that is one sees the state BEFORE the change
/// (the current state), plus the ConfigMaps and Secrets that are hooks of
/// the same phase created before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreApplyHook {
    /// The annotation that makes it one, as `helm.sh/hook=pre-upgrade`.
    pub annotation: String,
    /// Its place among the hooks, lowest first: `helm.sh/hook-weight`,
    /// else `argocd.argoproj.io/sync-wave`, else 0.
    pub weight: i64,
    /// Ordered as Helm orders hooks of one weight: by name alone. (Argo CD
    /// creates the ConfigMaps and Secrets of a wave before its workloads.)
    pub helm: bool,
}

impl PreApplyHook {
    /// Whether a config object `object`, a hook named `object_name`, is
    /// created before a workload hook `self` named `name` runs.
    pub fn runs_after(&self, name: &str, object: &PreApplyHook, object_name: &str) -> bool {
        match object.weight.cmp(&self.weight) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            // Either one ordered by Helm: by name (the stricter order).
            std::cmp::Ordering::Equal => !(self.helm || object.helm) || object_name < name,
        }
    }
}

/// `kind/namespace/name` of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkloadId {
    /// Kubernetes kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// One reference from a pod spec to a ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reference {
    /// The container (absent for pod-level sites such as volumes and
    /// imagePullSecrets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Where in the pod spec, e.g. `env[DB_HOST].valueFrom.configMapKeyRef`.
    pub site: String,
    /// The object referenced (namespace = the workload's).
    pub kind: ConfigKind,
    /// Object name.
    pub name: String,
    /// The key, for a single-key reference; `None` for a whole object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Every key is loaded (envFrom, a volume without `items`).
    pub bulk: bool,
    /// `optional: true`.
    pub optional: bool,
}

impl Reference {
    /// Whether `object` holds what it reads: the key, or (for a whole
    /// object) anything.
    pub fn resolves_in(&self, object: &ConfigObject) -> bool {
        self.key.as_ref().is_none_or(|k| object.keys.contains(k))
    }

    /// The object it names, for a workload in `namespace`.
    pub fn target(&self, namespace: &str) -> ObjectId {
        ObjectId {
            kind: self.kind,
            namespace: namespace.to_owned(),
            name: self.name.clone(),
        }
    }
}

/// A workload and its references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Identity.
    pub id: WorkloadId,
    /// Every reference its pod template makes.
    pub references: Vec<Reference>,
    /// Why it runs no pod and starts none by itself (a finished Pod or
    /// Job, a Deployment's old ReplicaSet at 0 replicas), or `None` if it
    /// serves. What a transition breaks for a dormant workload is a
    /// warning, not a failure: nothing serving depends on it, but starting
    /// it again (a rollback) would fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dormant: Option<String>,
    /// The ServiceAccount its pods run as (`serviceAccountName`, else
    /// `default`, as Kubernetes applies): the account's `imagePullSecrets`
    /// are added to every pod it creates, so they are references too.
    #[serde(default = "default_service_account")]
    pub service_account: String,
    /// Runs as a hook before the change is applied, if it is one: its
    /// references are then checked against the state before the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_apply: Option<PreApplyHook>,
    /// Its Argo CD sync wave, if it is no hook and names one (see
    /// [`ConfigObject::sync_wave`]): its new pods start while the config
    /// objects of later waves are still as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
}

fn default_service_account() -> String {
    "default".into()
}

/// A ServiceAccount's `imagePullSecrets` (names only): Kubernetes adds them
/// to every pod that runs as the account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAccount {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Secrets named in `imagePullSecrets`.
    pub image_pull_secrets: Vec<String>,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the check (exit 1).
    Failure,
    /// Reported, does not fail (optional references, references outside
    /// pod specs).
    Warning,
}

/// Which state a workload was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Serving now; its pods keep running during the rollout.
    Current,
    /// About to be applied.
    Proposed,
}

/// One finding. Names only: never a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Finding {
    /// Failure or warning.
    pub severity: Severity,
    /// A stable code: `missing-object`, `missing-key`, `reclassified`,
    /// `bulk-key-removed`, `immutable-changed`, `outside-pod-spec`,
    /// `applied-after-hook`, `later-sync-wave`.
    pub code: String,
    /// The workload, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadId>,
    /// Which state the workload came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side: Option<Side>,
    /// The container, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The reference site.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectId>,
    /// The key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What the proposed state does, in words.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.severity {
            Severity::Failure => "FAIL",
            Severity::Warning => "WARN",
        };
        write!(f, "{label} [{}]", self.code)?;
        if let Some(w) = &self.workload {
            write!(f, " {w}")?;
        }
        if let Some(s) = self.side {
            write!(
                f,
                " ({})",
                if s == Side::Current {
                    "current"
                } else {
                    "proposed"
                }
            )?;
        }
        if let Some(c) = &self.container {
            write!(f, " container {c}")?;
        }
        if let Some(s) = &self.site {
            write!(f, " {s}")?;
        }
        if let Some(o) = &self.object {
            write!(f, " -> {o}")?;
        }
        if let Some(k) = &self.key {
            write!(f, " key {k}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A names-only inventory (the `inventory` command's output and the
/// `--inventory` input).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Inventory format version (1).
    pub version: u32,
    /// The objects.
    pub objects: Vec<ConfigObject>,
}

/// What a set of manifests holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifests {
    /// ConfigMaps and Secrets.
    pub objects: Vec<ConfigObject>,
    /// Workloads with pod templates.
    pub workloads: Vec<Workload>,
    /// Findings made while reading (references outside pod specs).
    pub notes: Vec<Finding>,
    /// ServiceAccounts and the pull secrets they add to their pods.
    pub service_accounts: Vec<ServiceAccount>,
}

impl Manifests {
    /// Appends everything `other` holds (as reading one more file does).
    pub fn extend(&mut self, other: Manifests) {
        // Destructured, so a new field cannot be left out here.
        let Manifests {
            objects,
            workloads,
            notes,
            service_accounts,
        } = other;
        self.objects.extend(objects);
        self.workloads.extend(workloads);
        self.notes.extend(notes);
        self.service_accounts.extend(service_accounts);
    }
}
