//! From documents to the names-only model: config objects, workloads and
//! every reference site of their pod templates.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodSpec;
use serde::de::DeserializeOwned;

use crate::error::InputError;
use crate::model::{ConfigObject, Manifests, PULL_SECRET_TYPES, Workload, WorkloadId};
use crate::operator;
use crate::parse::{DATA_LIST, Node};

mod consistency;
mod kinds;
mod makers;
mod names;
mod order;
mod pods;
mod prune;
mod text;
mod typed;

use makers::{GATEWAY_API, PROXY_GROUPS};
pub(crate) use names::meta_names;
pub(crate) use names::{
    NOT_A_NAMESPACE, is_key, is_namespace_name, namespace_left_out, object_name_ok,
};
use names::{generate_name, valid_key};
use order::order;
pub use pods::pod_references;
use prune::not_pruned;
pub use prune::parse_selector;
pub(crate) use text::{EMPTY_STATE, document_lines, manifest_files};
pub use text::{decode_text, load_paths, load_str, read_text};

/// How to read manifests.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Namespace for manifests that name none, or name `""` (default
    /// `default`), as kubectl's `-n` and Helm's release namespace place
    /// them. It must be a namespace name (an RFC 1123 label); another is
    /// an input error for the first manifest that names none.
    pub default_namespace: String,
    /// Kinds not built in whose pod templates (`template.spec`) are read
    /// anyway, or, for a kind without one (an Argo `Workflow`), every
    /// container and `volumes` list in it, as one pod's: a kind of any
    /// group (`Rollout`), or of one group only (`Rollout.argoproj.io`,
    /// `Service.serving.knative.dev`). One that runs another workload's
    /// pod template instead (an Argo Rollout's `spec.workloadRef`) is read
    /// as running it ([`Workload::template_from`]). Any other unknown kind
    /// that carries a pod template, runs another's, or whose containers
    /// read a ConfigMap or Secret through their environment, is an input
    /// error.
    pub allow_kinds: BTreeSet<String>,
    /// The label selector of a prune (`kubectl apply --prune -l`): an
    /// object whose labels do not match is never pruned. Each term is a
    /// label that must be present (`(key, None)`) or equal (`(key,
    /// Some(value))`); empty, every object the applier owns may be.
    /// [`parse_selector`] reads `app=web,tier`.
    pub prune_selector: Vec<(String, Option<String>)>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            default_namespace: "default".into(),
            allow_kinds: BTreeSet::new(),
            prune_selector: Vec::new(),
        }
    }
}

pub(crate) fn bad(at: &str, message: impl Into<String>) -> InputError {
    InputError::Invalid {
        at: at.to_owned(),
        message: message.into(),
    }
}

fn load_doc(
    mut doc: Node,
    at: &str,
    options: &LoadOptions,
    out: &mut Manifests,
) -> Result<(), InputError> {
    if !matches!(doc, Node::Map(_)) {
        return Err(bad(at, "a document must be an object"));
    }
    let kind = doc
        .get("kind")
        .and_then(Node::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            // A kustomization.yaml may leave out its kind and apiVersion.
            let kustomize = [
                "resources",
                "configMapGenerator",
                "secretGenerator",
                "patches",
                "components",
            ]
            .iter()
            .any(|k| doc.get(k).is_some());
            if kustomize {
                kustomize_source(at, "Kustomization")
            } else if ["name", "version"].iter().all(|k| doc.get(k).is_some())
                && doc
                    .get("apiVersion")
                    .and_then(Node::as_str)
                    .is_some_and(|v| matches!(v, "v1" | "v2"))
            {
                bad(
                    at,
                    "missing kind: this is a Helm chart's Chart.yaml, not a manifest: give what \
                     `helm template` renders from the chart",
                )
            } else {
                bad(
                    at,
                    "missing kind: every document must be a Kubernetes object; other YAML in \
                     the path given (a chart's values.yaml, a CI workflow) is unusable input: \
                     give the manifests alone",
                )
            }
        })?
        .to_owned();
    let api = doc
        .get("apiVersion")
        .and_then(Node::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad(at, "missing apiVersion"))?
        .to_owned();
    let expect_api = |wanted: &[&str]| -> Result<(), InputError> {
        if wanted.contains(&api.as_str()) {
            Ok(())
        } else {
            Err(bad(
                at,
                format!(
                    "{kind} with unsupported apiVersion {api} (expected {})",
                    wanted.join(" or ")
                ),
            ))
        }
    };
    // A kind of a name this guard reads but from a group that is not
    // Kubernetes' own (Volcano's `batch.volcano.sh` `Job`, say) is a custom
    // resource: read as any unknown kind, so `--allow-kind` can name it. An
    // older version of the Kubernetes group itself stays an input error.
    let group = api.rsplit_once('/').map_or("", |(group, _)| group);
    let custom = |kind: &str| {
        api_versions(kind).is_some_and(|versions| !versions.contains(&api.as_str()))
            && !matches!(group, "" | "apps" | "batch" | "extensions")
    };
    // A typed list (`DeploymentList`, ...), as the API server answers a
    // list request: its items may leave out their kind and apiVersion.
    let typed_list = kind
        .strip_suffix("List")
        .filter(|element| api_versions(element).is_some() && !custom(element));
    if kind == "List" || typed_list.is_some() {
        // A `List` may hold objects of any group; it is `v1` itself.
        expect_api(typed_list.and_then(api_versions).unwrap_or(&["v1"]))?;
        let Some(Node::Seq(items)) = doc.take_path(&["items"]) else {
            return Err(bad(at, format!("{kind} without an items list")));
        };
        for (i, mut item) in items.into_iter().enumerate() {
            let item_at = format!("{at} item {}", i + 1);
            if let Some(element) = typed_list {
                match item.get("kind") {
                    None | Some(Node::Null) => item.set("kind", Node::String(element.to_owned())),
                    Some(Node::String(k)) if k == element => {}
                    Some(other) => {
                        return Err(bad(
                            &item_at,
                            format!(
                                "a {kind} item must be a {element}, not {}",
                                other.as_str().unwrap_or("a non-string kind")
                            ),
                        ));
                    }
                }
                if matches!(item.get("apiVersion"), None | Some(Node::Null)) {
                    item.set("apiVersion", Node::String(api.clone()));
                }
            }
            load_doc(item, &item_at, options, out)?;
        }
        return Ok(());
    }
    if kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io" {
        out.crds += 1;
    }
    let custom_kind = custom(&kind);
    if let Some(versions) = api_versions(&kind).filter(|_| !custom_kind) {
        expect_api(versions)?;
    }
    // A custom resource matches none of the known kinds' arms.
    let known_kind = if custom_kind { "" } else { kind.as_str() };
    let mut order = order(&doc, at)?;
    if order.kept_on_prune.is_none() {
        order.kept_on_prune = not_pruned(&doc, options);
    }
    let before = (
        out.workloads.len(),
        out.objects.len(),
        out.service_accounts.len(),
    );
    let (workloads_before, objects_before, accounts_before) = before;
    // Cluster-scoped: it names the namespaces of what it stands for.
    let placed = kind == "ClusterExternalSecret"
        || !namespace_left_out(doc.get("metadata").and_then(|m| m.get("namespace")));
    let cx = kinds::Cx {
        at,
        kind: &kind,
        api: &api,
        group,
        custom_kind,
        options,
    };
    match known_kind {
        // Named by the API server when it is created, so no manifest can
        // name it: nothing reads it, and nothing it holds can go missing.
        "ConfigMap" | "Secret" if generate_name(&doc).is_some() => {}
        "ConfigMap" | "Secret" => kinds::config_object(cx, &doc, out)?,
        "Pod" => kinds::pod(cx, &mut doc, out)?,
        "PodTemplate"
        | "ReplicationController"
        | "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "CronJob" => kinds::templated(cx, &mut doc, out)?,
        "ServiceAccount" => kinds::service_account(cx, &doc, out)?,
        "Ingress" => kinds::ingress(cx, &doc, out)?,
        "SealedSecret" if group == "bitnami.com" => kinds::sealed_secret(cx, &doc, out)?,
        "Certificate" if group == "cert-manager.io" => kinds::certificate(cx, &doc, out)?,
        "ExternalSecret" if group == "external-secrets.io" => {
            kinds::external_secret_doc(cx, &doc, out)?
        }
        "SecretProviderClass" if group == "secrets-store.csi.x-k8s.io" => {
            kinds::secret_provider_class(cx, &doc, out)?
        }
        "ClusterExternalSecret" if group == "external-secrets.io" => {
            kinds::cluster_external_secret(cx, &doc, out)?
        }
        _ if group == GATEWAY_API => kinds::gateway(cx, &doc, out)?,
        _ if PROXY_GROUPS.contains(&group) => kinds::proxy(cx, &doc, out)?,
        _ if group == operator::MONITORING_GROUP
            && operator::MONITORING_KINDS.contains(&kind.as_str()) =>
        {
            kinds::monitoring(cx, &doc, out)?
        }
        _ if options.allow_kinds.contains(&kind)
            || (!group.is_empty() && options.allow_kinds.contains(&format!("{kind}.{group}"))) =>
        {
            kinds::allowed(cx, &doc, out)?
        }
        _ if api.starts_with("kustomize.config.k8s.io/") => {
            return Err(kustomize_source(at, &kind));
        }
        _ => kinds::unknown(cx, &doc)?,
    }
    let after = (
        out.workloads.len(),
        out.objects.len(),
        out.service_accounts.len(),
    );
    if !placed && after != before {
        out.unplaced += 1;
    }
    for w in &mut out.workloads[workloads_before..] {
        w.hook.clone_from(&order.hook);
        w.sync_wave = order.sync_wave;
        w.kept_on_prune.clone_from(&order.kept_on_prune);
    }
    for o in &mut out.objects[objects_before..] {
        typed_keys(o, at)?;
        o.hook.clone_from(&order.hook);
        o.sync_wave = order.sync_wave;
        o.kept_on_prune.clone_from(&order.kept_on_prune);
    }
    for a in &mut out.service_accounts[accounts_before..] {
        a.hook.clone_from(&order.hook);
        a.sync_wave = order.sync_wave;
    }
    Ok(())
}

/// The keys the API server requires of a Secret of a type other than a
/// pull secret's ([`PULL_SECRET_TYPES`]); it refuses one without them, and
/// the Secret keeps what it had. (A `kubernetes.io/basic-auth` Secret needs
/// `username` or `password`.)
const TYPED_KEYS: [(&str, &[&str]); 2] = [
    ("kubernetes.io/ssh-auth", &["ssh-privatekey"]),
    ("kubernetes.io/tls", &["tls.crt", "tls.key"]),
];

/// Unusable input if `object` is a Secret of a type whose keys it lacks.
fn typed_keys(object: &ConfigObject, at: &str) -> Result<(), InputError> {
    let Some(secret_type) = object.secret_type.as_deref() else {
        return Ok(());
    };
    let refused = |missing: &str| {
        Err(bad(
            at,
            format!(
                "{} is of type {secret_type} without {missing}: the API server refuses it, and \
                 it keeps what it had",
                object.id
            ),
        ))
    };
    if secret_type == "kubernetes.io/basic-auth"
        && !object.keys.contains("username")
        && !object.keys.contains("password")
    {
        return refused("username or password");
    }
    let mut required = PULL_SECRET_TYPES
        .iter()
        .filter(|(_, t)| *t == secret_type)
        .map(|(key, _)| *key)
        .chain(
            TYPED_KEYS
                .iter()
                .filter(|(t, _)| *t == secret_type)
                .flat_map(|(_, keys)| keys.iter().copied()),
        );
    match required.find(|k| !object.keys.contains(*k)) {
        Some(key) => refused(key),
        None => Ok(()),
    }
}

/// The key names the items of a `data` list (read as [`DATA_LIST`]) give in
/// `field`: an ExternalSecret's `secretKey`, a SecretProviderClass's `key`.
/// A list that is none, or an item without the field, is unusable input,
/// named by `what`.
fn data_list_names(
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
fn workload_ref(doc: &Node, namespace: &str, at: &str) -> Result<Option<WorkloadId>, InputError> {
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
fn api_versions(kind: &str) -> Option<&'static [&'static str]> {
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

fn kustomize_source(at: &str, kind: &str) -> InputError {
    bad(
        at,
        format!(
            "a kustomize {kind} is a source, not a manifest (its generators and patches are not \
             applied here); check what it renders: `kubectl kustomize DIR > FILE`"
        ),
    )
}

fn find_templates_at(node: &Node, path: &str, out: &mut Vec<(String, Node)>) {
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
const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";

/// Unusable input if a Secret of type `secret_type` is a service-account
/// token Secret whose `annotations` (under `meta`) do not name its account:
/// the API server refuses it, so the control plane never writes its keys.
/// (Only the annotation's presence is read, not its value.)
fn token_names_account(
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
const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// Adds to a Secret of type `secret_type` the keys the control plane
/// writes into it: a service-account token Secret is declared with no data
/// and holds `ca.crt`, `namespace` and `token` once it exists.
fn add_control_plane_keys(secret_type: Option<&str>, keys: &mut BTreeSet<String>) {
    if secret_type == Some(SERVICE_ACCOUNT_TOKEN) {
        keys.extend(["ca.crt", "namespace", "token"].map(str::to_owned));
    }
}

/// Every container (a map with an `image`) and every entry of a `volumes`
/// list under `node`, outside pod templates' own shape: for an allowed kind
/// that runs containers without a pod template.
fn find_containers(node: &Node, containers: &mut Vec<Node>, volumes: &mut Vec<Node>) {
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
fn env_reference(node: &Node, path: &str) -> Option<String> {
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
fn shown_path(path: &serde_ignored::Path<'_>) -> String {
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
fn shown_error_path(path: &serde_path_to_error::Path) -> String {
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

fn push_workload(
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
fn workload(
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
fn dormant(kind: &str, doc: &Node) -> Option<String> {
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

/// Whether one state's documents without a `metadata.namespace`, read in
/// `namespace`, miss the other state: it holds nothing in `namespace` and
/// something elsewhere, or it holds an object or workload of that state (a
/// kind and a name) only in other namespaces. That is `helm template`
/// output (which leaves the namespace to `helm install -n prod`) checked
/// against `kubectl get -n prod -o yaml` without saying `prod`: the two
/// states never meet, so a key the change removes is never seen, and the
/// check passes. Call it with the namespace you loaded both states with,
/// unless the user chose it; `None` when the states meet, or when no
/// document went without one.
///
/// ```
/// use ate_configguard::{LoadOptions, load_str, manifest::unplaced_namespace};
///
/// let live = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: prod}\ndata: {A: x}\n";
/// let rendered = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {B: x}\n";
/// let options = LoadOptions::default();
/// let (current, proposed) = (load_str(live, "live", &options)?, load_str(rendered, "rendered", &options)?);
/// let err = unplaced_namespace(&current, &proposed, &options.default_namespace).unwrap();
/// assert!(err.to_string().contains("--namespace prod"));
/// # Ok::<(), ate_configguard::InputError>(())
/// ```
pub fn unplaced_namespace(
    current: &Manifests,
    proposed: &Manifests,
    namespace: &str,
) -> Option<InputError> {
    fn namespaces(m: &Manifests) -> BTreeSet<&str> {
        let objects = m.objects.iter().map(|o| o.id.namespace.as_str());
        let workloads = m.workloads.iter().map(|w| w.id.namespace.as_str());
        let accounts = m.service_accounts.iter().map(|a| a.namespace.as_str());
        objects.chain(workloads).chain(accounts).collect()
    }
    // Kind and name of what a state holds, by namespace.
    fn names(m: &Manifests) -> BTreeSet<(&str, String, &str)> {
        let objects = m.objects.iter().map(|o| {
            let id = &o.id;
            (id.namespace.as_str(), id.kind.to_string(), id.name.as_str())
        });
        let workloads = m.workloads.iter().map(|w| {
            let id = &w.id;
            (id.namespace.as_str(), id.kind.clone(), id.name.as_str())
        });
        objects.chain(workloads).collect()
    }
    let sides = [
        ("proposed", proposed, "current", current),
        ("current", current, "proposed", proposed),
    ];
    for (side, state, other_side, other) in sides {
        let theirs = namespaces(other);
        if state.unplaced == 0 || theirs.is_empty() {
            continue;
        }
        let fix = |elsewhere: &str| {
            format!(
                "so the two states would not meet: give the namespace they are applied to, \
                 as --namespace {elsewhere}"
            )
        };
        if !theirs.contains(namespace) {
            let list = theirs.iter().copied().collect::<Vec<_>>().join(", ");
            let first = theirs.first().copied().unwrap_or(namespace);
            return Some(InputError::Invalid {
                at: format!("{side} state"),
                message: format!(
                    "{} document(s) without a metadata.namespace were read in namespace \
                     {namespace}, where the {other_side} state holds nothing (it holds \
                     {list}), {}",
                    state.unplaced,
                    fix(first)
                ),
            });
        }
        // The other state reaches into `namespace` too (`kubectl get -A`),
        // but what this one holds there it holds only elsewhere.
        let other_names = names(other);
        for (ns, kind, name) in names(state) {
            if ns != namespace || other_names.contains(&(ns, kind.clone(), name)) {
                continue;
            }
            let elsewhere: Vec<&str> = other_names
                .iter()
                .filter(|(_, k, n)| *k == kind && *n == name)
                .map(|(ns, _, _)| *ns)
                .collect();
            if let Some(first) = elsewhere.first() {
                return Some(InputError::Invalid {
                    at: format!("{side} state"),
                    message: format!(
                        "{} document(s) without a metadata.namespace were read in namespace \
                         {namespace}; {kind} {name} is there, but the {other_side} state holds \
                         it only in {}, {}",
                        state.unplaced,
                        elsewhere.join(", "),
                        fix(first)
                    ),
                });
            }
        }
    }
    None
}
