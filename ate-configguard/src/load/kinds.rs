//! Reading one document of each kind the guard knows into the model:
//! one function per kind (or family of kinds), called by `load_doc` once
//! it knows what the document is.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;

use super::makers::{
    PROXY_SECRETS, certificate_refs, external_secret, made_secret, outside_pod_spec,
};
use super::names::{
    MAX_VALUE_BYTES, key_names, meta_names, object_name_ok, value_lengths, workload_names,
};
use super::nodes::{
    add_control_plane_keys, data_list_names, dormant, env_reference, find_containers,
    find_templates_at, push_workload, token_names_account, typed, workload_ref,
};
use super::options::{LoadOptions, bad};
use crate::error::InputError;
use crate::model::{
    ConfigKind, ConfigObject, Manifests, ObjectId, ServiceAccount, Workload, WorkloadId,
};
use crate::operator;
use crate::parse::{Node, VALUE_DIGESTS};

/// A document's header: what `load_doc` knows of it (where it is, its
/// kind and apiVersion) before reading it by kind.
#[derive(Clone, Copy)]
pub(super) struct DocHeader<'a> {
    /// Where it is (`file document N`), for errors.
    pub at: &'a str,
    /// Its `kind`, as written.
    pub kind: &'a String,
    /// Its `apiVersion`, as written.
    pub api: &'a String,
    /// The API group (`""` for the core group).
    pub group: &'a str,
    /// A custom resource named like a Kubernetes kind.
    pub custom_kind: bool,
    /// How the user asked for manifests to be read.
    pub options: &'a LoadOptions,
}

impl DocHeader<'_> {
    /// The document's namespace and name, checked as the API server checks
    /// them (the namespace defaulted as the user asked).
    fn names(&self, doc: &Node) -> Result<(String, String), InputError> {
        meta_names(doc, self.at, self.options)
    }

    /// [`names`](Self::names), for a workload (its name checked as its
    /// kind's).
    fn workload_names(&self, doc: &Node) -> Result<(String, String), InputError> {
        workload_names(doc, self.at, self.options)
    }
}

/// The keyed digests of `field`'s string values ([`VALUE_DIGESTS`]).
fn value_digests(doc: &Node, field: &str) -> BTreeMap<String, u64> {
    let Some(Node::Seq(items)) = doc.get(field) else {
        return BTreeMap::new();
    };
    items
        .iter()
        .filter_map(|i| match i.get(VALUE_DIGESTS) {
            Some(Node::Map(entries)) => Some(entries),
            _ => None,
        })
        .flatten()
        .filter_map(|(k, d)| match d {
            Node::Number(n) => Some((k.clone(), n.as_u64()?)),
            _ => None,
        })
        .collect()
}

/// A ConfigMap or Secret: its key names, type and immutability, as the
/// API server would take them (or the input error it would refuse).
pub(super) fn config_object(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (namespace, name) = head.names(doc)?;
    // The kind, and the field beside `data` that holds keys too.
    let (config_kind, also) = if kind == "ConfigMap" {
        (ConfigKind::ConfigMap, "binaryData")
    } else {
        (ConfigKind::Secret, "stringData")
    };
    object_name_ok(config_kind, &name, at)?;
    // Base64: a Secret's data, a ConfigMap's binaryData.
    let secret = (kind == "Secret").then_some("Secret");
    let binary = (kind == "ConfigMap").then_some("ConfigMap");
    let mut keys = key_names(doc, "data", at, secret)?;
    let mut binary_keys = BTreeSet::new();
    let mut overlap = false;
    for key in key_names(doc, also, at, binary)? {
        if kind == "ConfigMap" {
            binary_keys.insert(key.clone());
        }
        // A Secret's stringData overwrites its data; a ConfigMap's
        // key in both is refused by the API server.
        if !keys.insert(key.clone()) {
            if kind == "ConfigMap" {
                return Err(bad(
                    at,
                    format!(
                        "key {key:?} is in both data and binaryData: the API server \
                         refuses the ConfigMap, which keeps the keys it had"
                    ),
                ));
            }
            overlap = true;
        }
    }
    // What the API server sums: a ConfigMap's data as text and its
    // binaryData decoded; a Secret's data decoded, with stringData
    // (as text) in place of the keys it overwrites. Where keys
    // overlap, the lengths of the ones overwritten are unknown, so
    // stringData's alone is counted (never more than the total).
    let lengths = |field| value_lengths(doc, field).map_or((0, 0), |(t, d, _)| (t, d));
    let (data_text, data_decoded) = lengths("data");
    let (also_text, also_decoded) = lengths(also);
    let total = match (kind == "ConfigMap", overlap) {
        (true, _) => data_text.saturating_add(also_decoded),
        (false, false) => data_decoded.saturating_add(also_text),
        (false, true) => also_text,
    };
    if total > MAX_VALUE_BYTES {
        return Err(bad(
            at,
            format!(
                "its values total more than 1 MiB ({MAX_VALUE_BYTES} bytes, base64 \
                 counted decoded), which the API server refuses: the {kind} keeps the \
                 keys it had (split it, or mount the content another way)"
            ),
        ));
    }
    if kind == "ConfigMap" && doc.get("stringData").is_some() {
        return Err(bad(at, "a ConfigMap has no stringData field"));
    }
    if kind == "Secret" && doc.get("binaryData").is_some() {
        return Err(bad(at, "a Secret has no binaryData field"));
    }
    let secret_type = match doc.get("type") {
        None | Some(Node::Null) => None,
        Some(Node::String(t)) if kind == "Secret" => (!t.is_empty()).then(|| t.clone()),
        Some(_) if kind == "Secret" => return Err(bad(at, "type is not a string")),
        // Not a ConfigMap field: the API server drops it.
        Some(_) => None,
    };
    if kind == "Secret" {
        let secret_type = secret_type.as_deref();
        token_names_account(secret_type, doc.get("metadata"), "the Secret", at)?;
        add_control_plane_keys(secret_type, &mut keys);
    }
    let immutable = match doc.get("immutable") {
        None | Some(Node::Null) => false,
        Some(Node::Bool(b)) => *b,
        Some(_) => return Err(bad(at, "immutable is not a boolean")),
    };
    // Only an immutable object's values are compared (a change of one is
    // refused by the API server); every other digest is dropped here.
    let value_digests = if immutable {
        let mut digests = value_digests(doc, "data");
        // A Secret's stringData overwrites its data.
        digests.extend(value_digests(doc, also));
        digests
    } else {
        BTreeMap::new()
    };
    out.objects.push(ConfigObject {
        id: ObjectId {
            kind: config_kind,
            namespace,
            name,
        },
        keys,
        binary_keys,
        value_digests,
        immutable,
        secret_type,
        hook: None,
        sync_wave: None,
        made_by: None,
        kept_on_prune: None,
    });
    Ok(())
}

/// A bare Pod: its spec is the pod.
pub(super) fn pod(
    head: DocHeader<'_>,
    doc: &mut Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (ns, name) = head.workload_names(doc)?;
    let dormant = dormant(kind, doc);
    let spec = doc
        .take_path(&["spec"])
        .ok_or_else(|| bad(at, "Pod without spec"))?;
    push_workload(
        out,
        kind,
        ns,
        name,
        typed::<PodSpec>(spec, at, "spec")?,
        dormant,
        at,
    )?;
    Ok(())
}

/// A built-in workload with a pod template (a Deployment, a CronJob, ...).
pub(super) fn templated(
    head: DocHeader<'_>,
    doc: &mut Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (ns, name) = head.workload_names(doc)?;
    let path: &[&str] = match kind.as_str() {
        "PodTemplate" => &["template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => &["spec", "template", "spec"],
    };
    let dormant = dormant(kind, doc);
    // A StatefulSet's containers may also mount its claim templates.
    let claims: std::collections::BTreeSet<String> =
        match doc.get("spec").and_then(|s| s.get("volumeClaimTemplates")) {
            Some(Node::Seq(items)) => items
                .iter()
                .filter_map(|i| i.get("metadata")?.get("name")?.as_str())
                .map(str::to_owned)
                .collect(),
            _ => std::collections::BTreeSet::new(),
        };
    // Taken, not cloned: the document is not needed afterwards.
    let spec = doc
        .take_path(path)
        .ok_or_else(|| bad(at, format!("{kind} {name} without a pod template spec")))?;
    let spec = typed::<PodSpec>(spec, at, "template.spec")?;
    super::consistency::check(&spec, &claims)
        .map_err(|m| bad(at, format!("{kind} {name}: {m}")))?;
    push_workload(out, kind, ns, name, spec, dormant, at)?;
    Ok(())
}

/// A ServiceAccount: the pull secrets it gives its pods.
pub(super) fn service_account(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, .. } = head;
    let (namespace, name) = head.names(doc)?;
    let image_pull_secrets = match doc.get("imagePullSecrets") {
        None | Some(Node::Null) => Vec::new(),
        Some(Node::Seq(items)) => items
            .iter()
            .map(|i| match i.get("name").and_then(Node::as_str) {
                Some(n) if !n.is_empty() => Ok(n.to_owned()),
                _ => Err(bad(
                    at,
                    format!("ServiceAccount {name}: an imagePullSecrets name is empty"),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(bad(
                at,
                format!("ServiceAccount {name}: imagePullSecrets is not a list"),
            ));
        }
    };
    out.service_accounts.push(ServiceAccount {
        namespace,
        name,
        image_pull_secrets,
        hook: None,
        sync_wave: None,
    });
    Ok(())
}

/// An Ingress: the TLS Secrets its rules name.
pub(super) fn ingress(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { kind, .. } = head;
    let (ns, name) = head.names(doc)?;
    if let Some(Node::Seq(tls)) = doc.get("spec").and_then(|s| s.get("tls")) {
        for t in tls {
            if let Some(secret) = t.get("secretName").and_then(Node::as_str) {
                let object = ObjectId {
                    kind: ConfigKind::Secret,
                    namespace: ns.clone(),
                    name: secret.to_owned(),
                };
                outside_pod_spec(out, kind, &ns, &name, "spec.tls[].secretName", object);
            }
        }
    }
    Ok(())
}

/// A Bitnami SealedSecret: the Secret its controller makes.
pub(super) fn sealed_secret(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (namespace, name) = head.names(doc)?;
    let spec = doc
        .get("spec")
        .ok_or_else(|| bad(at, "SealedSecret without spec"))?;
    let template = spec.get("template");
    let mut keys = key_names(spec, "encryptedData", at, None)?;
    if let Some(template) = template {
        keys.extend(key_names(template, "data", at, None)?);
    }
    let secret_type = template.and_then(|t| t.get("type")).and_then(Node::as_str);
    token_names_account(
        secret_type,
        template.and_then(|t| t.get("metadata")),
        "spec.template",
        at,
    )?;
    add_control_plane_keys(secret_type, &mut keys);
    let immutable = matches!(
        template.and_then(|t| t.get("immutable")),
        Some(Node::Bool(true))
    );
    let mut made = made_secret(kind, namespace, name, None, keys, immutable);
    // The controller sets the template's type on the Secret it
    // makes or updates, an absent one too (the API server reads
    // that as `Opaque`).
    made.secret_type = Some(
        secret_type
            .filter(|t| !t.is_empty())
            .unwrap_or("Opaque")
            .to_owned(),
    );
    out.objects.push(made);
    Ok(())
}

/// A cert-manager Certificate: the Secret cert-manager writes.
pub(super) fn certificate(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (namespace, name) = head.names(doc)?;
    let spec = doc.get("spec");
    let secret = spec
        .and_then(|s| s.name_at("secretName"))
        .ok_or_else(|| bad(at, format!("Certificate {name} without spec.secretName")))?
        .to_owned();
    // What cert-manager always writes; `ca.crt` only when the
    // issuer knows the CA (not ACME), so it is not counted on.
    let mut keys: BTreeSet<String> = ["tls.crt", "tls.key"].map(str::to_owned).into();
    let keystores = spec.and_then(|s| s.get("keystores"));
    for (store, files) in [
        ("jks", ["keystore.jks", "truststore.jks"]),
        ("pkcs12", ["keystore.p12", "truststore.p12"]),
    ] {
        let store = keystores.and_then(|k| k.get(store));
        if matches!(store.and_then(|s| s.get("create")), Some(Node::Bool(true))) {
            keys.extend(files.map(str::to_owned));
        }
    }
    out.objects.push(made_secret(
        kind,
        namespace,
        name,
        Some(secret),
        keys,
        false,
    ));
    Ok(())
}

/// An ExternalSecret: the Secret external-secrets makes.
pub(super) fn external_secret_doc(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (namespace, name) = head.names(doc)?;
    let spec = doc
        .get("spec")
        .ok_or_else(|| bad(at, "ExternalSecret without spec"))?;
    if let Some(made) = external_secret(spec, kind, namespace, name, at)? {
        out.objects.push(made);
    }
    Ok(())
}

/// The Secrets Store CSI driver syncs each of `spec.secretObjects`
/// into a Secret (`secretName`) with the keys its `data` items name
/// (`key`), once a pod that mounts the class starts.
pub(super) fn secret_provider_class(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (namespace, name) = head.names(doc)?;
    let objects = match doc.get("spec").and_then(|s| s.get("secretObjects")) {
        None | Some(Node::Null) => &[][..],
        Some(Node::Seq(list)) => list,
        Some(_) => return Err(bad(at, "spec.secretObjects is not a list")),
    };
    for (i, object) in objects.iter().enumerate() {
        let secret = object
            .name_at("secretName")
            .ok_or_else(|| bad(at, format!("spec.secretObjects[{i}] without a secretName")))?;
        let mut keys = match object.get("data") {
            // Absent, null or empty (read as a map without names).
            None | Some(Node::Null) => BTreeSet::new(),
            Some(Node::Seq(names)) if names.is_empty() => BTreeSet::new(),
            Some(list) => {
                data_list_names(list, "key", &format!("spec.secretObjects[{i}].data"), at)?
            }
        };
        let secret_type = object.get("type").and_then(Node::as_str);
        token_names_account(
            secret_type,
            Some(object),
            &format!("spec.secretObjects[{i}]"),
            at,
        )?;
        add_control_plane_keys(secret_type, &mut keys);
        let mut made = made_secret(
            kind,
            namespace.clone(),
            name.clone(),
            Some(secret.to_owned()),
            keys,
            false,
        );
        made.secret_type = secret_type.filter(|t| !t.is_empty()).map(str::to_owned);
        out.objects.push(made);
    }
    Ok(())
}

/// An ExternalSecret for each namespace a ClusterExternalSecret lists
/// (`spec.namespaces`), named `spec.externalSecretName` or as itself. The
/// namespaces its selectors pick are not in the input: none is derived
/// for them.
pub(super) fn cluster_external_secret(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { at, kind, .. } = head;
    let (_, name) = head.names(doc)?;
    let spec = doc
        .get("spec")
        .ok_or_else(|| bad(at, "ClusterExternalSecret without spec"))?;
    let es_spec = spec
        .get("externalSecretSpec")
        .ok_or_else(|| bad(at, "ClusterExternalSecret without spec.externalSecretSpec"))?;
    let es_name = spec.name_at("externalSecretName").unwrap_or(&name);
    let namespaces = match spec.get("namespaces") {
        None | Some(Node::Null) => Vec::new(),
        Some(Node::Seq(list)) => list.iter().filter_map(Node::as_str).collect(),
        Some(_) => return Err(bad(at, "spec.namespaces is not a list")),
    };
    for ns in namespaces {
        if let Some(made) = external_secret(es_spec, kind, ns.to_owned(), es_name.to_owned(), at)? {
            out.objects.push(made);
        }
    }
    Ok(())
}

/// Gateway API objects (`Gateway`, `BackendTLSPolicy`, ...) name TLS
/// Secrets and CA ConfigMaps in `certificateRefs` and
/// `caCertificateRefs`: reported as an Ingress's TLS secrets are.
pub(super) fn gateway(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { kind, .. } = head;
    let (ns, name) = head.names(doc)?;
    let mut refs = Vec::new();
    certificate_refs(doc, "", &ns, &mut refs);
    for (site, object) in refs {
        outside_pod_spec(out, kind, &ns, &name, &site, object);
    }
    Ok(())
}

/// An ingress controller's own kinds (Contour, Traefik, ...): the
/// Secrets at the paths it reads ([`PROXY_SECRETS`]).
pub(super) fn proxy(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader { kind, group, .. } = head;
    let (ns, name) = head.names(doc)?;
    for path in PROXY_SECRETS {
        let found = path
            .split('.')
            .try_fold(doc, |node, key| node.get(key))
            .and_then(Node::as_str)
            .filter(|n| !n.is_empty());
        let Some(secret) = found else { continue };
        // Contour takes `namespace/name` for a Secret another
        // namespace delegates (TLSCertificateDelegation).
        let (namespace, secret) = match secret.split_once('/') {
            Some((n, s)) if group == "projectcontour.io" => (n, s),
            _ => (ns.as_str(), secret),
        };
        let object = ObjectId {
            kind: ConfigKind::Secret,
            namespace: namespace.to_owned(),
            name: secret.to_owned(),
        };
        outside_pod_spec(out, kind, &ns, &name, path, object);
    }
    Ok(())
}

/// A prometheus-operator kind: the Secrets and ConfigMaps it mounts or
/// reads, as one pod's (see the `operator` module).
pub(super) fn monitoring(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader {
        at, kind, group, ..
    } = head;
    let (ns, name) = head.workload_names(doc)?;
    let mut refs = operator::references(doc);
    if kind == "Alertmanager" {
        // The operator loads its configuration from this Secret
        // (`alertmanager.yaml`), and without it runs one that sends
        // alerts nowhere: a required read.
        let config = doc
            .get("spec")
            .and_then(|s| s.get("configSecret"))
            .and_then(Node::as_str)
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("alertmanager-{name}"), str::to_owned);
        refs.require_secret_key("spec.configSecret", &config, "alertmanager.yaml");
    }
    if let Some(spec) = refs.into_pod_spec() {
        push_workload(
            out,
            &format!("{kind}.{group}"),
            ns,
            name,
            typed::<PodSpec>(spec, at, "spec")?,
            None,
            at,
        )?;
    }
    Ok(())
}

/// A kind the user allow-listed (`--allow-kind`): each pod template
/// (or, without one, its containers or the config it names) as a pod.
pub(super) fn allowed(
    head: DocHeader<'_>,
    doc: &Node,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let DocHeader {
        at,
        kind,
        group,
        custom_kind,
        ..
    } = head;
    let (ns, name) = head.workload_names(doc)?;
    // A custom resource named like a Kubernetes kind is reported
    // with its group (`Job.batch.volcano.sh`), not as that kind.
    let label = if custom_kind {
        format!("{kind}.{group}")
    } else {
        kind.clone()
    };
    let mut specs = Vec::new();
    find_templates_at(doc, "", &mut specs);
    let outside = if specs.is_empty() {
        None
    } else {
        operator::references_outside_templates(doc).into_pod_spec_if_any()
    };
    if specs.is_empty()
        && let Some(from) = workload_ref(doc, &ns, at)?
    {
        // An Argo Rollout that runs a workload's pod template: the
        // check reads that workload's references for it.
        out.workloads.push(Workload {
            id: WorkloadId {
                kind: label.clone(),
                namespace: ns.clone(),
                name: name.clone(),
            },
            references: Vec::new(),
            dormant: None,
            service_account: "default".into(),
            hook: None,
            sync_wave: None,
            template_from: Some(from),
            kept_on_prune: None,
            source: None,
        });
    } else if specs.is_empty() {
        // No pod template (an Argo Workflow's `templates[].container`):
        // its containers and volumes, wherever they sit, as one pod.
        let mut containers = Vec::new();
        let mut volumes = Vec::new();
        find_containers(doc, &mut containers, &mut volumes);
        if containers.is_empty() {
            // No container either: the Secrets and ConfigMaps it
            // names (`volumes`, `secrets`, key selectors...), read
            // as one pod's.
            // `--allow-kind` allows the kind: an instance that names
            // nothing (a Kafka cluster without a metrics ConfigMap beside
            // one with it) contributes no references, and is no error.
            match operator::references(doc).into_pod_spec() {
                Some(spec) => specs.push((String::new(), spec)),
                None => return Ok(()),
            }
        } else {
            let mut spec = Vec::new();
            spec.push(("containers".to_owned(), Node::Seq(containers)));
            if !volumes.is_empty() {
                spec.push(("volumes".to_owned(), Node::Seq(volumes)));
            }
            specs.push((String::new(), Node::Map(spec)));
        }
    }
    specs.extend(outside.map(|spec| ("spec".to_owned(), spec)));
    // One template: the object's own name. Several (a Volcano Job's
    // tasks, a PyTorchJob's Master and Worker, references beside a
    // template): each a pod of its own, named by where it sits
    // (`train@spec.tasks[1].template`).
    let several = specs.len() > 1;
    for (path, spec) in specs {
        let pod = if several {
            format!("{name}@{path}")
        } else {
            name.clone()
        };
        push_workload(
            out,
            &label,
            ns.clone(),
            pod,
            typed::<PodSpec>(spec, at, "template.spec")?,
            None,
            at,
        )?;
    }
    Ok(())
}

/// Kinds of the core API group (`v1`) that this guard reads no references
/// of: Kubernetes' own, never "unknown".
const CORE_KINDS: [&str; 12] = [
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Namespace",
    "Node",
    "Service",
    "Endpoints",
    "Event",
    "LimitRange",
    "ResourceQuota",
    "ReplicationController",
    "PodTemplate",
    "Binding",
];

/// Any other kind: ignored unless it may read config (fail closed).
pub(super) fn unknown(head: DocHeader<'_>, doc: &Node) -> Result<(), InputError> {
    let DocHeader {
        at,
        kind,
        api,
        group,
        ..
    } = head;
    let reads_config = env_reference(doc, "");
    let runs_template = doc
        .get("spec")
        .and_then(|s| s.get("workloadRef"))
        .is_some_and(|r| !matches!(r, Node::Null));
    // Fail closed: a kind this guard cannot read that names a
    // Secret or ConfigMap anywhere (`volumes`, `secrets`,
    // `configSecret`, `*SecretRef`, a key selector) may break when
    // one goes.
    let names_config = operator::references(doc).first;
    if let (Some(path), false, None, false) = (
        &names_config,
        doc.has_pod_template(),
        &reads_config,
        runs_template,
    ) {
        let allow = if group.is_empty() {
            kind.clone()
        } else {
            format!("{kind}.{group} (or {kind}, of any group)")
        };
        let known = if group.is_empty() && CORE_KINDS.contains(&kind.as_str()) {
            // Kubernetes' own: known, just not one this guard reads.
            format!("kind {kind} (core/{api}) is not one whose references this tool follows; it")
        } else {
            format!("unknown kind {kind} ({api})")
        };
        return Err(bad(
            at,
            format!(
                "{known} names a Secret or ConfigMap (at {path}); \
                 pass --allow-kind {allow} to read its references"
            ),
        ));
    }
    if doc.has_pod_template() || reads_config.is_some() || runs_template {
        let allow = if group.is_empty() {
            kind.clone()
        } else {
            format!("{kind}.{group} (or {kind}, of any group)")
        };
        let what = match reads_config {
            Some(path) if !doc.has_pod_template() => {
                format!("has containers that read a ConfigMap or Secret (at {path})")
            }
            _ if runs_template && !doc.has_pod_template() => {
                "runs the pod template of another workload (spec.workloadRef)".to_owned()
            }
            _ => "carries a pod template".to_owned(),
        };
        return Err(bad(
            at,
            format!("unknown kind {kind} ({api}) {what}; pass --allow-kind {allow} to read it"),
        ));
    }
    Ok(())
}
