//! Reading manifests into a [`Fleet`]: the same files, streams, lists and
//! redaction as `check`, the kinds the rollout gate reads decoded into
//! their k8s-openapi types, every other kind skipped (ConfigMaps and
//! Secrets are never decoded).

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::fleet::{BackendConfig, Fleet, RolloutObject};
use crate::error::InputError;
use crate::load::{
    EMPTY_STATE, LoadOptions, bad, document_lines, manifest_files, meta_names, read_text, typed,
};
use crate::model::{Place, WorkloadId};
use crate::parse::{Node, documents, without_bom};

/// Reads files and directories (`.yaml`, `.yml`, `.json`, recursively, in
/// name order) into one [`Fleet`], as [`load_paths`](crate::load_paths)
/// reads them for `check`.
///
/// # Errors
///
/// [`InputError::Io`] naming a path that cannot be read, and every error
/// of [`load_str`].
pub fn load_paths(paths: &[PathBuf], options: &LoadOptions) -> Result<Fleet, InputError> {
    let mut out = Fleet::default();
    for file in manifest_files(paths)? {
        let text = read_text(&file)?;
        out.extend(load_str(&text, &file.display().to_string(), options)?);
    }
    Ok(out)
}

/// Reads one file's text (`source` names it in errors and findings).
///
/// Text with no document at all is unusable input, as for `check`.
///
/// ```
/// use ate_configguard::LoadOptions;
/// use ate_configguard::rollout::load_str;
///
/// let fleet = load_str(
///     "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}}\n",
///     "svc.yaml",
///     &LoadOptions::default(),
/// )?;
/// assert_eq!(fleet.objects.len(), 1);
/// assert!(load_str("# empty\n", "svc.yaml", &LoadOptions::default()).is_err());
/// # Ok::<(), ate_configguard::InputError>(())
/// ```
///
/// # Errors
///
/// [`InputError::Parse`] for text that is not YAML or JSON, and
/// [`InputError::Invalid`] naming the document and its line for one that
/// does not decode as its kind, an unsupported apiVersion of a kind the
/// gate reads, or an unknown kind with a pod template that
/// [`LoadOptions::allow_kinds`] does not name.
pub fn load_str(text: &str, source: &str, options: &LoadOptions) -> Result<Fleet, InputError> {
    let docs = documents(text, source)?;
    if docs.is_empty() && !without_bom(text).trim_start().starts_with('[') {
        return Err(bad(
            source,
            format!(
                "no document in it (empty, or only comments and `---`), which is what a failed \
                 render or `kubectl get` leaves behind; {EMPTY_STATE}"
            ),
        ));
    }
    let lines = document_lines(text, docs.len());
    let read = |(i, doc): (usize, Node)| -> Result<Fleet, InputError> {
        let line = lines.get(i).copied().unwrap_or(1);
        let at = format!("{source} document {}", i + 1);
        let place = Place {
            file: source.to_owned(),
            document: i + 1,
            line,
        };
        let mut out = Fleet::default();
        read_doc(doc, &at, &place, options, &mut out).map_err(|e| match e {
            InputError::Invalid {
                at: where_,
                message,
            } if where_.starts_with(&at) => InputError::Invalid {
                at: format!("{at} (line {line}){}", &where_[at.len()..]),
                message,
            },
            other => other,
        })?;
        Ok(out)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let mut out = Fleet::default();
    if threads < 2 || docs.len() < 512 {
        for d in docs.into_iter().enumerate() {
            out.extend(read(d)?);
        }
        return Ok(out);
    }
    // Decoding into k8s-openapi types is most of the time for a big
    // input: ordered chunks, one per core; the first error in document
    // order wins.
    let chunk = docs.len().div_ceil(threads);
    let mut parts: Vec<Vec<(usize, Node)>> = Vec::new();
    let mut docs = docs.into_iter().enumerate().peekable();
    while docs.peek().is_some() {
        parts.push(docs.by_ref().take(chunk).collect());
    }
    let results: Vec<Result<Fleet, InputError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                let read = &read;
                scope.spawn(move || {
                    let mut f = Fleet::default();
                    for d in part {
                        f.extend(read(d)?);
                    }
                    Ok(f)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(bad(source, "internal error while decoding")))
            })
            .collect()
    });
    for part in results {
        out.extend(part?);
    }
    Ok(out)
}

/// Drops every annotation whose value the parser did not keep (null), so
/// that the rest decodes as `ObjectMeta` does. A kept one that is no
/// string (`ate.dev/single-writer: true` unquoted) is `Err` naming it: the
/// API server refuses it, and read as absent it would pass unchecked.
fn kept_annotations_only(node: &mut Node) -> Result<(), String> {
    match node {
        Node::Map(entries) => {
            for (k, v) in entries.iter_mut() {
                if k == "annotations"
                    && let Node::Map(annotations) = v
                {
                    if let Some((name, _)) = annotations
                        .iter()
                        .find(|(_, value)| !matches!(value, Node::String(_) | Node::Null))
                    {
                        return Err(format!(
                            "annotation {name} is not a string: the API server refuses it; \
                             quote the value"
                        ));
                    }
                    annotations.retain(|(_, value)| matches!(value, Node::String(_)));
                } else {
                    kept_annotations_only(v)?;
                }
            }
        }
        Node::Seq(items) => {
            for i in items {
                kept_annotations_only(i)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Sets a document's namespace to the default where it names none.
fn place_namespace(doc: &mut Node, namespace: &str) {
    if let Some(Node::Map(meta)) = match doc {
        Node::Map(entries) => entries
            .iter_mut()
            .find(|(k, _)| k == "metadata")
            .map(|(_, v)| v),
        _ => None,
    } {
        match meta.iter_mut().find(|(k, _)| k == "namespace") {
            Some((_, v @ (Node::Null | Node::String(_))))
                if v.as_str().is_none_or(str::is_empty) =>
            {
                *v = Node::String(namespace.to_owned());
            }
            Some(_) => {}
            None => meta.push(("namespace".into(), Node::String(namespace.to_owned()))),
        }
    }
}

fn read_doc(
    mut doc: Node,
    at: &str,
    place: &Place,
    options: &LoadOptions,
    out: &mut Fleet,
) -> Result<(), InputError> {
    if !matches!(doc, Node::Map(_)) {
        return Err(bad(at, "a document must be an object"));
    }
    let kind = doc
        .name_at("kind")
        .ok_or_else(|| {
            bad(
                at,
                "missing kind: every document must be a Kubernetes object",
            )
        })?
        .to_owned();
    let api = doc
        .name_at("apiVersion")
        .ok_or_else(|| bad(at, "missing apiVersion"))?
        .to_owned();
    let group = api.rsplit_once('/').map_or("", |(g, _)| g).to_owned();
    if kind == "List" || kind.ends_with("List") && doc.get("items").is_some() {
        return read_list(doc, &kind, &api, at, place, options, out);
    }
    let expect = |wanted: &str| {
        if api == wanted {
            Ok(())
        } else {
            Err(bad(
                at,
                format!("{kind} with unsupported apiVersion {api} (expected {wanted})"),
            ))
        }
    };
    let builtin = matches!(group.as_str(), "" | "apps" | "extensions");
    let place = Some(place.clone());
    match kind.as_str() {
        // Never decoded: the gate reads no config value, and no name
        // either.
        "ConfigMap" | "Secret" if group.is_empty() => return Ok(()),
        "Deployment" | "StatefulSet" | "DaemonSet" if builtin => {
            expect("apps/v1")?;
            prepare(&mut doc, options, at)?;
            out.push(workload_object(doc, at, &kind)?, place);
        }
        "Service" if group.is_empty() => {
            expect("v1")?;
            prepare(&mut doc, options, at)?;
            out.push(
                RolloutObject::Service(Box::new(typed::<Service>(doc, at, &kind)?)),
                place,
            );
        }
        "Pod" if group.is_empty() => {
            expect("v1")?;
            prepare(&mut doc, options, at)?;
            out.push(
                RolloutObject::Pod(Box::new(typed::<Pod>(doc, at, &kind)?)),
                place,
            );
        }
        "PodDisruptionBudget" if group == "policy" => {
            // policy/v1beta1 (removed in 1.25) has the same fields.
            prepare(&mut doc, options, at)?;
            doc.set("apiVersion", Node::String("policy/v1".into()));
            out.push(
                RolloutObject::PodDisruptionBudget(Box::new(typed::<PodDisruptionBudget>(
                    doc, at, &kind,
                )?)),
                place,
            );
        }
        "HorizontalPodAutoscaler" if group == "autoscaling" => {
            // Every version names its target and bounds alike; only those
            // are read (v1's CPU target is dropped unread).
            prepare(&mut doc, options, at)?;
            doc.set("apiVersion", Node::String("autoscaling/v2".into()));
            hpa_bounds_only(&mut doc);
            out.push(
                RolloutObject::HorizontalPodAutoscaler(Box::new(typed::<HorizontalPodAutoscaler>(
                    doc, at, &kind,
                )?)),
                place,
            );
        }
        "Ingress" if group == "networking.k8s.io" || group == "extensions" => {
            prepare(&mut doc, options, at)?;
            if api != "networking.k8s.io/v1" {
                ingress_v1beta1_backends(&mut doc);
                doc.set("apiVersion", Node::String("networking.k8s.io/v1".into()));
            }
            out.push(
                RolloutObject::Ingress(Box::new(typed::<Ingress>(doc, at, &kind)?)),
                place,
            );
        }
        "BackendConfig" if group == "cloud.google.com" => {
            prepare(&mut doc, options, at)?;
            out.push(
                RolloutObject::BackendConfig(backend_config(&doc, at, options)?),
                place,
            );
        }
        // Built-in kinds that run pods without a rollout of their own (a
        // Deployment's ReplicaSets, Jobs): nothing this gate judges.
        "ReplicaSet" | "ReplicationController" | "PodTemplate" | "Job" | "CronJob"
            if builtin || group == "batch" => {}
        _ if options.allow_kinds.contains(&kind)
            || (!group.is_empty() && options.allow_kinds.contains(&format!("{kind}.{group}"))) =>
        {
            prepare(&mut doc, options, at)?;
            if let Some(object) = allowed_kind(doc, &kind, at, options)? {
                out.push(object, place);
            }
        }
        _ if doc.has_pod_template() => return Err(unknown_rollout(&kind, &api, at)),
        _ => {}
    }
    Ok(())
}

/// The items of a `List` (or a typed `...List`) document, each read as a
/// document of its own; a typed list's items get its kind and apiVersion
/// where they leave them out.
fn read_list(
    mut doc: Node,
    kind: &str,
    api: &str,
    at: &str,
    place: &Place,
    options: &LoadOptions,
    out: &mut Fleet,
) -> Result<(), InputError> {
    let Some(Node::Seq(items)) = doc.take_path(&["items"]) else {
        return Err(bad(at, format!("{kind} without an items list")));
    };
    let element = kind.strip_suffix("List").filter(|e| !e.is_empty());
    for (i, mut item) in items.into_iter().enumerate() {
        if let Some(element) = element {
            if matches!(item.get("kind"), None | Some(Node::Null)) {
                item.set("kind", Node::String(element.to_owned()));
            }
            if matches!(item.get("apiVersion"), None | Some(Node::Null)) {
                item.set("apiVersion", Node::String(api.to_owned()));
            }
        }
        read_doc(item, &format!("{at} item {}", i + 1), place, options, out)?;
    }
    Ok(())
}

/// The error for a pod template of a kind the gate does not know how its
/// controller rolls out: fail closed, naming the way to check it.
fn unknown_rollout(kind: &str, api: &str, at: &str) -> InputError {
    bad(
        at,
        format!(
            "{kind} ({api}) carries a pod template this gate does not know how the \
             controller rolls out: name it with --allow-kind {kind} to check its \
             containers, or leave it out of the input"
        ),
    )
}

/// A Deployment, StatefulSet or DaemonSet (`kind`), decoded.
fn workload_object(doc: Node, at: &str, kind: &str) -> Result<RolloutObject, InputError> {
    Ok(match kind {
        "Deployment" => RolloutObject::Deployment(Box::new(typed::<Deployment>(doc, at, kind)?)),
        "StatefulSet" => RolloutObject::StatefulSet(Box::new(typed::<StatefulSet>(doc, at, kind)?)),
        _ => RolloutObject::DaemonSet(Box::new(typed::<DaemonSet>(doc, at, kind)?)),
    })
}

/// Keeps only what every HorizontalPodAutoscaler version names alike
/// (its target and bounds) in its `spec`.
fn hpa_bounds_only(doc: &mut Node) {
    if let Some(Node::Map(spec)) = doc.take_path(&["spec"]) {
        let kept: Vec<(String, Node)> = spec
            .into_iter()
            .filter(|(k, _)| matches!(k.as_str(), "scaleTargetRef" | "minReplicas" | "maxReplicas"))
            .collect();
        doc.set("spec", Node::Map(kept));
    }
}

/// A document of a kind named with `--allow-kind`: its pod template as a
/// workload of that kind, or `None` for one without a template of its own
/// (a Rollout's `workloadRef` runs another's: nothing to check here).
fn allowed_kind(
    mut doc: Node,
    kind: &str,
    at: &str,
    options: &LoadOptions,
) -> Result<Option<RolloutObject>, InputError> {
    let (namespace, name) = meta_names(&doc, at, options)?;
    let annotations = doc
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .map(string_map)
        .unwrap_or_default();
    let Some(template) = doc.take_path(&["spec", "template"]) else {
        return Ok(None);
    };
    let template = typed::<PodTemplateSpec>(template, at, "spec.template")?;
    Ok(Some(RolloutObject::Templated {
        id: WorkloadId {
            kind: kind.to_owned(),
            namespace,
            name,
        },
        template: Box::new(template),
        annotations,
    }))
}

/// Readies a document to decode: names checked, the namespace placed,
/// annotations the parser dropped left out.
fn prepare(doc: &mut Node, options: &LoadOptions, at: &str) -> Result<(), InputError> {
    let (namespace, _) = meta_names(doc, at, options)?;
    place_namespace(doc, &namespace);
    kept_annotations_only(doc).map_err(|m| bad(at, m))
}

/// The string entries of a map node.
fn string_map(node: &Node) -> BTreeMap<String, String> {
    match node {
        Node::Map(entries) => entries
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// A `networking.k8s.io/v1beta1` (or `extensions`) Ingress's backends
/// (`serviceName`, `servicePort`) rewritten as v1's (`service: {name,
/// port}`); only the names are read.
fn ingress_v1beta1_backends(node: &mut Node) {
    match node {
        Node::Map(entries) => {
            if let Some(name) = entries
                .iter()
                .find(|(k, _)| k == "serviceName")
                .and_then(|(_, v)| v.as_str().map(str::to_owned))
            {
                entries.retain(|(k, _)| k != "serviceName" && k != "servicePort");
                entries.push((
                    "service".into(),
                    Node::Map(vec![("name".into(), Node::String(name))]),
                ));
                return;
            }
            for (_, v) in entries.iter_mut() {
                ingress_v1beta1_backends(v);
            }
        }
        Node::Seq(items) => items.iter_mut().for_each(ingress_v1beta1_backends),
        _ => {}
    }
}

/// A BackendConfig's draining timeout and health-check path; a timeout
/// that is no whole number is unusable input.
fn backend_config(
    doc: &Node,
    at: &str,
    options: &LoadOptions,
) -> Result<BackendConfig, InputError> {
    let (namespace, name) = meta_names(doc, at, options)?;
    let spec = doc.get("spec");
    let draining = spec
        .and_then(|s| s.get("connectionDraining"))
        .and_then(|c| c.get("drainingTimeoutSec"));
    let draining_timeout_sec = match draining {
        None | Some(Node::Null) => None,
        Some(Node::Number(n)) if n.as_i64().is_some_and(|n| n >= 0) => n.as_i64(),
        Some(_) => {
            return Err(bad(
                at,
                format!(
                    "BackendConfig {name}: spec.connectionDraining.drainingTimeoutSec must be a \
                     whole number of seconds, 0 or more"
                ),
            ));
        }
    };
    let health_check_path = spec
        .and_then(|s| s.get("healthCheck"))
        .and_then(|h| h.name_at("requestPath"))
        .map(str::to_owned);
    Ok(BackendConfig {
        namespace,
        name,
        draining_timeout_sec,
        health_check_path,
    })
}
