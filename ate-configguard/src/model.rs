//! The names-only model: config objects, workloads, references, findings.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

mod finding;

pub use finding::{Code, Finding, Severity, Side};

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

/// A key that a change removes from a ConfigMap or Secret on purpose
/// (`KIND/NAMESPACE/NAME/KEY`, [`parse_retired_key`](crate::manifest::parse_retired_key)).
///
/// A bulk load ([`Reference::bulk`]: `envFrom`, a volume without `items`)
/// that loses a retired key is a warning instead of a `bulk-key-removed`
/// failure: its pods go without that variable or file, which is what
/// retiring it means. A reference to the key by name still fails, since
/// its pods would not start.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RetiredKey {
    /// The ConfigMap or Secret.
    pub object: ObjectId,
    /// The key it loses.
    pub key: String,
}

impl fmt::Display for RetiredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.object, self.key)
    }
}

/// A ConfigMap or Secret: its key NAMES only.
///
/// Serialized flat (`kind`, `namespace`, `name` beside `keys`); read back,
/// a field it does not have is refused, naming it (a typo such as
/// `secret_typ` in a hand-edited inventory is not dropped unread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "FlatObject")]
pub struct ConfigObject {
    /// Identity.
    #[serde(flatten)]
    pub id: ObjectId,
    /// Key names (`data` ∪ `binaryData` / `stringData`).
    pub keys: BTreeSet<String>,
    /// Of [`keys`](Self::keys), those a ConfigMap holds in `binaryData`.
    /// A volume reads both maps; `env` (`configMapKeyRef`) and `envFrom`
    /// read `data` only (the kubelet: "couldn't find key ... in
    /// ConfigMap"; `envFrom` skips `binaryData` without a word).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub binary_keys: BTreeSet<String>,
    /// Keyed digests of the values of an immutable object, by key, to
    /// tell whether the proposed state changes one (which the API server
    /// refuses): empty for any other object. The key is drawn at random
    /// for each run, so a digest means nothing outside the process; never
    /// serialized.
    #[serde(skip)]
    pub value_digests: BTreeMap<String, u64>,
    /// `immutable: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub immutable: bool,
    /// A Secret's `type`, where the input gives it: a live Secret always
    /// does (`Opaque` if it was made without one), a manifest may, and so
    /// may an ExternalSecret (`spec.target.template.type`) or a
    /// SecretProviderClass (`spec.secretObjects[].type`); a SealedSecret's
    /// is its template's, `Opaque` if that gives none (its controller sets
    /// it). `None` for a ConfigMap, and for a Secret whose type the input
    /// leaves out: applied, such a manifest leaves the type the Secret has
    /// (and so does the External Secrets Operator), and a new one is
    /// `Opaque`. The API server refuses to change a Secret's type (the
    /// Secrets Store CSI driver sets a SecretProviderClass's only on the
    /// Secrets it creates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
    /// A Helm or Argo CD hook, if it is one: created before, with or after
    /// the rest of the change, or not by it at all, and perhaps deleted
    /// again once its hooks succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<Hook>,
    /// Its Argo CD sync wave (`argocd.argoproj.io/sync-wave`), if it is no
    /// hook (or an Argo CD `Sync` hook) and names one. Argo CD applies a wave, and waits for it to be
    /// healthy, before the next; within a wave, ConfigMaps and Secrets come
    /// before workloads. No wave is wave 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
    /// The object a controller makes it from, if it is not itself in the
    /// input but the Secret of a SealedSecret, an ExternalSecret, a
    /// cert-manager Certificate or a Secrets Store CSI driver
    /// SecretProviderClass (`SealedSecret/NAMESPACE/NAME`), with the
    /// key names that object gives. A real Secret of the same name in the same input replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
    /// The annotation that keeps it when [`Deletion::Prune`](crate::Deletion::Prune)
    /// would delete it, as the tools that prune do: Helm's
    /// `helm.sh/resource-policy: keep`, Argo CD's
    /// `argocd.argoproj.io/sync-options: Prune=false` (or `Prune=confirm`,
    /// which waits for a person). Deleting it by name still deletes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_on_prune: Option<String>,
}

/// [`ConfigObject`] as written, read with every field named: serde cannot
/// refuse unknown fields beside a flattened one, so the identity's three
/// fields are spelt out here.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlatObject {
    kind: ConfigKind,
    namespace: String,
    name: String,
    keys: BTreeSet<String>,
    #[serde(default)]
    binary_keys: BTreeSet<String>,
    #[serde(default)]
    immutable: bool,
    #[serde(default)]
    secret_type: Option<String>,
    #[serde(default)]
    hook: Option<Hook>,
    #[serde(default)]
    sync_wave: Option<i64>,
    #[serde(default)]
    made_by: Option<String>,
    #[serde(default)]
    kept_on_prune: Option<String>,
}

impl From<FlatObject> for ConfigObject {
    fn from(o: FlatObject) -> Self {
        Self {
            id: ObjectId {
                kind: o.kind,
                namespace: o.namespace,
                name: o.name,
            },
            keys: o.keys,
            binary_keys: o.binary_keys,
            value_digests: BTreeMap::new(),
            immutable: o.immutable,
            secret_type: o.secret_type,
            hook: o.hook,
            sync_wave: o.sync_wave,
            made_by: o.made_by,
            kept_on_prune: o.kept_on_prune,
        }
    }
}

impl ConfigObject {
    /// Whether reference `r` can read key `key` of it: a ConfigMap's
    /// `binaryData` key is there for a volume, not for `env` or `envFrom`.
    pub(crate) fn readable_by(&self, r: &Reference, key: &str) -> bool {
        self.keys.contains(key) && !(r.reads_data_only() && self.binary_keys.contains(key))
    }

    /// Whether applying it over a Secret that exists sets that Secret's
    /// type: not for one a SecretProviderClass makes, as the Secrets Store
    /// CSI driver only creates a Secret with that type and then patches its
    /// data.
    pub(crate) fn sets_type_in_place(&self) -> bool {
        !self
            .made_by
            .as_deref()
            .is_some_and(|m| m.starts_with("SecretProviderClass/"))
    }
}

/// A Helm or Argo CD hook (`helm.sh/hook`, `argocd.argoproj.io/hook`): a
/// resource that is not applied with the rest of the change, but created
/// when its phase comes, in its own order, and perhaps deleted again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    /// The annotation that makes it one, as `helm.sh/hook=pre-upgrade`.
    pub annotation: String,
    /// When the change creates it.
    pub phase: HookPhase,
    /// Its place among the hooks of its phase, lowest first:
    /// `helm.sh/hook-weight`, else `argocd.argoproj.io/sync-wave`, else 0.
    pub weight: i64,
    /// Ordered as Helm orders hooks of one weight: by name alone. (Argo CD
    /// creates the ConfigMaps and Secrets of a wave before its workloads.)
    pub helm: bool,
    /// The delete policy that deletes it once the hooks of its phase have
    /// succeeded (`helm.sh/hook-delete-policy=hook-succeeded`,
    /// `argocd.argoproj.io/hook-delete-policy=HookSucceeded`), if one does:
    /// a config object so deleted is there while those hooks run, and gone
    /// after the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_after: Option<String>,
}

/// When a change creates a [`Hook`], in the order of the phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookPhase {
    /// Before the rest of the change is applied: Helm `pre-install` /
    /// `pre-upgrade`, Argo CD `PreSync`. A workload that is one sees the
    /// state BEFORE the change (the current objects), plus the config
    /// objects that are hooks of this phase created before it.
    BeforeChange,
    /// With the rest of the change, in its sync waves: Argo CD `Sync`.
    WithChange,
    /// Once the rest of the change is applied and healthy: Helm
    /// `post-install` / `post-upgrade`, Argo CD `PostSync`. A workload of
    /// the change that reads a config object only such a hook brings
    /// cannot start until that hook runs, and Argo CD (or `helm --wait`)
    /// waits for the workload first.
    AfterChange,
    /// Not by an install, upgrade or sync at all: Helm `test`, `pre-delete`,
    /// `post-delete`, `pre-rollback`, `post-rollback` (or a hook type Helm
    /// does not know, which it skips), Argo CD `SyncFail`, `PostDelete` or
    /// `Skip`. A config object that is one is not there after the change.
    NotRun,
}

impl Hook {
    /// Whether a config object `object`, a hook named `object_name`, is
    /// created before a workload hook `self` named `name` runs: a hook of
    /// the same phase with a lower weight, or of the same weight and
    /// ordered first (by name where Helm orders either; Argo CD creates a
    /// wave's config objects first). Helm sorts a phase's hooks by kind
    /// (ConfigMaps and Secrets before workloads), then stably by weight
    /// and name: a config object named as the workload is created first.
    pub fn runs_after(&self, name: &str, object: &Hook, object_name: &str) -> bool {
        if object.phase != self.phase {
            return false;
        }
        match object.weight.cmp(&self.weight) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            // Either one ordered by Helm: by name (the stricter order),
            // and for one name by kind.
            std::cmp::Ordering::Equal => !(self.helm || object.helm) || object_name <= name,
        }
    }

    /// Whether a config object that is this hook is there after the
    /// change: not if the change does not create it, nor if it is
    /// deleted once its hooks succeed.
    pub fn kept_after(&self) -> bool {
        self.phase != HookPhase::NotRun && self.deleted_after.is_none()
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
    /// Every key is loaded (envFrom, a volume without `items`, the Secret
    /// of a volume plugin such as `csi.nodePublishSecretRef`).
    pub bulk: bool,
    /// `optional: true`.
    pub optional: bool,
    /// A `subPath` naming a file the volume does not project: its `items`
    /// list no path there (one renamed, say), so the container gets an
    /// empty directory where the file was. `key` is the file the subPath
    /// names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unprojected: bool,
}

/// The keys the kubelet reads an image pull secret's credentials from:
/// `.dockerconfigjson` (type `kubernetes.io/dockerconfigjson`) or the legacy
/// `.dockercfg` (type `kubernetes.io/dockercfg`). A pull secret without
/// either is skipped without a word, and the image is pulled without
/// credentials.
pub const PULL_SECRET_KEYS: [&str; 2] = [PULL_SECRET_TYPES[0].0, PULL_SECRET_TYPES[1].0];

/// Each of the [`PULL_SECRET_KEYS`] with the one Secret type the kubelet
/// reads it from. The API server requires that key of a Secret of that type.
pub(crate) const PULL_SECRET_TYPES: [(&str, &str); 2] = [
    (".dockerconfigjson", "kubernetes.io/dockerconfigjson"),
    (".dockercfg", "kubernetes.io/dockercfg"),
];

/// The volume types that name a Secret and hand the volume plugin every
/// key of it, as the end of a reference's site (`volumes[data].csi.
/// nodePublishSecretRef`).
pub(crate) const PLUGIN_SECRET_SITES: [&str; 9] = [
    "csi.nodePublishSecretRef",
    "cephfs.secretRef",
    "rbd.secretRef",
    "iscsi.secretRef",
    "cinder.secretRef",
    "flexVolume.secretRef",
    "storageos.secretRef",
    "scaleIO.secretRef",
    "azureFile.secretName",
];

impl Reference {
    /// Whether it reads a ConfigMap's `data` only: `env`
    /// (`configMapKeyRef`) and `envFrom` do, a volume reads `binaryData`
    /// too.
    pub(crate) fn reads_data_only(&self) -> bool {
        self.kind == ConfigKind::ConfigMap
            && (self.site.contains("configMapKeyRef") || self.site.starts_with("envFrom["))
    }

    /// The reference to pull secret `secret` that ServiceAccount `account`
    /// adds to every pod that runs as it.
    pub(crate) fn account_pull_secret(account: &str, secret: &str) -> Self {
        Self {
            container: None,
            site: format!("serviceAccount {account}.imagePullSecrets"),
            kind: ConfigKind::Secret,
            name: secret.to_owned(),
            key: None,
            bulk: false,
            optional: false,
            unprojected: false,
        }
    }

    /// Whether it names the Secret of a volume plugin (CSI, Ceph, Azure
    /// File, ...), which is handed every key of it.
    pub(crate) fn is_plugin_secret(&self) -> bool {
        self.kind == ConfigKind::Secret
            && self.container.is_none()
            && self.site.starts_with("volumes[")
            && PLUGIN_SECRET_SITES
                .iter()
                .any(|s| self.site.strip_suffix(s).is_some_and(|b| b.ends_with('.')))
    }

    /// Whether it names an image pull secret (`imagePullSecrets`, the
    /// pod's or its ServiceAccount's), whose [`PULL_SECRET_KEYS`] the
    /// kubelet reads.
    pub fn is_pull_secret(&self) -> bool {
        self.kind == ConfigKind::Secret
            && self.key.is_none()
            && !self.bulk
            && (self.site.starts_with("imagePullSecrets[")
                || self.site.ends_with(".imagePullSecrets"))
    }

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
    /// A Helm or Argo CD hook, if it is one: its references are then
    /// checked against the state when its phase runs (for a hook that runs
    /// before the change, the state before it), plus the config objects
    /// that are hooks of that phase created before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<Hook>,
    /// Its Argo CD sync wave, if it is no hook (or a `Sync` hook) and names one (see
    /// [`ConfigObject::sync_wave`]): its new pods start while the config
    /// objects of later waves are still as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
    /// The workload whose pod template its pods run, for one that has no
    /// template of its own: an Argo Rollouts `Rollout` with `spec.workloadRef`
    /// (a Deployment, a ReplicaSet or a PodTemplate). [`check`](crate::check)
    /// reads its references and ServiceAccount from that workload, found in
    /// the same state or, for a proposed one, in the current state when
    /// the proposed input leaves it as it is; one found in neither is input
    /// it cannot judge. Its own `references` are not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_from: Option<WorkloadId>,
    /// The annotation that keeps it when [`Deletion::Prune`](crate::Deletion::Prune)
    /// would delete it, as the tools that prune do: Helm's
    /// `helm.sh/resource-policy: keep`, Argo CD's
    /// `argocd.argoproj.io/sync-options: Prune=false` (or `Prune=confirm`,
    /// which waits for a person). Its pods then serve on, and are checked as any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_on_prune: Option<String>,
    /// Where it was read (set by the loader; `None` for one built in code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Place>,
}

fn default_service_account() -> String {
    "default".into()
}

/// A ServiceAccount's `imagePullSecrets` (names only): Kubernetes adds them
/// to every pod that runs as the account, as the account is when the pod
/// is admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAccount {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Secrets named in `imagePullSecrets`.
    pub image_pull_secrets: Vec<String>,
    /// A Helm or Argo CD hook, if it is one (as [`ConfigObject::hook`]): a
    /// proposed account that is one is in place for the pods of a hook of
    /// its phase created after it, and of the phases after its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<Hook>,
    /// Its Argo CD sync wave, if it is no hook (or an Argo CD `Sync` hook)
    /// and names one (as [`ConfigObject::sync_wave`]): a proposed account
    /// is in place for the pods of a workload of its wave or a later one
    /// (Argo CD applies a wave's ServiceAccounts before its workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
}

/// Where a workload was read: the file, the document in it (from 1) and
/// the line that document starts on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Place {
    /// The file as given (`-` for standard input).
    pub file: String,
    /// The document in the file, from 1.
    pub document: usize,
    /// The line the document starts on, from 1.
    pub line: usize,
}

/// A names-only inventory (the `inventory` command's output and the
/// `--inventory` input).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Inventory format version ([`Inventory::VERSION`]; [`check`] refuses
    /// any other).
    ///
    /// [`check`]: crate::check()
    pub version: u32,
    /// The objects.
    pub objects: Vec<ConfigObject>,
}

impl Inventory {
    /// The format version this build writes and reads.
    pub const VERSION: u32 = 1;

    /// Reads an inventory written by `ate-configguard inventory` (JSON),
    /// `source` naming it in errors. Refuses what is not one, naming the
    /// missing or unknown field (never a value), and another format
    /// version.
    ///
    /// # Errors
    ///
    /// [`InputError::Parse`](crate::InputError::Parse) for text that is not
    /// an inventory, [`InputError::Invalid`](crate::InputError::Invalid) for
    /// one of another format version.
    ///
    /// ```
    /// use ate_configguard::manifest::Inventory;
    ///
    /// let inv = Inventory::from_json(r#"{"version": 1, "objects": []}"#, "inv.json").unwrap();
    /// assert!(inv.objects.is_empty());
    /// let err = Inventory::from_json(r#"{"objects": []}"#, "inv.json").unwrap_err();
    /// assert!(err.to_string().contains("missing field `version`"), "{err}");
    /// let err = Inventory::from_json(r#"{"version": 2, "objects": []}"#, "inv.json").unwrap_err();
    /// assert!(err.to_string().contains("format version 2"), "{err}");
    /// ```
    pub fn from_json(text: &str, source: &str) -> Result<Self, crate::InputError> {
        let inventory: Self = serde_json::from_str(text).map_err(|e| {
            let (location, message) = crate::parse::json_error(&e);
            crate::InputError::Parse {
                file: source.into(),
                location,
                message: format!(
                    "not an inventory (see `ate-configguard inventory`): {}",
                    crate::parse::redact(&message)
                ),
            }
        })?;
        if inventory.version != Self::VERSION {
            return Err(crate::InputError::Invalid {
                at: source.into(),
                message: format!(
                    "inventory format version {} is not one this build reads (version {})",
                    inventory.version,
                    Self::VERSION
                ),
            });
        }
        Ok(inventory)
    }
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
    /// How many documents that gave an object, a workload or a
    /// ServiceAccount had no `metadata.namespace`, and so were read in
    /// [`LoadOptions::default_namespace`](crate::LoadOptions::default_namespace)
    /// (see [`unplaced_namespace`](crate::manifest::unplaced_namespace)).
    pub unplaced: usize,
    /// How many CustomResourceDefinitions were read: a state that holds
    /// some and no workload, where the other holds workloads, may be cut
    /// short (a chart's CRDs rendered and its templates not).
    pub crds: usize,
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
            unplaced,
            crds,
        } = other;
        self.crds += crds;
        self.objects.extend(objects);
        self.workloads.extend(workloads);
        self.notes.extend(notes);
        self.service_accounts.extend(service_accounts);
        self.unplaced += unplaced;
    }
}
