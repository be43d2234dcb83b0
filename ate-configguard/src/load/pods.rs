//! Every reference site of a pod spec, per container and volume.

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EphemeralContainer, KeyToPath, PodSpec, Volume, VolumeMount,
};

use crate::model::{ConfigKind, Reference};

pub(super) fn nonempty<'a>(what: &str, s: &'a str) -> Result<&'a str, String> {
    if s.is_empty() {
        Err(format!("{what} is empty"))
    } else {
        Ok(s)
    }
}

/// A reference an operator resource makes, read into a pod spec of its
/// own (an env entry of the `references` container, or a volume, each
/// named by the resource's field path, `spec....`), is named by that
/// field path alone, without a container the resource does not have. A
/// real volume's name is a DNS label (no dots), so none starts `spec.`.
fn operator_site(container: Option<&str>, site: String) -> (Option<&str>, String) {
    let path = match container {
        Some("references") => site
            .strip_prefix("env[")
            .and_then(|rest| rest.rsplit_once("].valueFrom."))
            .map(|(path, _)| path),
        Some(_) => None,
        None => site
            .strip_prefix("volumes[")
            .and_then(|rest| rest.rsplit_once("]."))
            .filter(|(_, source)| matches!(*source, "secret" | "configMap"))
            .map(|(path, _)| path),
    };
    match path.filter(|p| p.starts_with("spec.")) {
        Some(path) => (None, path.to_owned()),
        None => (container, site),
    }
}

pub(super) struct Refs(Vec<Reference>);

impl Refs {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        container: Option<&str>,
        site: String,
        kind: ConfigKind,
        name: &str,
        key: Option<&str>,
        bulk: bool,
        optional: Option<bool>,
    ) -> Result<(), String> {
        nonempty(&format!("{site} name"), name)?;
        if let Some(k) = key {
            nonempty(&format!("{site} key"), k)?;
        }
        let (container, site) = operator_site(container, site);
        self.0.push(Reference {
            container: container.map(str::to_owned),
            site,
            kind,
            name: name.to_owned(),
            key: key.map(str::to_owned),
            bulk,
            optional: optional.unwrap_or(false),
            unprojected: false,
        });
        Ok(())
    }

    /// A `subPath` whose `file` no item of the volume's `items` projects.
    fn unprojected(
        &mut self,
        container: &str,
        site: String,
        kind: ConfigKind,
        name: &str,
        file: &str,
        optional: Option<bool>,
    ) -> Result<(), String> {
        self.push(
            Some(container),
            site,
            kind,
            name,
            Some(file),
            false,
            optional,
        )?;
        if let Some(last) = self.0.last_mut() {
            last.unprojected = true;
        }
        Ok(())
    }
}

/// A `subPath` on a projected volume: the item of a ConfigMap or Secret
/// source that projects `file` is a key reference; if every such source
/// lists `items` and none projects it, the mount is an empty directory.
/// (With a source that projects every key, any of them may hold it: not
/// decided here.)
fn projected_sub_path(
    r: &mut Refs,
    c: &str,
    site: &str,
    p: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    file: &str,
) -> Result<(), String> {
    let mut first = None;
    for source in p.sources.iter().flatten() {
        let config = source
            .config_map
            .as_ref()
            .map(|cm| {
                (
                    ConfigKind::ConfigMap,
                    cm.name.as_str(),
                    &cm.items,
                    cm.optional,
                )
            })
            .or_else(|| {
                source
                    .secret
                    .as_ref()
                    .map(|s| (ConfigKind::Secret, s.name.as_str(), &s.items, s.optional))
            });
        let Some((kind, name, items, optional)) = config else {
            continue;
        };
        let Some(items) = items else {
            return Ok(());
        };
        first.get_or_insert((kind, name, optional));
        if let Some(item) = items
            .iter()
            .find(|i| i.path.split('/').next() == Some(file))
        {
            return r.push(
                Some(c),
                site.to_owned(),
                kind,
                name,
                Some(&item.key),
                false,
                optional,
            );
        }
    }
    match first {
        Some((kind, name, optional)) => {
            r.unprojected(c, site.to_owned(), kind, name, file, optional)
        }
        None => Ok(()),
    }
}

/// A mount's `subPath`, or a `subPathExpr` with nothing to expand; an
/// expression with variables on a ConfigMap or Secret volume cannot be
/// checked against the files it projects, and is refused (fail closed).
fn literal_sub_path(m: &VolumeMount, on_config: bool) -> Result<Option<&str>, String> {
    if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
        return Ok(Some(sub));
    }
    match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(expr) if !expr.contains("$(") => Ok(Some(expr)),
        Some(expr) if on_config => Err(format!(
            "volumeMounts[{}].subPathExpr {expr:?} expands variables only the kubelet knows, \
             so the file it picks from the ConfigMap or Secret volume cannot be checked: \
             use subPath, or mount the volume whole",
            m.name
        )),
        Some(_) => Ok(None),
    }
}

impl Refs {
    /// A configMap/secret volume or projection: with `items`, one key
    /// reference per item; without, a bulk load of every key.
    fn source(
        &mut self,
        site: String,
        kind: ConfigKind,
        name: &str,
        items: Option<&[KeyToPath]>,
        optional: Option<bool>,
    ) -> Result<(), String> {
        match items {
            None => self.push(None, site, kind, name, None, true, optional),
            Some(items) => items.iter().try_for_each(|i| {
                self.push(
                    None,
                    format!("{site}.items"),
                    kind,
                    name,
                    Some(&i.key),
                    false,
                    optional,
                )
            }),
        }
    }
}

pub(super) fn container_refs(
    r: &mut Refs,
    c: &str,
    env: Option<&Vec<EnvVar>>,
    env_from: Option<&Vec<EnvFromSource>>,
) -> Result<(), String> {
    for e in env.into_iter().flatten() {
        let Some(from) = &e.value_from else { continue };
        if let Some(s) = &from.config_map_key_ref {
            r.push(
                Some(c),
                format!("env[{}].valueFrom.configMapKeyRef", e.name),
                ConfigKind::ConfigMap,
                &s.name,
                Some(&s.key),
                false,
                s.optional,
            )?;
        }
        if let Some(s) = &from.secret_key_ref {
            r.push(
                Some(c),
                format!("env[{}].valueFrom.secretKeyRef", e.name),
                ConfigKind::Secret,
                &s.name,
                Some(&s.key),
                false,
                s.optional,
            )?;
        }
        // fileKeyRef reads a file from a volume: not a ConfigMap/Secret.
    }
    for (i, e) in env_from.into_iter().flatten().enumerate() {
        let prefix = e
            .prefix
            .as_deref()
            .map(|p| format!(" (prefix {p})"))
            .unwrap_or_default();
        if let Some(s) = &e.config_map_ref {
            r.push(
                Some(c),
                format!("envFrom[{i}].configMapRef{prefix}"),
                ConfigKind::ConfigMap,
                &s.name,
                None,
                true,
                s.optional,
            )?;
        }
        if let Some(s) = &e.secret_ref {
            r.push(
                Some(c),
                format!("envFrom[{i}].secretRef{prefix}"),
                ConfigKind::Secret,
                &s.name,
                None,
                true,
                s.optional,
            )?;
        }
    }
    Ok(())
}

pub(super) fn subpath_refs(
    r: &mut Refs,
    c: &str,
    mounts: Option<&Vec<VolumeMount>>,
    volumes: &[Volume],
) -> Result<(), String> {
    for m in mounts.into_iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            continue;
        };
        let on_config = v.config_map.is_some() || v.secret.is_some() || v.projected.is_some();
        let Some(sub) = literal_sub_path(m, on_config)? else {
            continue;
        };
        // The first path component is the file, i.e. the key (or item path).
        let file = sub.split('/').next().unwrap_or(sub);
        let site = format!("volumeMounts[{}].subPath", m.name);
        if let Some(cm) = &v.config_map {
            match &cm.items {
                None => r.push(
                    Some(c),
                    site.clone(),
                    ConfigKind::ConfigMap,
                    &cm.name,
                    Some(file),
                    false,
                    cm.optional,
                )?,
                Some(items) => {
                    if let Some(item) = items
                        .iter()
                        .find(|i| i.path.split('/').next() == Some(file))
                    {
                        r.push(
                            Some(c),
                            site.clone(),
                            ConfigKind::ConfigMap,
                            &cm.name,
                            Some(&item.key),
                            false,
                            cm.optional,
                        )?;
                    } else {
                        r.unprojected(
                            c,
                            site.clone(),
                            ConfigKind::ConfigMap,
                            &cm.name,
                            file,
                            cm.optional,
                        )?;
                    }
                }
            }
        }
        if let Some(p) = &v.projected {
            projected_sub_path(r, c, &site, p, file)?;
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.as_deref().unwrap_or("");
            match &s.items {
                None => r.push(
                    Some(c),
                    site.clone(),
                    ConfigKind::Secret,
                    name,
                    Some(file),
                    false,
                    s.optional,
                )?,
                Some(items) => {
                    if let Some(item) = items
                        .iter()
                        .find(|i| i.path.split('/').next() == Some(file))
                    {
                        r.push(
                            Some(c),
                            site.clone(),
                            ConfigKind::Secret,
                            name,
                            Some(&item.key),
                            false,
                            s.optional,
                        )?;
                    } else {
                        r.unprojected(c, site.clone(), ConfigKind::Secret, name, file, s.optional)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every ConfigMap/Secret reference a pod spec makes.
///
/// # Errors
///
/// A message naming the site of a reference without a name or key.
pub fn pod_references(spec: &PodSpec) -> Result<Vec<Reference>, String> {
    let mut r = Refs(Vec::new());
    let volumes: &[Volume] = spec.volumes.as_deref().unwrap_or(&[]);
    // A container without a name (a custom resource's template may leave
    // it out: Knative's does) is named by its place in its list.
    let named = |list: &str, i: usize, name: &str| {
        if name.is_empty() {
            format!("{list}[{i}]")
        } else {
            name.to_owned()
        }
    };
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (named("containers", i, &c.name), c))
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, c)| (named("initContainers", i, &c.name), c)),
        );
    for (name, c) in containers {
        let c: &Container = c;
        container_refs(&mut r, &name, c.env.as_ref(), c.env_from.as_ref())?;
        subpath_refs(&mut r, &name, c.volume_mounts.as_ref(), volumes)?;
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let c: &EphemeralContainer = c;
        let name = named("ephemeralContainers", i, &c.name);
        container_refs(&mut r, &name, c.env.as_ref(), c.env_from.as_ref())?;
        subpath_refs(&mut r, &name, c.volume_mounts.as_ref(), volumes)?;
    }
    for v in volumes {
        volume_refs(&mut r, v)?;
    }
    for (i, s) in spec.image_pull_secrets.iter().flatten().enumerate() {
        r.push(
            None,
            format!("imagePullSecrets[{i}]"),
            ConfigKind::Secret,
            &s.name,
            None,
            false,
            None,
        )?;
    }
    Ok(r.0)
}

/// The ConfigMaps and Secrets volume `v` mounts: whole or by `items`, as a
/// volume of its own or as a projected volume's sources, and the Secrets
/// that volume plugins are handed.
fn volume_refs(r: &mut Refs, v: &Volume) -> Result<(), String> {
    let base = format!("volumes[{}]", v.name);
    // (site, kind, name, items, optional) of every ConfigMap/Secret source.
    let mut sources = Vec::new();
    if let Some(cm) = &v.config_map {
        let items = cm.items.as_deref();
        sources.push((
            "configMap".to_owned(),
            ConfigKind::ConfigMap,
            cm.name.as_str(),
            items,
            cm.optional,
        ));
    }
    if let Some(s) = &v.secret {
        let name = s.secret_name.as_deref().unwrap_or("");
        sources.push((
            "secret".to_owned(),
            ConfigKind::Secret,
            name,
            s.items.as_deref(),
            s.optional,
        ));
    }
    for (n, src) in v
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten())
        .enumerate()
    {
        if let Some(cm) = &src.config_map {
            let site = format!("projected.sources[{n}].configMap");
            sources.push((
                site,
                ConfigKind::ConfigMap,
                cm.name.as_str(),
                cm.items.as_deref(),
                cm.optional,
            ));
        }
        if let Some(s) = &src.secret {
            let site = format!("projected.sources[{n}].secret");
            sources.push((
                site,
                ConfigKind::Secret,
                s.name.as_str(),
                s.items.as_deref(),
                s.optional,
            ));
        }
    }
    for (site, kind, name, items, optional) in sources {
        r.source(format!("{base}.{site}"), kind, name, items, optional)?;
    }
    plugin_secret_refs(r, v, &base)
}

/// Volume types that name a Secret: the plugin is handed every key of it
/// (the keys it reads are its own business), so the Secret is loaded
/// whole, as by a volume without `items`: a key it loses may be one a
/// mount needs, and a pod that cannot mount never starts.
fn plugin_secret_refs(r: &mut Refs, v: &Volume, base: &str) -> Result<(), String> {
    let mut secret_site = |site: &str, name: &str| {
        debug_assert!(crate::model::PLUGIN_SECRET_SITES.contains(&site));
        r.push(
            None,
            format!("{base}.{site}"),
            ConfigKind::Secret,
            name,
            None,
            true,
            None,
        )
    };
    if let Some(s) = v
        .csi
        .as_ref()
        .and_then(|c| c.node_publish_secret_ref.as_ref())
    {
        secret_site("csi.nodePublishSecretRef", &s.name)?;
    }
    if let Some(s) = v.cephfs.as_ref().and_then(|c| c.secret_ref.as_ref()) {
        secret_site("cephfs.secretRef", &s.name)?;
    }
    if let Some(s) = v.rbd.as_ref().and_then(|c| c.secret_ref.as_ref()) {
        secret_site("rbd.secretRef", &s.name)?;
    }
    if let Some(s) = v.iscsi.as_ref().and_then(|c| c.secret_ref.as_ref()) {
        secret_site("iscsi.secretRef", &s.name)?;
    }
    if let Some(s) = v.cinder.as_ref().and_then(|c| c.secret_ref.as_ref()) {
        secret_site("cinder.secretRef", &s.name)?;
    }
    if let Some(s) = v.flex_volume.as_ref().and_then(|c| c.secret_ref.as_ref()) {
        secret_site("flexVolume.secretRef", &s.name)?;
    }
    if let Some(s) = v.storageos.as_ref().and_then(|c| c.secret_ref.as_ref()) {
        secret_site("storageos.secretRef", &s.name)?;
    }
    if let Some(c) = &v.scale_io {
        secret_site("scaleIO.secretRef", &c.secret_ref.name)?;
    }
    if let Some(c) = &v.azure_file {
        secret_site("azureFile.secretName", &c.secret_name)?;
    }
    Ok(())
}
