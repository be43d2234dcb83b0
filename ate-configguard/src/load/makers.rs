//! Secrets controllers make (SealedSecret, ExternalSecret, cert-manager),
//! and references outside pod specs (Gateway API, Traefik, Contour).

use std::collections::BTreeSet;

use super::names::key_names;
use super::nodes::data_list_names;
use crate::error::InputError;
use crate::model::Code;
use crate::model::{ConfigKind, ConfigObject, Finding, Manifests, ObjectId, Severity, WorkloadId};
use crate::parse::Node;

/// The Secret a controller makes from `kind` `namespace/name` (a
/// SealedSecret, an ExternalSecret, a cert-manager Certificate), named
/// `target` (else `name`), with `keys`.
pub(super) fn made_secret(
    kind: &str,
    namespace: String,
    name: String,
    target: Option<String>,
    keys: BTreeSet<String>,
    immutable: bool,
) -> ConfigObject {
    ConfigObject {
        made_by: Some(format!("{kind}/{namespace}/{name}")),
        kept_on_prune: None,
        id: ObjectId {
            kind: ConfigKind::Secret,
            namespace,
            name: target.unwrap_or(name),
        },
        keys,
        binary_keys: BTreeSet::new(),
        value_digests: Default::default(),
        immutable,
        secret_type: None,
        hook: None,
        sync_wave: None,
    }
}

/// The Secret an ExternalSecret makes from `spec` (its own, or a
/// ClusterExternalSecret's `externalSecretSpec`), if it names every key:
/// `spec.target.name` (else its own name), with the `secretKey` of each
/// `spec.data` item, or the keys of `spec.target.template.data` (and those
/// too with `mergePolicy: Merge`). None when it makes no Secret of its own
/// (`creationPolicy` `None` or `Merge`, which writes into one the input
/// must hold), or when a `dataFrom` or a `templateFrom` brings keys that
/// only the provider knows: the live Secret must then be given.
pub(super) fn external_secret(
    spec: &Node,
    kind: &str,
    namespace: String,
    name: String,
    at: &str,
) -> Result<Option<ConfigObject>, InputError> {
    let target = spec.get("target");
    fn field<'a>(node: Option<&'a Node>, key: &str) -> Option<&'a str> {
        node.and_then(|n| n.get(key)).and_then(Node::as_str)
    }
    if matches!(field(target, "creationPolicy"), Some("None" | "Merge")) {
        return Ok(None);
    }
    let template = target.and_then(|t| t.get("template"));
    let present = |node: Option<&Node>| !matches!(node, None | Some(Node::Null));
    if present(spec.get("dataFrom")) || present(template.and_then(|t| t.get("templateFrom"))) {
        return Ok(None);
    }
    let mut keys = BTreeSet::new();
    let templated = template.filter(|t| present(t.get("data")));
    if let Some(t) = templated {
        keys.extend(key_names(t, "data", at, None)?);
    }
    if templated.is_none() || field(template, "mergePolicy") == Some("Merge") {
        match spec.get("data") {
            None | Some(Node::Null) => {}
            Some(list) => {
                keys.extend(data_list_names(
                    list,
                    "secretKey",
                    "ExternalSecret spec.data",
                    at,
                )?);
            }
        }
    }
    let immutable = matches!(
        template.and_then(|t| t.get("immutable")),
        Some(Node::Bool(true))
    );
    let target_name = target.and_then(|t| t.name_at("name")).map(str::to_owned);
    let mut made = made_secret(kind, namespace, name, target_name, keys, immutable);
    // The operator sets the template's type, if it gives one, on the
    // Secret it makes or updates; else the Secret keeps the type it has.
    made.secret_type = field(template, "type")
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    Ok(Some(made))
}

/// Drops each Secret a controller makes ([`made_secret`]) that the input
/// also holds as a real Secret (a live dump lists both): what the cluster
/// holds wins.
pub(super) fn settle(out: &mut Manifests) {
    let real: BTreeSet<ObjectId> = out
        .objects
        .iter()
        .filter(|o| o.made_by.is_none())
        .map(|o| o.id.clone())
        .collect();
    out.objects
        .retain(|o| o.made_by.is_none() || !real.contains(&o.id));
}

/// The group of the Gateway API, whose objects name Secrets and
/// ConfigMaps outside any pod spec.
pub(super) const GATEWAY_API: &str = "gateway.networking.k8s.io";

/// The groups of Traefik's and Contour's custom resources, which name
/// Secrets outside any pod spec ([`PROXY_SECRETS`]).
pub(super) const PROXY_GROUPS: [&str; 3] =
    ["traefik.io", "traefik.containo.us", "projectcontour.io"];

/// Where those resources name a Secret: Traefik's `IngressRoute` and
/// `IngressRouteTCP` (TLS), `TLSStore` (default certificate) and
/// `Middleware` (basic and digest auth users), and Contour's `HTTPProxy`
/// (TLS, client CA). Each path is under one kind only.
pub(super) const PROXY_SECRETS: [&str; 6] = [
    "spec.tls.secretName",
    "spec.defaultCertificate.secretName",
    "spec.basicAuth.secret",
    "spec.digestAuth.secret",
    "spec.virtualhost.tls.secretName",
    "spec.virtualhost.tls.clientValidation.caSecret",
];

/// Notes a reference that no pod reads (an Ingress's or a Gateway's TLS
/// Secret): reported as a warning, not checked.
pub(super) fn outside_pod_spec(
    out: &mut Manifests,
    kind: &str,
    ns: &str,
    name: &str,
    site: &str,
    object: ObjectId,
) {
    out.notes.push(Finding {
        severity: Severity::Warning,
        code: Code::OutsidePodSpec,
        workload: Some(WorkloadId {
            kind: kind.to_owned(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
        }),
        side: None,
        container: None,
        site: Some(site.to_owned()),
        object: Some(object),
        key: None,
        message: "reference outside a pod spec: reported, not checked".into(),
        source: None,
    });
}

/// The core-group Secrets and ConfigMaps a Gateway API object names in its
/// `certificateRefs` (kind `Secret` unless given), `caCertificateRefs`
/// (kind required) and `clientCertificateRef` (kind `Secret` unless given),
/// each with its path; a reference without a namespace is to the object's
/// own.
pub(super) fn certificate_refs(
    node: &Node,
    path: &str,
    ns: &str,
    out: &mut Vec<(String, ObjectId)>,
) {
    match node {
        Node::Map(entries) => {
            for (k, v) in entries {
                let here = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let mut list = |items: &[Node], default_kind| {
                    for (i, item) in items.iter().enumerate() {
                        if let Some(object) = object_ref(item, default_kind, ns) {
                            out.push((format!("{here}[{i}]"), object));
                        }
                    }
                };
                match (k.as_str(), v) {
                    ("certificateRefs", Node::Seq(items)) => list(items, Some("Secret")),
                    ("caCertificateRefs", Node::Seq(items)) => list(items, None),
                    // A Gateway's client certificate for its backends.
                    ("clientCertificateRef", Node::Map(_)) => {
                        if let Some(object) = object_ref(v, Some("Secret"), ns) {
                            out.push((here, object));
                        }
                    }
                    _ => certificate_refs(v, &here, ns, out),
                }
            }
        }
        Node::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                certificate_refs(v, &format!("{path}[{i}]"), ns, out);
            }
        }
        _ => {}
    }
}

/// A Gateway API object reference (`group`, `kind`, `name`, `namespace`)
/// to a core-group Secret or ConfigMap; `None` for anything else.
pub(super) fn object_ref(item: &Node, default_kind: Option<&str>, ns: &str) -> Option<ObjectId> {
    let field = |f: &str| item.get(f).and_then(Node::as_str);
    let kind = match (field("group").unwrap_or(""), field("kind").or(default_kind)) {
        ("", Some("Secret")) => ConfigKind::Secret,
        ("", Some("ConfigMap")) => ConfigKind::ConfigMap,
        _ => return None,
    };
    let name = item.name_at("name")?;
    Some(ObjectId {
        kind,
        namespace: field("namespace").unwrap_or(ns).to_owned(),
        name: name.to_owned(),
    })
}
