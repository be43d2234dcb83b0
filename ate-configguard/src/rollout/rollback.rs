//! The rollback contract: from the live state, the image each container
//! runs now, by digest where the live pods say which, and the command
//! that puts exactly that back.

use serde::{Deserialize, Serialize};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::fleet::{Fleet, RolloutObject};
use super::image::parse;
use super::units::{Shape, Unit, selector_matches, units};
use crate::model::{Code, Finding, Severity, WorkloadId};

/// What to restore for one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackEntry {
    /// The workload.
    pub workload: WorkloadId,
    /// The container (an init container's name where `init`).
    pub container: String,
    /// Whether it is an init container.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub init: bool,
    /// The image it runs now, as a full reference: `NAME@DIGEST` where the
    /// digest is known, else the reference as the spec names it.
    pub image: String,
    /// Whether `image` is pinned by digest: a rollback to it gets the same
    /// bytes.
    pub exact: bool,
    /// The command that restores it (`kubectl set image`, whose argument
    /// takes the full reference; never spliced into a tag field).
    pub restore: String,
}

/// The rollback plan: one entry per workload and container, and what
/// keeps it from being exact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackPlan {
    /// The plan's format version ([`RollbackPlan::VERSION`]).
    pub version: u32,
    /// The entries.
    pub entries: Vec<RollbackEntry>,
    /// Containers whose rollback would not be exact (a tag with no digest
    /// known), and pods that disagree.
    pub warnings: Vec<Finding>,
}

impl RollbackPlan {
    /// The format version this build writes.
    pub const VERSION: u32 = 1;
}

/// The repository digest a container status's `imageID` names
/// (`docker-pullable://repo@sha256:...`, `repo@sha256:...`), if it names
/// one (a bare `sha256:...` is the local image's id, not a registry's).
fn status_digest(image_id: &str) -> Option<&str> {
    let (_, digest) = image_id.rsplit_once('@')?;
    digest.contains(':').then_some(digest)
}

/// Whether `pod` belongs to `unit`: its namespace, labels that the
/// workload's selector matches, and the same image in `container`'s spec
/// (a pod of an older revision runs another).
fn runs(unit: &Unit<'_>, pod: &Pod, container: &Container, init: bool) -> bool {
    if pod.metadata.namespace.as_deref().unwrap_or("default") != unit.id.namespace {
        return false;
    }
    let selector = match unit.shape {
        Shape::Deployment(d) => Some(&d.spec.selector),
        Shape::StatefulSet(s) => Some(&s.spec.selector),
        Shape::DaemonSet(d) => Some(&d.spec.selector),
        Shape::Other => None,
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let Some(selector) = selector else {
        return false;
    };
    if selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
    {
        return false;
    }
    if !selector_matches(selector, &labels) {
        return false;
    }
    let spec = pod.spec.as_ref();
    let list = if init {
        spec.and_then(|s| s.init_containers.as_ref())
    } else {
        spec.map(|s| &s.containers)
    };
    list.into_iter()
        .flatten()
        .any(|c| c.name == container.name && c.image == container.image)
}

/// The rollback plan for the workloads of `fleet` (a live state: `kubectl
/// get deploy,sts,ds,pod -o yaml`). It reads, and never runs anything.
///
/// ```
/// use ate_configguard::LoadOptions;
/// use ate_configguard::rollout::{load_str, rollback_plan};
///
/// let live = load_str(r#"
/// apiVersion: apps/v1
/// kind: Deployment
/// metadata: {name: web, namespace: prod}
/// spec:
///   selector: {matchLabels: {app: web}}
///   template:
///     metadata: {labels: {app: web}}
///     spec: {containers: [{name: web, image: "registry.example/web:1.4"}]}
/// ---
/// apiVersion: v1
/// kind: Pod
/// metadata: {name: web-1, namespace: prod, labels: {app: web}}
/// spec: {containers: [{name: web, image: "registry.example/web:1.4"}]}
/// status:
///   containerStatuses:
///     - name: web
///       image: registry.example/web:1.4
///       imageID: registry.example/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
///       ready: true
///       restartCount: 0
/// "#, "live.yaml", &LoadOptions::default())?;
/// let plan = rollback_plan(&live);
/// let entry = &plan.entries[0];
/// assert!(entry.exact);
/// assert_eq!(
///     entry.restore,
///     "kubectl -n prod set image deployment/web web=registry.example/web@sha256:\
///      0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
/// );
/// # Ok::<(), ate_configguard::InputError>(())
/// ```
pub fn rollback_plan(fleet: &Fleet) -> RollbackPlan {
    let pods: Vec<&Pod> = fleet
        .objects
        .iter()
        .filter_map(|(o, _)| match o {
            RolloutObject::Pod(p) => Some(&**p),
            _ => None,
        })
        .collect();
    let mut entries = Vec::new();
    let mut warnings = Vec::new();
    for unit in units(fleet) {
        let resource = match unit.shape {
            Shape::Deployment(_) => "deployment",
            Shape::StatefulSet(_) => "statefulset",
            Shape::DaemonSet(_) => "daemonset",
            Shape::Other => continue,
        };
        let init = unit
            .template
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or(&[]);
        let all = unit
            .containers()
            .iter()
            .map(|c| (c, false))
            .chain(init.iter().map(|c| (c, true)));
        for (c, is_init) in all {
            let warn = |message: String| {
                unit.finding(
                    Code::ImageIdentity,
                    Severity::Warning,
                    Some(&c.name),
                    Some("image".into()),
                    message,
                )
            };
            let reference = c.image.as_deref().unwrap_or("");
            let parsed = match parse(reference) {
                Ok(p) => p,
                Err(why) => {
                    warnings.push(warn(format!(
                        "image {reference:?} is {why}: no rollback entry can name it"
                    )));
                    continue;
                }
            };
            let mut digests: Vec<&str> = pods
                .iter()
                .filter(|p| runs(&unit, p, c, is_init))
                .filter_map(|p| {
                    let status = p.status.as_ref()?;
                    let list = if is_init {
                        status.init_container_statuses.as_ref()
                    } else {
                        status.container_statuses.as_ref()
                    };
                    list?.iter().find(|s| s.name == c.name)
                })
                .filter_map(|s| status_digest(&s.image_id))
                .collect();
            digests.sort_unstable();
            digests.dedup();
            let (image, exact) = match (&parsed.digest, digests.as_slice()) {
                (Some(d), _) => (format!("{}@{d}", parsed.name), true),
                (None, [d]) => (format!("{}@{d}", parsed.name), true),
                (None, []) => {
                    warnings.push(warn(format!(
                        "image {reference} is a tag and no live pod says which digest it runs: a \
                         rollback to it may get other bytes; pin a digest"
                    )));
                    (reference.to_owned(), false)
                }
                (None, many) => {
                    warnings.push(warn(format!(
                        "its live pods run {} digests of {reference}: the tag moved while they \
                         started; a rollback cannot name one image for all",
                        many.len()
                    )));
                    (reference.to_owned(), false)
                }
            };
            let restore = format!(
                "kubectl -n {} set image {resource}/{} {}={image}",
                unit.id.namespace, unit.id.name, c.name
            );
            entries.push(RollbackEntry {
                workload: unit.id.clone(),
                container: c.name.clone(),
                init: is_init,
                image,
                exact,
                restore,
            });
        }
    }
    RollbackPlan {
        version: RollbackPlan::VERSION,
        entries,
        warnings,
    }
}
