//! The references a resource makes outside a pod template: the Secrets
//! and ConfigMaps an operator mounts or reads for it (a Prometheus's
//! `spec.secrets`, an Alertmanager's config Secret, a ServiceMonitor's
//! basic-auth password), read into a pod spec of their own so the check
//! treats them as it treats a pod's.
//!
//! Rules, for the prometheus-operator kinds and for allow-listed unknown
//! kinds alike, under `spec`:
//! - `containers`, `initContainers`, `volumes` and `imagePullSecrets` at
//!   the top of `spec` are the pod's own;
//! - `secrets` / `configMaps`: lists of names, each mounted whole;
//! - a map of `name` and `key` (a key selector, `optional` allowed) reads
//!   one key: of a ConfigMap under a key naming a ConfigMap
//!   (`configMap`, `*ConfigMap*`), else of a Secret;
//! - a map of `secretName` and `key`, `password` and/or `certificate`
//!   (Strimzi's selectors) reads those keys of that Secret;
//! - a key naming a Secret or a ConfigMap (`secretName`, `configSecret`,
//!   `existingSecret`, `*SecretRef`, `*ConfigMapRef`, `secret`, ...) whose
//!   value is a name, or a map holding only a `name`, reads it whole; so
//!   does ceph-csi's `imageSet: {name}` (a ConfigMap).

use crate::parse::Node;

/// The kinds of prometheus-operator (group `monitoring.coreos.com`)
/// read natively: those that run pods and those that name Secrets the
/// operator reads for Prometheus's or Alertmanager's configuration.
pub(crate) const MONITORING_KINDS: [&str; 10] = [
    "Prometheus",
    "PrometheusAgent",
    "Alertmanager",
    "ThanosRuler",
    "ServiceMonitor",
    "PodMonitor",
    "Probe",
    "ScrapeConfig",
    "AlertmanagerConfig",
    "PrometheusRule",
];

/// prometheus-operator's group.
pub(crate) const MONITORING_GROUP: &str = "monitoring.coreos.com";

/// What the walk found.
#[derive(Default)]
pub(crate) struct References {
    containers: Vec<Node>,
    init_containers: Vec<Node>,
    volumes: Vec<Node>,
    image_pull_secrets: Vec<Node>,
    /// Key reads, as env entries of the synthetic container.
    env: Vec<Node>,
    /// Where the first reference is, for an error naming it.
    pub(crate) first: Option<String>,
}

impl References {
    /// Whether anything names a Secret or ConfigMap.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn note(&mut self, path: &str) {
        if self.first.is_none() {
            self.first = Some(path.to_owned());
        }
    }

    /// A whole-object reference at `path`.
    fn whole(&mut self, path: &str, config_map: bool, name: &str, optional: bool) {
        self.note(path);
        let source = if config_map {
            (
                "configMap",
                map([
                    ("name", Node::String(name.to_owned())),
                    ("optional", Node::Bool(optional)),
                ]),
            )
        } else {
            (
                "secret",
                map([
                    ("secretName", Node::String(name.to_owned())),
                    ("optional", Node::Bool(optional)),
                ]),
            )
        };
        self.volumes.push(map([
            ("name", Node::String(path.to_owned())),
            (source.0, source.1),
        ]));
    }

    /// A key read at `path`.
    fn key(&mut self, path: &str, config_map: bool, name: &str, key: &str, optional: bool) {
        self.note(path);
        let selector = map([
            ("name", Node::String(name.to_owned())),
            ("key", Node::String(key.to_owned())),
            ("optional", Node::Bool(optional)),
        ]);
        let source = if config_map {
            "configMapKeyRef"
        } else {
            "secretKeyRef"
        };
        self.env.push(map([
            ("name", Node::String(path.to_owned())),
            ("valueFrom", map([(source, selector)])),
        ]));
    }

    /// A required read of `key` in Secret `name` (an Alertmanager's
    /// configuration, which the operator replaces by an empty one when it
    /// is missing: alerts would go nowhere).
    pub(crate) fn require_secret_key(&mut self, path: &str, name: &str, key: &str) {
        self.key(path, false, name, key, false);
    }

    /// [`into_pod_spec`](Self::into_pod_spec) where anything names a
    /// Secret or ConfigMap.
    pub(crate) fn into_pod_spec_if_any(self) -> Option<Node> {
        if self.is_empty() {
            return None;
        }
        self.into_pod_spec()
    }

    /// The pod spec these references make: the pod's own containers and
    /// volumes, and one container `references` reading every key.
    /// `None` when there is nothing to read.
    pub(crate) fn into_pod_spec(self) -> Option<Node> {
        if self.first.is_none() && self.containers.is_empty() && self.volumes.is_empty() {
            return None;
        }
        let mut containers = self.containers;
        if !self.env.is_empty() || containers.is_empty() {
            containers.push(map([
                ("name", Node::String("references".to_owned())),
                ("env", Node::Seq(self.env)),
            ]));
        }
        let mut spec = vec![("containers".to_owned(), Node::Seq(containers))];
        if !self.init_containers.is_empty() {
            spec.push(("initContainers".to_owned(), Node::Seq(self.init_containers)));
        }
        if !self.volumes.is_empty() {
            spec.push(("volumes".to_owned(), Node::Seq(self.volumes)));
        }
        if !self.image_pull_secrets.is_empty() {
            spec.push((
                "imagePullSecrets".to_owned(),
                Node::Seq(self.image_pull_secrets),
            ));
        }
        Some(Node::Map(spec))
    }
}

fn map<const N: usize>(entries: [(&str, Node); N]) -> Node {
    Node::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// Every reference under `doc`'s `spec` (see the module's rules).
pub(crate) fn references(doc: &Node) -> References {
    let mut out = References::default();
    let Some(Node::Map(entries)) = doc.get("spec") else {
        return out;
    };
    for (k, v) in entries {
        let path = format!("spec.{k}");
        match (k.as_str(), v) {
            ("containers", Node::Seq(items)) => {
                if let Some(at) = items.iter().position(names_config) {
                    out.note(&format!("{path}[{at}]"));
                }
                out.containers.extend(items.iter().cloned());
            }
            ("initContainers", Node::Seq(items)) => {
                if let Some(at) = items.iter().position(names_config) {
                    out.note(&format!("{path}[{at}]"));
                }
                out.init_containers.extend(items.iter().cloned());
            }
            ("volumes", Node::Seq(items)) => {
                if let Some(at) = items.iter().position(names_config) {
                    out.note(&format!("{path}[{at}]"));
                }
                out.volumes.extend(items.iter().cloned());
            }
            ("imagePullSecrets", Node::Seq(items)) => {
                if !items.is_empty() {
                    out.note(&path);
                }
                out.image_pull_secrets.extend(items.iter().cloned());
            }
            _ => walk(k, v, &path, &mut out),
        }
    }
    out
}

/// Whether anything under `node` names a Secret or a ConfigMap (for the
/// pod's own containers and volumes, whose references the pod spec reads).
fn names_config(node: &Node) -> bool {
    let mut probe = References::default();
    walk("", node, "", &mut probe);
    !probe.is_empty() || pod_reference(node)
}

/// A pod's own ways of naming config: `valueFrom`, `envFrom`, volume
/// sources, projections.
fn pod_reference(node: &Node) -> bool {
    match node {
        Node::Map(entries) => entries.iter().any(|(k, v)| {
            matches!(
                k.as_str(),
                "secretKeyRef" | "configMapKeyRef" | "secretRef" | "configMapRef" | "envFrom"
            ) || ((k == "secret" || k == "configMap") && matches!(v, Node::Map(_)))
                || pod_reference(v)
        }),
        Node::Seq(items) => items.iter().any(pod_reference),
        _ => false,
    }
}

fn lower(key: &str) -> String {
    key.to_ascii_lowercase()
}

/// Whether `key` names a ConfigMap.
fn names_config_map(key: &str) -> bool {
    lower(key).contains("configmap")
}

/// Whether `key` names a Secret or a ConfigMap whole, given a name.
fn names_object(key: &str) -> bool {
    let k = lower(key);
    k == "secret"
        || k == "configmap"
        || k == "configsecret"
        || k == "existingsecret"
        || k.ends_with("secretname")
        || k.ends_with("secretref")
        || k.ends_with("configmapname")
        || k.ends_with("configmapref")
}

/// A key selector: `name` and `key` strings, perhaps `optional`, nothing
/// else.
fn selector(node: &Node) -> Option<(&str, &str, bool)> {
    let Node::Map(entries) = node else {
        return None;
    };
    let name = node.get("name")?.as_str()?;
    let key = node.get("key")?.as_str()?;
    let optional = matches!(node.get("optional"), Some(Node::Bool(true)));
    let only = entries
        .iter()
        .all(|(k, _)| matches!(k.as_str(), "name" | "key" | "optional"));
    only.then_some((name, key, optional))
}

/// The fields of a `{secretName, ...}` selector that name a key of that
/// Secret (Strimzi's `{secretName, key}`, `{secretName, password}`,
/// `{secretName, certificate, key}`).
const SECRET_NAME_KEY_FIELDS: [&str; 3] = ["key", "password", "certificate"];

/// A Secret key selector keyed by `secretName`: the Secret's name and the
/// keys it reads (each field of [`SECRET_NAME_KEY_FIELDS`] it holds), with
/// nothing else beside them but `optional`. `None` for another shape (one
/// with only `secretName` reads the Secret whole).
fn secret_name_selector(node: &Node) -> Option<(&str, Vec<&str>, bool)> {
    let Node::Map(entries) = node else {
        return None;
    };
    let name = node.get("secretName")?.as_str()?;
    let keys: Vec<&str> = SECRET_NAME_KEY_FIELDS
        .iter()
        .filter_map(|f| node.get(f)?.as_str())
        .collect();
    let only = entries.iter().all(|(k, v)| {
        k == "secretName"
            || k == "optional"
            || (SECRET_NAME_KEY_FIELDS.contains(&k.as_str()) && v.as_str().is_some())
    });
    let optional = matches!(node.get("optional"), Some(Node::Bool(true)));
    (only && !keys.is_empty()).then_some((name, keys, optional))
}

/// Fields that name a ConfigMap whole by a `{name}` map without saying
/// so in their own name: ceph-csi's `imageSet` (the ConfigMap of the
/// images its operator deploys).
const CONFIG_MAP_FIELDS: [&str; 1] = ["imageset"];

fn walk(key: &str, node: &Node, path: &str, out: &mut References) {
    if let Some((name, k, optional)) = selector(node) {
        out.key(path, names_config_map(key), name, k, optional);
        return;
    }
    // One key (or a few) of a Secret by name, not the Secret whole: a
    // key removed beside them is no break, and retiring one they read
    // must not waive it.
    if let Some((name, keys, optional)) = secret_name_selector(node) {
        for k in keys {
            out.key(path, false, name, k, optional);
        }
        return;
    }
    if CONFIG_MAP_FIELDS.contains(&lower(key).as_str())
        && let Some(name) = node.get("name").and_then(Node::as_str)
        && node.get("key").is_none()
    {
        out.whole(
            path,
            true,
            name,
            matches!(node.get("optional"), Some(Node::Bool(true))),
        );
        return;
    }
    if names_object(key) {
        let optional = matches!(node.get("optional"), Some(Node::Bool(true)));
        let name = match node {
            Node::String(name) if !name.is_empty() => Some(name.as_str()),
            // `{name}` (a LocalObjectReference), or a volume-like source
            // (`configMap: {name, items}`); one with a `key` is a selector
            // of another shape, walked below.
            Node::Map(_) if node.get("key").is_none() => node.get("name").and_then(Node::as_str),
            _ => None,
        };
        if let Some(name) = name {
            out.whole(path, names_config_map(key), name, optional);
            return;
        }
    }
    let list = lower(key);
    if (list == "secrets" || list == "configmaps")
        && let Node::Seq(items) = node
    {
        for (i, item) in items.iter().enumerate() {
            let name = item
                .as_str()
                .or_else(|| item.get("name").and_then(Node::as_str));
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                out.whole(&format!("{path}[{i}]"), list == "configmaps", name, false);
            }
        }
        return;
    }
    match node {
        Node::Map(entries) => {
            for (k, v) in entries {
                let here = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(k, v, &here, out);
            }
        }
        Node::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(key, v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The references under `doc`'s `spec` outside its pod templates (a
/// `template` holding `spec.containers`, which is read as a pod of its
/// own): an Argo AnalysisTemplate's `args[].valueFrom.secretKeyRef`
/// beside its metric jobs' templates.
pub(crate) fn references_outside_templates(doc: &Node) -> References {
    let mut out = References::default();
    if let Some(spec) = doc.get("spec") {
        walk("spec", &without_templates(spec), "spec", &mut out);
    }
    out
}

fn without_templates(node: &Node) -> Node {
    match node {
        Node::Map(entries) => Node::Map(
            entries
                .iter()
                .filter(|(k, v)| {
                    !(k == "template"
                        && matches!(
                            v.get("spec").and_then(|s| s.get("containers")),
                            Some(Node::Seq(_))
                        ))
                })
                .map(|(k, v)| (k.clone(), without_templates(v)))
                .collect(),
        ),
        Node::Seq(items) => Node::Seq(items.iter().map(without_templates).collect()),
        other => other.clone(),
    }
}
