//! Whether a workload's pod template is one the API server would take:
//! a render cut short at a line boundary is still valid YAML, and reads
//! as a template that lost its volumes or kept half a container list.
//!
//! Invariant: a template the API server's validation refuses (a mount of
//! a volume it does not declare, two containers of one name) is unusable
//! input, never a state the check passes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodSpec};

/// `Ok` for a template whose containers' names are unique and whose
/// mounts and devices name declared volumes (or `claims`, a StatefulSet's
/// `volumeClaimTemplates`); else what the API server would refuse.
pub(super) fn check(spec: &PodSpec, claims: &BTreeSet<String>) -> Result<(), String> {
    let volumes: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .chain(claims.iter().map(String::as_str))
        .collect();
    let containers: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .collect();
    let mut names = BTreeSet::new();
    for c in &containers {
        if !c.name.is_empty() && !names.insert(c.name.as_str()) {
            return Err(format!(
                "two containers are named {:?}, which the API server refuses (a render cut or \
                 merged wrong?)",
                c.name
            ));
        }
        let mounted = c.volume_mounts.iter().flatten().map(|m| m.name.as_str());
        let devices = c.volume_devices.iter().flatten().map(|d| d.name.as_str());
        if let Some(missing) = mounted.chain(devices).find(|n| !volumes.contains(n)) {
            return Err(format!(
                "container {:?} mounts volume {missing:?}, which the pod template does not \
                 declare: the API server refuses it (a render cut short after `volumes:`?)",
                c.name
            ));
        }
    }
    Ok(())
}
