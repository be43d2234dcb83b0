//! Reading the parts of a Kubernetes object every kind shares out of its
//! parsed nodes: data keys, pod templates, containers and their env
//! references, typed decoding with the path of an unknown field, and the
//! workload a template belongs to.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodSpec;
use serde::de::DeserializeOwned;

use super::names::valid_key;
use super::options::bad;
use super::pods::pod_references;
use crate::error::InputError;
use crate::model::{Manifests, Workload, WorkloadId};
use crate::parse::{DATA_LIST, Node};

/// The key names the items of a `data` list (read as [`DATA_LIST`]) give in
/// `field`: an ExternalSecret's `secretKey`, a SecretProviderClass's `key`.
/// A list that is none, or an item without the field, is unusable input,
/// named by `what`.
pub(super) fn data_list_names(
    list: &Node,
    field: &str,
    what: &str,
    at: &str,
) -> Result<BTreeSet<String>, InputError> {
    let Some(Node::Seq(items)) = list.get(DATA_LIST) else {
        return Err(bad(at, format!("{what} is not a list")));
    };
    items
        .iter()
        .enumerate()
        .map(|(j, item)| {
            let name = item
                .name_at(field)
                .ok_or_else(|| bad(at, format!("{what}[{j}] without a {field}")))?;
            valid_key(name, &format!("{what}[{j}].{field}"), at)?;
            Ok(name.to_owned())
        })
        .collect()
}

/// The workload whose pod template an allow-listed kind runs instead of
/// one of its own, as an Argo Rollout's `spec.workloadRef` names it (a
/// Deployment, a ReplicaSet or a PodTemplate, in the Rollout's namespace),
/// or `None` without one. One that names another kind, or leaves out its
/// name, is unusable input.
pub(super) fn workload_ref(
    doc: &Node,
    namespace: &str,
    at: &str,
) -> Result<Option<WorkloadId>, InputError> {
    let reference = match doc.get("spec").and_then(|s| s.get("workloadRef")) {
        None | Some(Node::Null) => return Ok(None),
        Some(r) => r,
    };
    let api = reference.name_at("apiVersion").unwrap_or("");
    let kind = match (api, reference.name_at("kind")) {
        ("apps/v1", Some(kind @ ("Deployment" | "ReplicaSet")))
        | ("v1", Some(kind @ "PodTemplate")) => kind,
        (_, kind) => {
            return Err(bad(
                at,
                format!(
                    "spec.workloadRef names {} {:?}: only a Deployment or ReplicaSet (apps/v1) \
                     or a PodTemplate (v1) is a pod template this tool can read",
                    kind.unwrap_or("no kind"),
                    api
                ),
            ));
        }
    };
    let name = reference
        .name_at("name")
        .ok_or_else(|| bad(at, "spec.workloadRef without a name"))?;
    Ok(Some(WorkloadId {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }))
}

/// The apiVersions read for a kind this guard understands (`None` for any
/// other kind).
pub(super) fn api_versions(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "ConfigMap"
        | "Secret"
        | "ServiceAccount"
        | "Pod"
        | "PodTemplate"
        | "ReplicationController" => &["v1"],
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => &["apps/v1"],
        "Job" | "CronJob" => &["batch/v1"],
        // Not `Ingress`: read from any group (its TLS secrets are only
        // reported), as a kind of that name from another group is no
        // reason to refuse the input.
        _ => return None,
    })
}

pub(super) fn kustomize_source(at: &str, kind: &str) -> InputError {
    bad(
        at,
        format!(
            "a kustomize {kind} is a source, not a manifest (its generators and patches are not \
             applied here); check what it renders: `kubectl kustomize DIR > FILE`"
        ),
    )
}

pub(super) fn find_templates_at(node: &Node, path: &str, out: &mut Vec<(String, Node)>) {
    if let Node::Map(entries) = node {
        for (k, v) in entries {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if k == "template"
                && let Some(spec) = v.get("spec")
                && matches!(spec.get("containers"), Some(Node::Seq(_)))
            {
                out.push((here, spec.clone()));
            } else {
                find_templates_at(v, &here, out);
            }
        }
    } else if let Node::Seq(items) = node {
        for (i, item) in items.iter().enumerate() {
            find_templates_at(item, &format!("{path}[{i}]"), out);
        }
    }
}

/// The annotation a service-account token Secret names its account by.
pub(super) const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";

/// Unusable input if a Secret of type `secret_type` is a service-account
/// token Secret whose `annotations` (under `meta`) do not name its account:
/// the API server refuses it, so the control plane never writes its keys.
/// (Only the annotation's presence is read, not its value.)
pub(super) fn token_names_account(
    secret_type: Option<&str>,
    meta: Option<&Node>,
    what: &str,
    at: &str,
) -> Result<(), InputError> {
    let named = meta
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(SERVICE_ACCOUNT_NAME))
        .is_some();
    if secret_type == Some(SERVICE_ACCOUNT_TOKEN) && !named {
        return Err(bad(
            at,
            format!(
                "{what} is of type {SERVICE_ACCOUNT_TOKEN} without the {SERVICE_ACCOUNT_NAME} \
                 annotation: the API server refuses it, so it never holds the keys the \
                 control plane writes into one (token, ca.crt, namespace)"
            ),
        ));
    }
    Ok(())
}

/// The type of a Secret holding a service account's token.
pub(super) const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// Adds to a Secret of type `secret_type` the keys the control plane
/// writes into it: a service-account token Secret is declared with no data
/// and holds `ca.crt`, `namespace` and `token` once it exists.
pub(super) fn add_control_plane_keys(secret_type: Option<&str>, keys: &mut BTreeSet<String>) {
    if secret_type == Some(SERVICE_ACCOUNT_TOKEN) {
        keys.extend(["ca.crt", "namespace", "token"].map(str::to_owned));
    }
}

/// Every container (a map with an `image`) and every entry of a `volumes`
/// list under `node`, outside pod templates' own shape: for an allowed kind
/// that runs containers without a pod template.
pub(super) fn find_containers(node: &Node, containers: &mut Vec<Node>, volumes: &mut Vec<Node>) {
    match node {
        Node::Map(entries) => {
            if matches!(node.get("image"), Some(Node::String(_))) {
                containers.push(node.clone());
                return;
            }
            for (k, v) in entries {
                match (k.as_str(), v) {
                    ("volumes", Node::Seq(items)) => volumes.extend(items.iter().cloned()),
                    _ => find_containers(v, containers, volumes),
                }
            }
        }
        Node::Seq(items) => {
            for i in items {
                find_containers(i, containers, volumes);
            }
        }
        _ => {}
    }
}

/// Where under `node` a container reads a ConfigMap or Secret through its
/// environment (`valueFrom.configMapKeyRef` / `secretKeyRef`, `envFrom`),
/// as a path, if anywhere: what an unknown kind must not hide.
pub(super) fn env_reference(node: &Node, path: &str) -> Option<String> {
    match node {
        Node::Map(entries) => entries.iter().find_map(|(k, v)| {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            let is_ref = match k.as_str() {
                "valueFrom" => {
                    v.get("configMapKeyRef").is_some() || v.get("secretKeyRef").is_some()
                }
                "envFrom" => matches!(v, Node::Seq(items) if !items.is_empty()),
                _ => false,
            };
            if is_ref {
                Some(here)
            } else {
                env_reference(v, &here)
            }
        }),
        Node::Seq(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| env_reference(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// Decodes a k8s-openapi type, failing closed on ignored reference fields.
pub(crate) fn typed<T: DeserializeOwned>(
    node: Node,
    at: &str,
    prefix: &str,
) -> Result<T, InputError> {
    let mut ignored = Vec::new();
    let value = node.into_json();
    let mut track = serde_path_to_error::Track::new();
    let result: Result<T, _> = serde_ignored::deserialize(
        serde_path_to_error::Deserializer::new(value, &mut track),
        |path| ignored.push(shown_path(&path)),
    );
    let decoded = result.map_err(|e| {
        let inner = shown_error_path(&track.path());
        let at_field = if inner.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}.{inner}")
        };
        bad(
            at,
            format!("{at_field}: {}", crate::parse::redact(&e.to_string())),
        )
    })?;
    for path in ignored {
        let lower = path.to_ascii_lowercase();
        let structural = [
            "env",
            "envfrom",
            "volumes",
            "projected",
            "sources",
            "volumemounts",
            "imagepullsecrets",
        ]
        .iter()
        .any(|seg| lower.split('.').any(|s| s.split('[').next() == Some(*seg)));
        let looks_like_ref = ["secret", "configmap", "keyref", "config_map"]
            .iter()
            .any(|w| lower.contains(w));
        if structural || looks_like_ref {
            return Err(bad(
                at,
                format!(
                    "unknown field {prefix}.{path}: it may reference config this tool cannot check"
                ),
            ));
        }
    }
    Ok(decoded)
}

/// A path serde_ignored reports, as a manifest's field path: map keys
/// joined with dots, list items as `[i]`, and nothing for the layers of
/// the Rust types (an `Option`, a newtype), which serde_ignored shows as
/// `?`.
pub(super) fn shown_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", shown_path(parent)),
        Path::Map { parent, key } => {
            let parent = shown_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => shown_path(parent),
    }
}

/// serde_path_to_error's path, likewise without its `?` segments.
pub(super) fn shown_error_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

pub(super) fn push_workload(
    out: &mut Manifests,
    kind: &str,
    namespace: String,
    name: String,
    spec: PodSpec,
    dormant: Option<String>,
    at: &str,
) -> Result<(), InputError> {
    out.workloads
        .push(workload(kind, namespace, name, &spec, dormant, at)?);
    Ok(())
}

/// A workload running `spec`, with every reference it makes.
pub(super) fn workload(
    kind: &str,
    namespace: String,
    name: String,
    spec: &PodSpec,
    dormant: Option<String>,
    at: &str,
) -> Result<Workload, InputError> {
    let references = pod_references(spec).map_err(|m| bad(at, format!("{kind} {name}: {m}")))?;
    // `serviceAccount` is the deprecated spelling Kubernetes still reads.
    let service_account = spec
        .service_account_name
        .as_ref()
        .or(spec.service_account.as_ref())
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| "default".into());
    Ok(Workload {
        id: WorkloadId {
            kind: kind.to_owned(),
            namespace,
            name,
        },
        references,
        dormant,
        service_account,
        hook: None,
        sync_wave: None,
        template_from: None,
        kept_on_prune: None,
        source: None,
    })
}

/// Why a workload runs no pod and starts none by itself, read from what a
/// live object (`kubectl get -o yaml`) says about it; `None` if it runs or
/// may run pods. Only states nothing but an operator's action undoes:
///
/// - a Pod whose phase is `Succeeded` or `Failed` (its containers never
///   start again);
/// - a Job with a `Complete` or `Failed` condition (it creates no more
///   pods);
/// - a ReplicaSet at 0 replicas controlled by a Deployment: an old
///   revision, which only a rollback scales up again.
///
/// Anything else counts as serving, including a Deployment or StatefulSet
/// at 0 replicas (an autoscaler such as KEDA may scale it up at any time)
/// and a suspended CronJob.
pub(super) fn dormant(kind: &str, doc: &Node) -> Option<String> {
    let status = |field: &str| doc.get("status").and_then(|s| s.get(field));
    match kind {
        "Pod" => {
            let phase = status("phase")?.as_str()?;
            matches!(phase, "Succeeded" | "Failed")
                .then(|| format!("a finished Pod (phase {phase})"))
        }
        "Job" => {
            let Node::Seq(conditions) = status("conditions")? else {
                return None;
            };
            conditions.iter().find_map(|c| {
                let kind = c.get("type")?.as_str()?;
                let finished = matches!(kind, "Complete" | "Failed")
                    && c.get("status")?.as_str() == Some("True");
                finished.then(|| format!("a finished Job (condition {kind})"))
            })
        }
        "ReplicaSet" => {
            let Node::Number(replicas) = doc.get("spec")?.get("replicas")? else {
                return None;
            };
            let Node::Seq(owners) = doc.get("metadata")?.get("ownerReferences")? else {
                return None;
            };
            let deployment = owners.iter().find_map(|o| {
                let controller = matches!(o.get("controller"), Some(Node::Bool(true)));
                (controller && o.get("kind")?.as_str() == Some("Deployment"))
                    .then(|| o.get("name").and_then(Node::as_str).unwrap_or("?"))
            })?;
            (replicas.as_u64() == Some(0)).then(|| {
                format!(
                    "an old revision of Deployment {deployment} (0 replicas), which only a rollback starts again"
                )
            })
        }
        _ => None,
    }
}
