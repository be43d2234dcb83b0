//! Typed k8s-openapi objects read into the same names-only model.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{NOT_A_NAMESPACE, is_namespace_name, object_name_ok};
use super::nodes::{add_control_plane_keys, workload};
use super::options::bad;
use super::order::{Order, order_from};
use crate::error::InputError;
use crate::model::{ConfigKind, ConfigObject, ObjectId, ServiceAccount, Workload};
use crate::parse::value_digest;

/// Typed objects, for a service that holds them already (read with
/// `kube`, say) instead of manifests: only their names are taken.
impl ConfigObject {
    /// A ConfigMap's key names (`data` and `binaryData`); its values are
    /// not read. `default_namespace` is used if it names none.
    ///
    /// # Errors
    ///
    /// [`InputError::Invalid`] if it has no name.
    pub fn from_config_map(cm: &ConfigMap, default_namespace: &str) -> Result<Self, InputError> {
        let keys = cm
            .data
            .iter()
            .flat_map(BTreeMap::keys)
            .chain(cm.binary_data.iter().flat_map(BTreeMap::keys))
            .cloned()
            .collect();
        let mut object = typed_object(
            ConfigKind::ConfigMap,
            &cm.metadata,
            default_namespace,
            keys,
            cm.immutable,
            None,
        )?;
        object.binary_keys = cm
            .binary_data
            .iter()
            .flat_map(BTreeMap::keys)
            .cloned()
            .collect();
        if object.immutable {
            object.value_digests = text_digests(cm.data.iter().flatten())
                .chain(base64_digests(cm.binary_data.iter().flatten()))
                .collect();
        }
        Ok(object)
    }

    /// A Secret's key names (`data` and `stringData`, and for a
    /// service-account token Secret the keys the control plane writes) and
    /// its `type`; its values are not read. `default_namespace` is used if
    /// it names none.
    ///
    /// # Errors
    ///
    /// [`InputError::Invalid`] if it has no name.
    pub fn from_secret(secret: &Secret, default_namespace: &str) -> Result<Self, InputError> {
        let mut keys: BTreeSet<String> = secret
            .data
            .iter()
            .flat_map(BTreeMap::keys)
            .chain(secret.string_data.iter().flat_map(BTreeMap::keys))
            .cloned()
            .collect();
        add_control_plane_keys(secret.type_.as_deref(), &mut keys);
        let mut object = typed_object(
            ConfigKind::Secret,
            &secret.metadata,
            default_namespace,
            keys,
            secret.immutable,
            secret.type_.clone().filter(|t| !t.is_empty()),
        )?;
        if object.immutable {
            // stringData overwrites data, as the API server applies it.
            object.value_digests = base64_digests(secret.data.iter().flatten())
                .chain(text_digests(secret.string_data.iter().flatten()))
                .collect();
        }
        Ok(object)
    }
}

/// The keyed digests of text values, as the manifest loader takes them.
fn text_digests<'a>(
    values: impl Iterator<Item = (&'a String, &'a String)>,
) -> impl Iterator<Item = (String, u64)> {
    values.map(|(k, v)| (k.clone(), value_digest(v.as_bytes())))
}

/// The keyed digests of binary values, taken of their base64 text as a
/// manifest spells it (k8s-openapi writes a `ByteString` as standard
/// base64), so a typed object and its manifest agree.
fn base64_digests<'a>(
    values: impl Iterator<Item = (&'a String, &'a ByteString)>,
) -> impl Iterator<Item = (String, u64)> {
    values.filter_map(|(k, v)| match serde_json::to_value(v).ok()? {
        serde_json::Value::String(text) => Some((k.clone(), value_digest(text.as_bytes()))),
        _ => None,
    })
}

pub(super) fn typed_object(
    kind: ConfigKind,
    meta: &ObjectMeta,
    default_namespace: &str,
    keys: BTreeSet<String>,
    immutable: Option<bool>,
    secret_type: Option<String>,
) -> Result<ConfigObject, InputError> {
    let (namespace, name, order) =
        typed_meta(&kind.to_string(), meta, default_namespace, |at, name| {
            object_name_ok(kind, name, at)
        })?;
    Ok(ConfigObject {
        value_digests: Default::default(),
        id: ObjectId {
            kind,
            namespace,
            name,
        },
        keys,
        binary_keys: BTreeSet::new(),
        immutable: immutable.unwrap_or(false),
        secret_type,
        hook: order.hook,
        sync_wave: order.sync_wave,
        made_by: None,
        kept_on_prune: order.kept_on_prune,
    })
}

/// A typed object's namespace (`default_namespace` if it names none) and
/// name, which `name_ok` checks, and when it is applied (its hook and sync
/// wave annotations).
pub(super) fn typed_meta(
    kind: &str,
    meta: &ObjectMeta,
    default_namespace: &str,
    name_ok: impl Fn(&str, &str) -> Result<(), InputError>,
) -> Result<(String, String, Order), InputError> {
    let name = meta
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad(kind, "metadata.name is missing"))?;
    let at = format!("{kind}/{name}");
    name_ok(&at, &name)?;
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| default_namespace.to_owned());
    if !is_namespace_name(&namespace) {
        return Err(bad(
            &at,
            format!("namespace {namespace:?} {NOT_A_NAMESPACE}"),
        ));
    }
    let order = order_from(
        |a| {
            Ok(meta
                .annotations
                .as_ref()
                .and_then(|m| m.get(a))
                .map(String::as_str))
        },
        &at,
    )?;
    Ok((namespace, name, order))
}

impl ServiceAccount {
    /// A typed ServiceAccount's `imagePullSecrets` names, and its hook and
    /// sync wave annotations (when the change applies it, see
    /// [`ServiceAccount::hook`]), as the manifest reader takes them.
    /// `default_namespace` is used if it names none.
    ///
    /// # Errors
    ///
    /// [`InputError::Invalid`] if it has no name, or names a pull secret
    /// without one, or a hook annotation is not one Helm or Argo CD reads.
    pub fn from_service_account(
        account: &k8s_openapi::api::core::v1::ServiceAccount,
        default_namespace: &str,
    ) -> Result<Self, InputError> {
        let (namespace, name, order) = typed_meta(
            "ServiceAccount",
            &account.metadata,
            default_namespace,
            |_, _| Ok(()),
        )?;
        let image_pull_secrets = (account.image_pull_secrets.iter().flatten())
            .map(|s| match s.name.as_str() {
                "" => Err(bad(
                    &format!("ServiceAccount/{name}"),
                    format!("ServiceAccount {name}: an imagePullSecrets name is empty"),
                )),
                secret => Ok(secret.to_owned()),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            namespace,
            name,
            image_pull_secrets,
            hook: order.hook,
            sync_wave: order.sync_wave,
        })
    }
}

impl Workload {
    /// A serving workload of kind `kind` (`Deployment`, or your own) whose
    /// pods run `spec`: every reference it makes, as the manifest reader
    /// finds them. A pod spec carries no annotations: for a workload that
    /// runs as a Helm or Argo CD hook, set [`Workload::hook`]; for
    /// one in an Argo CD sync wave, [`Workload::sync_wave`].
    ///
    /// # Errors
    ///
    /// [`InputError::Invalid`] naming the workload and the site of a
    /// reference without a name or key.
    pub fn from_pod_spec(
        kind: &str,
        namespace: &str,
        name: &str,
        spec: &PodSpec,
    ) -> Result<Self, InputError> {
        let at = format!("{kind}/{namespace}/{name}");
        workload(kind, namespace.to_owned(), name.to_owned(), spec, None, &at)
    }
}
