//! From documents to the names-only model: config objects, workloads and
//! every reference site of their pod templates.

use std::collections::BTreeSet;

use crate::error::InputError;
use crate::model::{ConfigObject, Manifests, PULL_SECRET_TYPES};
use crate::operator;
use crate::parse::Node;

mod consistency;
mod kinds;
mod makers;
mod names;
mod nodes;
mod options;
mod order;
mod pods;
mod prune;
mod text;
mod typed;

use makers::{GATEWAY_API, PROXY_GROUPS};
use names::generate_name;
pub(crate) use names::meta_names;
pub(crate) use names::{
    NOT_A_NAMESPACE, is_key, is_namespace_name, namespace_left_out, object_name_ok,
};
pub(crate) use nodes::typed;
use nodes::{api_versions, kustomize_source};
pub use options::LoadOptions;
pub(crate) use options::bad;
use order::{Order, order};
pub use pods::pod_references;
use prune::not_pruned;
pub use prune::parse_selector;
pub(crate) use text::{EMPTY_STATE, document_lines, manifest_files};
pub use text::{decode_text, load_paths, load_str, read_text};

/// The document's `kind`, or the input error that says what the document
/// is instead (a kustomization, a chart's Chart.yaml, other YAML).
fn kind_of(doc: &Node, at: &str) -> Result<String, InputError> {
    Ok(doc
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
        .to_owned())
}

/// `api` must be one of `wanted` for `kind`.
fn expect_api(at: &str, kind: &str, api: &str, wanted: &[&str]) -> Result<(), InputError> {
    if wanted.contains(&api) {
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
}

/// A `List`, or a typed list (`DeploymentList`, ...) as the API server
/// answers a list request, whose items may leave out their kind and
/// apiVersion: each item loaded as a document of its own.
fn load_list(
    mut doc: Node,
    at: &str,
    kind: &str,
    api: &str,
    typed_list: Option<&str>,
    options: &LoadOptions,
    out: &mut Manifests,
) -> Result<(), InputError> {
    // A `List` may hold objects of any group; it is `v1` itself.
    expect_api(
        at,
        kind,
        api,
        typed_list.and_then(api_versions).unwrap_or(&["v1"]),
    )?;
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
                item.set("apiVersion", Node::String(api.to_owned()));
            }
        }
        load_doc(item, &item_at, options, out)?;
    }
    Ok(())
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
    let kind = kind_of(&doc, at)?;
    let api = doc
        .get("apiVersion")
        .and_then(Node::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad(at, "missing apiVersion"))?
        .to_owned();
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
        return load_list(doc, at, &kind, &api, typed_list, options, out);
    }
    if kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io" {
        out.crds += 1;
    }
    let custom_kind = custom(&kind);
    if let Some(versions) = api_versions(&kind).filter(|_| !custom_kind) {
        expect_api(at, &kind, &api, versions)?;
    }
    // A custom resource matches none of the known kinds' arms.
    let known_kind = if custom_kind { "" } else { kind.as_str() };
    let mut order = order(&doc, at)?;
    if order.kept_on_prune.is_none() {
        order.kept_on_prune = not_pruned(&doc, options);
    }
    let before = counts(out);
    // Cluster-scoped: it names the namespaces of what it stands for.
    let placed = kind == "ClusterExternalSecret"
        || !namespace_left_out(doc.get("metadata").and_then(|m| m.get("namespace")));
    let head = kinds::DocHeader {
        at,
        kind: &kind,
        api: &api,
        group,
        custom_kind,
        options,
    };
    read_by_kind(known_kind, head, &mut doc, out)?;
    if !placed && counts(out) != before {
        out.unplaced += 1;
    }
    stamp_order(out, before, &order, at)
}

/// How many workloads, config objects and ServiceAccounts `out` holds.
fn counts(out: &Manifests) -> (usize, usize, usize) {
    (
        out.workloads.len(),
        out.objects.len(),
        out.service_accounts.len(),
    )
}

/// Reads `doc` by its kind (`known_kind`: `""` for a custom resource)
/// into `out`.
fn read_by_kind(
    known_kind: &str,
    head: kinds::DocHeader<'_>,
    doc: &mut Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let kinds::DocHeader {
        at,
        kind,
        api,
        group,
        options,
        ..
    } = head;
    match known_kind {
        // Named by the API server when it is created, so no manifest can
        // name it: nothing reads it, and nothing it holds can go missing.
        "ConfigMap" | "Secret" if generate_name(doc).is_some() => {}
        "ConfigMap" | "Secret" => kinds::config_object(head, doc, out)?,
        "Pod" => kinds::pod(head, doc, out)?,
        "PodTemplate"
        | "ReplicationController"
        | "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "CronJob" => kinds::templated(head, doc, out)?,
        "ServiceAccount" => kinds::service_account(head, doc, out)?,
        "Ingress" => kinds::ingress(head, doc, out)?,
        "SealedSecret" if group == "bitnami.com" => kinds::sealed_secret(head, doc, out)?,
        "Certificate" if group == "cert-manager.io" => kinds::certificate(head, doc, out)?,
        "ExternalSecret" if group == "external-secrets.io" => {
            kinds::external_secret_doc(head, doc, out)?
        }
        "SecretProviderClass" if group == "secrets-store.csi.x-k8s.io" => {
            kinds::secret_provider_class(head, doc, out)?
        }
        "ClusterExternalSecret" if group == "external-secrets.io" => {
            kinds::cluster_external_secret(head, doc, out)?
        }
        _ if group == GATEWAY_API => kinds::gateway(head, doc, out)?,
        _ if PROXY_GROUPS.contains(&group) => kinds::proxy(head, doc, out)?,
        _ if group == operator::MONITORING_GROUP
            && operator::MONITORING_KINDS.contains(&kind.as_str()) =>
        {
            kinds::monitoring(head, doc, out)?
        }
        _ if options.allow_kinds.contains(kind)
            || (!group.is_empty() && options.allow_kinds.contains(&format!("{kind}.{group}"))) =>
        {
            kinds::allowed(head, doc, out)?
        }
        _ if api.starts_with("kustomize.config.k8s.io/") => {
            return Err(kustomize_source(at, kind));
        }
        _ => kinds::unknown(head, doc)?,
    }
    Ok(())
}

/// Gives what one document added to `out` (past the `before` counts) the
/// document's hook, sync wave and prune annotation, and checks the keys
/// of the config objects against their type.
fn stamp_order(
    out: &mut Manifests,
    before: (usize, usize, usize),
    order: &Order,
    at: &str,
) -> Result<(), InputError> {
    let (workloads_before, objects_before, accounts_before) = before;
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
