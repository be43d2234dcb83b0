//! [`LoadOptions`]: how manifests are read, and [`bad`], the input error
//! at one place of them.

use std::collections::BTreeSet;

use crate::error::InputError;

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
    /// as running it ([`Workload::template_from`](crate::model::Workload::template_from)). Any other unknown kind
    /// that carries a pod template, runs another's, or whose containers
    /// read a ConfigMap or Secret through their environment, is an input
    /// error.
    pub allow_kinds: BTreeSet<String>,
    /// The label selector of a prune (`kubectl apply --prune -l`): an
    /// object whose labels do not match is never pruned. Each term is a
    /// label that must be present (`(key, None)`) or equal (`(key,
    /// Some(value))`); empty, every object the applier owns may be.
    /// [`parse_selector`](crate::load::parse_selector) reads `app=web,tier`.
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
