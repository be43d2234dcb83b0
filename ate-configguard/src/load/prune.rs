//! What a prune deletes: the label selector, and which live objects the
//! applier owns.

use super::options::{LoadOptions, bad};
use crate::error::InputError;
use crate::parse::Node;

/// Reads a label selector of equality and existence terms, as
/// `kubectl -l` takes them: `app=web,tier` (`==` too).
///
/// # Errors
///
/// [`InputError::Invalid`] naming the term that is neither (`!=`, set
/// terms such as `env in (a)`, an empty key).
pub fn parse_selector(s: &str) -> Result<Vec<(String, Option<String>)>, InputError> {
    let mut terms = Vec::new();
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let unsupported = || {
            bad(
                "--prune-selector",
                format!("{term:?} is not a supported term: use key=value or key"),
            )
        };
        if term.contains("!=") || term.contains(' ') || term.contains('(') {
            return Err(unsupported());
        }
        let (key, value) = match term.split_once("==").or_else(|| term.split_once('=')) {
            Some((k, v)) => (k.trim(), Some(v.trim().to_owned())),
            None => (term, None),
        };
        if key.is_empty() || key.starts_with('!') {
            return Err(unsupported());
        }
        terms.push((key.to_owned(), value));
    }
    Ok(terms)
}

/// Why a prune (`--prune`) keeps the object `doc`, if it does, beyond
/// its annotations: an object read from a live dump (it has a `uid` or a
/// `resourceVersion`) that the applier does not own, or one outside the
/// prune's label selector. `kubectl apply --prune`, Helm and Argo CD
/// delete only what they applied: a live object is the applier's when it
/// carries kubectl's last-applied annotation or an `Apply` entry in
/// `managedFields`, Helm's release annotations or managed-by label, or
/// Argo CD's tracking annotation or label (`app.kubernetes.io/instance`,
/// its default, or `argocd.argoproj.io/instance`); never one with
/// `ownerReferences` (its owner makes and deletes it), nor one another
/// manager wrote (a Job's `kubectl create`, a controller). Objects read
/// from manifests are the applier's own.
pub(super) fn not_pruned(doc: &Node, options: &LoadOptions) -> Option<String> {
    let meta = doc.get("metadata");
    let field = |name: &str| meta.and_then(|m| m.get(name));
    let labels = field("labels");
    if !options.prune_selector.is_empty() {
        let matches = options.prune_selector.iter().all(|(key, value)| {
            match (labels.and_then(|l| l.get(key)), value) {
                (Some(have), Some(want)) => have.as_str() == Some(want.as_str()),
                (Some(_), None) => true,
                (None, _) => false,
            }
        });
        if !matches {
            return Some("outside the prune's label selector (--prune-selector)".into());
        }
    }
    let live = field("uid").is_some() || field("resourceVersion").is_some();
    if !live {
        return None;
    }
    if matches!(field("ownerReferences"), Some(Node::Seq(refs)) if !refs.is_empty()) {
        return Some(
            "ownerReferences: its owner makes and deletes it, an apply never prunes it".into(),
        );
    }
    let annotated = |key: &str| field("annotations").and_then(|a| a.get(key)).is_some();
    let labelled = |key: &str| labels.and_then(|l| l.get(key)).is_some();
    let applied = annotated("kubectl.kubernetes.io/last-applied-configuration")
        || annotated("meta.helm.sh/release-name")
        || annotated("argocd.argoproj.io/tracking-id")
        || labels
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .and_then(Node::as_str)
            .is_some_and(|m| m.eq_ignore_ascii_case("helm"))
        // Argo CD's tracking label: `app.kubernetes.io/instance` by
        // default (label tracking), or the key an install configures.
        || labelled("app.kubernetes.io/instance")
        || labelled("argocd.argoproj.io/instance")
        || matches!(field("managedFields"), Some(Node::Seq(entries))
            if entries.iter().any(|e| e.get("operation").and_then(Node::as_str) == Some("Apply")));
    (!applied).then(|| {
        "written by another manager (no kubectl last-applied annotation, apply entry in \
         managedFields, Helm or Argo CD tracking): an apply never prunes it"
            .into()
    })
}
