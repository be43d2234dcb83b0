//! From documents to the names-only model: config objects, workloads and
//! every reference site of their pod templates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvFromSource, EnvVar, EphemeralContainer, KeyToPath, PodSpec, Secret,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

use crate::InputError;
use crate::model::{Code, Place};
use crate::model::{
    ConfigKind, ConfigObject, Finding, Hook, HookPhase, Manifests, ObjectId, PULL_SECRET_TYPES,
    Reference, ServiceAccount, Severity, Workload, WorkloadId,
};
use crate::operator;
use crate::parse::{DATA_LIST, NOT_A_STRING, Node, VALUE_BYTES, documents, without_bom};

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
    /// as running it ([`Workload::template_from`]). Any other unknown kind
    /// that carries a pod template, runs another's, or whose containers
    /// read a ConfigMap or Secret through their environment, is an input
    /// error.
    pub allow_kinds: BTreeSet<String>,
    /// The label selector of a prune (`kubectl apply --prune -l`): an
    /// object whose labels do not match is never pruned. Each term is a
    /// label that must be present (`(key, None)`) or equal (`(key,
    /// Some(value))`); empty, every object the applier owns may be.
    /// [`parse_selector`] reads `app=web,tier`.
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
/// Argo CD's tracking annotation or label; never one with
/// `ownerReferences` (its owner makes and deletes it), nor one another
/// manager wrote (a Job's `kubectl create`, a controller). Objects read
/// from manifests are the applier's own.
fn not_pruned(doc: &Node, options: &LoadOptions) -> Option<String> {
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
        || labelled("argocd.argoproj.io/instance")
        || matches!(field("managedFields"), Some(Node::Seq(entries))
            if entries.iter().any(|e| e.get("operation").and_then(Node::as_str) == Some("Apply")));
    (!applied).then(|| {
        "written by another manager (no kubectl last-applied annotation, apply entry in \
         managedFields, Helm or Argo CD tracking): an apply never prunes it"
            .into()
    })
}

/// Reads files and directories (`.yaml`, `.yml`, `.json`, recursively,
/// in name order) into one [`Manifests`].
///
/// A file reached twice (given twice, or through a symbolic link, as in
/// the `..data` layout of a ConfigMap mounted as a volume) is read once,
/// and a directory reached again through a link is not walked again. A
/// directory with no such file, like a file with no document (see
/// [`load_str`]), is an input error: an empty state is stated, not
/// implied.
///
/// # Errors
///
/// [`InputError::Io`] naming a path that cannot be read, and every error
/// of [`load_str`], naming the file.
pub fn load_paths(paths: &[PathBuf], options: &LoadOptions) -> Result<Manifests, InputError> {
    let mut files = Vec::new();
    let mut seen = Seen::default();
    for p in paths {
        if collect(p, &mut files, &mut seen)? == 0 {
            return Err(bad(
                &p.display().to_string(),
                format!("no .yaml, .yml or .json file in this directory; {EMPTY_STATE}"),
            ));
        }
    }
    let mut out = Manifests::default();
    for file in files {
        let text = read_text(&file)?;
        load_str_into(&text, &file.display().to_string(), options, &mut out)?;
    }
    settle(&mut out);
    Ok(out)
}

/// A file's text, decoded by [`decode_text`].
///
/// # Errors
///
/// [`InputError::Io`] naming the path, for a file that cannot be read or
/// whose text cannot be decoded.
pub fn read_text(path: &Path) -> Result<String, InputError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| InputError::Io {
        path: name.clone(),
        message: e.to_string(),
    })?;
    decode_text(bytes, &name)
}

/// A file's bytes as text, read as kubectl reads manifests: UTF-8, with or
/// without a byte-order mark, or UTF-16 (little- or big-endian) with one,
/// which is what Windows PowerShell 5.1 writes for `kubectl get ... > file`.
/// The byte-order mark is dropped. `source` names the file in errors.
///
/// ```
/// use ate_configguard::decode_text;
///
/// let utf16: Vec<u8> = [0xFF, 0xFE]
///     .into_iter()
///     .chain("kind: List\n".encode_utf16().flat_map(u16::to_le_bytes))
///     .collect();
/// assert_eq!(decode_text(utf16, "live.yaml")?, "kind: List\n");
/// assert_eq!(decode_text(b"\xEF\xBB\xBFkind: List\n".to_vec(), "live.yaml")?, "kind: List\n");
/// assert!(decode_text(vec![b'a', 0xFF], "live.yaml").is_err());
/// # Ok::<(), ate_configguard::InputError>(())
/// ```
///
/// # Errors
///
/// [`InputError::Io`] naming `source` and where (line, column) the text
/// stops being UTF-8 (or UTF-16), never the bytes there, which may be part
/// of a value; and for UTF-32, which kubectl does not read either.
pub fn decode_text(bytes: Vec<u8>, source: &str) -> Result<String, InputError> {
    let fail = |message: String| InputError::Io {
        path: source.to_owned(),
        message,
    };
    let utf16 = |body: &[u8], from: fn([u8; 2]) -> u16, order: &str| {
        if body.len() % 2 == 1 {
            return Err(fail(format!(
                "UTF-16 {order} text (by its byte-order mark) with an odd number of bytes, {}: \
                 cut short",
                body.len() + 2
            )));
        }
        let units = body.chunks_exact(2).map(|p| from([p[0], p[1]]));
        let mut text = String::with_capacity(body.len() / 2);
        for c in char::decode_utf16(units) {
            match c {
                Ok(c) => text.push(c),
                Err(_) => {
                    return Err(fail(format!(
                        "UTF-16 {order} text (by its byte-order mark) with a broken character \
                         (an unpaired surrogate) at {}; save it as UTF-8",
                        position(&text)
                    )));
                }
            }
        }
        Ok(text)
    };
    match bytes.as_slice() {
        [0xFF, 0xFE, 0, 0, ..] | [0, 0, 0xFE, 0xFF, ..] => Err(fail(
            "UTF-32 text (by its byte-order mark), which neither kubectl nor this tool reads: \
             save it as UTF-8"
                .into(),
        )),
        [0xFF, 0xFE, body @ ..] => utf16(body, u16::from_le_bytes, "little-endian"),
        [0xFE, 0xFF, body @ ..] => utf16(body, u16::from_be_bytes, "big-endian"),
        _ => {
            let skip = if bytes.starts_with(b"\xEF\xBB\xBF") {
                3
            } else {
                0
            };
            let mut bytes = bytes;
            bytes.drain(..skip);
            String::from_utf8(bytes).map_err(|e| {
                let valid = e.utf8_error().valid_up_to();
                let before = String::from_utf8_lossy(e.as_bytes().get(..valid).unwrap_or_default());
                fail(format!(
                    "not UTF-8 text: the character at {} is not UTF-8 (UTF-16 is read only \
                     with a byte-order mark); save it as UTF-8",
                    position(&before)
                ))
            })
        }
    }
}

/// `line L column C` of the character after `before` (both from 1; the
/// column counts characters).
fn position(before: &str) -> String {
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .unwrap_or_default()
        .chars()
        .count()
        + 1;
    format!("line {line} column {column}")
}

/// The real paths (links resolved) of the files and directories already
/// reached.
#[derive(Default)]
struct Seen {
    files: BTreeSet<PathBuf>,
    /// With the manifest files found under each (0 while it is walked).
    dirs: BTreeMap<PathBuf, usize>,
}

/// Adds the manifest files under `path` not reached before; returns how
/// many manifest files it found, reached before or not.
fn collect(path: &Path, out: &mut Vec<PathBuf>, seen: &mut Seen) -> Result<usize, InputError> {
    let io = |e: std::io::Error| InputError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    let real = std::fs::canonicalize(path).map_err(io)?;
    if meta.is_dir() {
        if let Some(&found) = seen.dirs.get(&real) {
            return Ok(found);
        }
        seen.dirs.insert(real.clone(), 0);
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| InputError::Io {
                path: path.display().to_string(),
                message: e.to_string(),
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        let mut found = 0;
        for e in entries {
            let is_manifest = e
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
            if e.is_dir() || is_manifest {
                found += collect(&e, out, seen)?;
            }
        }
        seen.dirs.insert(real, found);
        Ok(found)
    } else {
        if seen.files.insert(real) {
            out.push(path.to_path_buf());
        }
        Ok(1)
    }
}

/// How to state an empty state on purpose (what `kubectl get -o yaml`
/// prints when nothing matches).
const EMPTY_STATE: &str = "to check against an empty state on purpose, give a file holding an \
     empty List (`{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}`)";

/// Reads one file's text (`source` names it in errors).
///
/// Text with no document at all (empty, or only comments and `---`) is an
/// input error, not an empty state: it is what a failed `helm template >
/// FILE` or `kubectl get > FILE` leaves behind (the shell creates the file
/// before the command fails), and reading it as "no objects" would pass a
/// check of a state nobody looked at. An empty `List` (or JSON `[]`) states
/// an empty state on purpose.
///
/// # Errors
///
/// [`InputError::Parse`] for text that is not YAML or JSON, and
/// [`InputError::Invalid`] naming the document for one it does not
/// understand: no document at all, an unknown kind that carries a pod
/// template or reads config through its containers (unless allowed), an
/// unsupported apiVersion of a known kind, a kustomize source, a
/// reference without a name, or a field under a pod spec that k8s-openapi
/// would drop.
///
/// ```
/// use ate_configguard::{LoadOptions, load_str};
///
/// let options = LoadOptions::default();
/// assert!(load_str("# helm template failed\n", "out.yaml", &options).is_err());
/// let nothing = load_str("apiVersion: v1\nkind: List\nitems: []\n", "out.yaml", &options)?;
/// assert!(nothing.objects.is_empty() && nothing.workloads.is_empty());
/// # Ok::<(), ate_configguard::InputError>(())
/// ```
pub fn load_str(text: &str, source: &str, options: &LoadOptions) -> Result<Manifests, InputError> {
    let mut out = Manifests::default();
    load_str_into(text, source, options, &mut out)?;
    settle(&mut out);
    Ok(out)
}

fn load_str_into(
    text: &str,
    source: &str,
    options: &LoadOptions,
    out: &mut Manifests,
) -> Result<(), InputError> {
    load_docs_into(text, source, options, out).map_err(|e| {
        if helm_dry_run(text) {
            e.with_hint(HELM_DRY_RUN)
        } else if helm_template(text, &e) {
            e.with_hint(HELM_TEMPLATE)
        } else {
            e
        }
    })
}

const HELM_TEMPLATE: &str = "it holds `{{`: if this is a Helm chart's template, not what it \
    renders, give the output of `helm template` (or `helm get manifest RELEASE` for what is \
    deployed)";

/// Whether `e` may come from reading a chart's template (`{{ ... }}`
/// actions) as a manifest: a parse error in text that holds an action, or
/// an error that quotes one. A rendered ConfigMap may hold `{{` in its
/// values (alerting templates), so other errors get no hint.
fn helm_template(text: &str, e: &InputError) -> bool {
    text.contains("{{")
        && match e {
            InputError::Parse { .. } => true,
            InputError::Invalid { message, .. } => message.contains("{{"),
            InputError::Io { .. } => false,
        }
}

const HELM_DRY_RUN: &str = "this looks like what `helm install` or `helm upgrade` prints with \
    `--dry-run` (a release summary, then HOOKS:, MANIFEST: and NOTES: around the manifests): \
    give the manifests alone, from `helm template` (or `helm get manifest RELEASE` for what is \
    deployed)";

/// Whether `text` is the output of `helm install` / `helm upgrade` with
/// `--dry-run`: a release summary (`LAST DEPLOYED:`), then the hooks,
/// `MANIFEST:` and `NOTES:`, not manifests alone.
fn helm_dry_run(text: &str) -> bool {
    let mut lines = text.lines();
    lines.any(|l| l.starts_with("LAST DEPLOYED: ")) && lines.any(|l| l.trim_end() == "MANIFEST:")
}

fn load_docs_into(
    text: &str,
    source: &str,
    options: &LoadOptions,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let mut docs = documents(text, source)?;
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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || docs.len() < 512 {
        for (i, doc) in docs.into_iter().enumerate() {
            load_located(doc, source, i, &lines, options, out)?;
        }
        return Ok(());
    }
    // Decoding workloads into k8s-openapi types is most of the time for a
    // big input: split the documents into ordered chunks, one per core.
    let chunk = docs.len().div_ceil(threads);
    let mut parts = Vec::with_capacity(threads);
    while docs.len() > chunk {
        let tail = docs.split_off(docs.len() - chunk);
        parts.push((docs.len(), tail));
    }
    parts.push((0, docs));
    parts.reverse();
    let results: Vec<Result<Manifests, InputError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|(first, part)| {
                let lines = &lines;
                scope.spawn(move || {
                    let mut m = Manifests::default();
                    for (j, doc) in part.into_iter().enumerate() {
                        load_located(doc, source, first + j, lines, options, &mut m)?;
                    }
                    Ok(m)
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
    // Merged in document order; the first error in document order wins.
    for part in results {
        out.extend(part?);
    }
    Ok(())
}

/// Loads document `index` (from 0) of `source`, and notes on each workload
/// it holds where it was read: the file, the document (from 1) and the
/// line the document starts on, for findings CI systems can place.
fn load_located(
    doc: Node,
    source: &str,
    index: usize,
    lines: &[usize],
    options: &LoadOptions,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let before = out.workloads.len();
    load_doc(
        doc,
        &format!("{source} document {}", index + 1),
        options,
        out,
    )?;
    let line = lines.get(index).copied().unwrap_or(1);
    for w in &mut out.workloads[before..] {
        w.source = Some(Place {
            file: source.to_owned(),
            document: index + 1,
            line,
        });
    }
    Ok(())
}

/// The line (from 1) each of the `count` documents of `text` starts on: a
/// YAML stream's documents are separated by `---` lines, and one holding
/// only comments is no document. Where that does not account for `count`
/// documents (JSON, a list), every one is placed on line 1.
fn document_lines(text: &str, count: usize) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut open = true;
    for (i, line) in without_bom(text).lines().enumerate() {
        let t = line.trim_end();
        if t == "---" || t.starts_with("--- ") || t.starts_with("---\t") {
            open = true;
            continue;
        }
        let content = !t.trim_start().is_empty() && !t.trim_start().starts_with('#');
        if open && content {
            starts.push(i + 1);
            open = false;
        }
    }
    if starts.len() == count {
        starts
    } else {
        vec![1; count]
    }
}

fn bad(at: &str, message: impl Into<String>) -> InputError {
    InputError::Invalid {
        at: at.to_owned(),
        message: message.into(),
    }
}

fn meta_names(doc: &Node, at: &str, options: &LoadOptions) -> Result<(String, String), InputError> {
    let meta = doc
        .get("metadata")
        .ok_or_else(|| bad(at, "missing metadata"))?;
    let name = meta
        .name_at("name")
        .ok_or_else(|| bad(at, "missing or empty metadata.name"))?;
    Ok((meta_namespace(meta, name, at, options)?, name.to_owned()))
}

/// The metadata and its `generateName`, where that stands in for a
/// missing (or empty) `metadata.name`: the API server makes the object's
/// name from it when it creates the object (`kubectl create`, an Argo CD
/// hook, an Argo Workflow), so it is a new object every time.
fn generate_name(doc: &Node) -> Option<(&Node, &str)> {
    let meta = doc.get("metadata")?;
    match meta.get("name") {
        None | Some(Node::Null) => {}
        Some(Node::String(name)) if name.is_empty() => {}
        Some(_) => return None,
    }
    Some((meta, meta.name_at("generateName")?))
}

/// A workload's namespace and name, as [`meta_names`], except that one
/// with only a `metadata.generateName` is named by that prefix and where
/// it was read (`migrate-<generated: jobs.yaml document 2>`): no other
/// object, current or proposed, has that name, as none will have the one
/// the API server makes for it.
fn workload_names(
    doc: &Node,
    at: &str,
    options: &LoadOptions,
) -> Result<(String, String), InputError> {
    match generate_name(doc) {
        Some((meta, prefix)) => Ok((
            meta_namespace(meta, prefix, at, options)?,
            format!("{prefix}<generated: {at}>"),
        )),
        None => meta_names(doc, at, options),
    }
}

/// The namespace in `meta` (of the object `name`), or the one given for
/// manifests without one (or with `""`: [`namespace_left_out`]).
fn meta_namespace(
    meta: &Node,
    name: &str,
    at: &str,
    options: &LoadOptions,
) -> Result<String, InputError> {
    let stated = meta.get("namespace");
    let namespace = match stated {
        _ if namespace_left_out(stated) => {
            let ns = &options.default_namespace;
            if !is_namespace_name(ns) {
                return Err(bad(
                    at,
                    format!(
                        "{name} has no metadata.namespace, and the namespace given for such \
                         manifests (--namespace, LoadOptions::default_namespace), {ns:?}, \
                         {NOT_A_NAMESPACE}"
                    ),
                ));
            }
            ns.clone()
        }
        Some(Node::String(ns)) => {
            if !is_namespace_name(ns) {
                return Err(bad(
                    at,
                    format!(
                        "{name}: metadata.namespace {ns:?} {NOT_A_NAMESPACE}: the API server \
                         refuses the object"
                    ),
                ));
            }
            ns.clone()
        }
        _ => {
            return Err(bad(
                at,
                format!("{name}: metadata.namespace is not a string"),
            ));
        }
    };
    Ok(namespace)
}

/// Whether a `metadata.namespace` is left out: absent, null or `""`.
/// kubectl and Helm place such an object in the namespace they are given
/// (`-n`, the release's), and the API server in the one of the request.
pub(crate) fn namespace_left_out(ns: Option<&Node>) -> bool {
    match ns {
        None | Some(Node::Null) => true,
        Some(Node::String(ns)) => ns.is_empty(),
        Some(_) => false,
    }
}

/// What a namespace must be, for messages.
pub(crate) const NOT_A_NAMESPACE: &str = "is no namespace name (at most 63 characters of a-z, \
     0-9 and '-', starting and ending with a letter or digit)";

/// A namespace's name as the API server takes it: an RFC 1123 label.
pub(crate) fn is_namespace_name(ns: &str) -> bool {
    ns.len() <= 63 && is_dns_label(ns)
}

/// `a-z`, `0-9` and `-`, not empty, starting and ending with a letter or
/// digit (no length bound).
fn is_dns_label(label: &str) -> bool {
    let b = label.as_bytes();
    matches!((b.first(), b.last()), (Some(f), Some(l)) if f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A ConfigMap's or a Secret's name as the API server takes it: an RFC
/// 1123 subdomain, at most 253 characters of `.`-separated labels.
pub(crate) fn object_name_ok(kind: ConfigKind, name: &str, at: &str) -> Result<(), InputError> {
    if name.len() <= 253 && name.split('.').all(is_dns_label) {
        return Ok(());
    }
    Err(bad(
        at,
        format!(
            "{kind} name {name:?} is no name the API server takes (at most 253 characters of \
             a-z, 0-9, '-' and '.', each '.'-separated part starting and ending with a letter \
             or digit): it refuses the object"
        ),
    ))
}

/// The key names of `doc`'s `field`. With `base64` (a Secret's `data`, a
/// ConfigMap's `binaryData`), a value that is not base64 is unusable input
/// as well: the API server refuses the object.
fn key_names(
    doc: &Node,
    field: &str,
    at: &str,
    base64: Option<&str>,
) -> Result<BTreeSet<String>, InputError> {
    match doc.get(field) {
        None | Some(Node::Null) => Ok(BTreeSet::new()),
        Some(Node::Seq(keys)) => {
            let names = keys
                .iter()
                .filter(|k| k.get(VALUE_BYTES).is_none())
                .map(|k| match k {
                    Node::String(s) => valid_key(s, field, at).map(|()| s.clone()),
                    Node::Map(_) => match k.get(NOT_A_STRING) {
                        Some(Node::Seq(pair)) => match pair.as_slice() {
                            [Node::String(key), Node::String(kind)] => {
                                Err(bad(at, not_a_string(field, key, kind)))
                            }
                            _ => Err(bad(at, format!("{field} holds a value that is no string"))),
                        },
                        _ => Err(bad(at, format!("{field} has a key that is no string"))),
                    },
                    _ => Err(bad(at, format!("{field} has a key that is no string"))),
                })
                .collect::<Result<BTreeSet<String>, InputError>>()?;
            if let (Some(object), Some((_, _, Some(key)))) = (base64, value_lengths(doc, field)) {
                return Err(bad(at, not_base64(field, key, object)));
            }
            Ok(names)
        }
        Some(_) => Err(bad(at, format!("{field} is not a map"))),
    }
}

/// Whether `key` is one a ConfigMap or Secret can hold ([`valid_key`]).
pub(crate) fn is_key(key: &str) -> bool {
    let chars_ok = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    chars_ok && (1..=253).contains(&key.len()) && key != "." && !key.starts_with("..")
}

/// A ConfigMap's or a Secret's key as the API server takes it: 1 to
/// 253 characters of `a-z`, `A-Z`, `0-9`, `-`, `_` and `.`, not `.` and
/// not starting with `..`. It refuses the whole object for another (a
/// path such as `conf/app.yaml`, from a chart that keys files by their
/// paths), which then keeps the keys it had.
fn valid_key(key: &str, field: &str, at: &str) -> Result<(), InputError> {
    if is_key(key) {
        return Ok(());
    }
    Err(bad(
        at,
        format!(
            "{field} key {key:?} is no key the API server takes (1 to 253 characters of \
             a-z, A-Z, 0-9, '-', '_' and '.', not '.' nor starting with '..'): it refuses the \
             object, which keeps the keys it had"
        ),
    ))
}

/// Why a `data`-like value that is no string is unusable input (its value
/// is never named, only what it is).
fn not_a_string(field: &str, key: &str, kind: &str) -> String {
    if kind == "null" {
        format!(
            "{field}.{key} has no value (null): `kubectl apply` and `helm upgrade` delete such a \
             key from the object they update; give it a string, \
             \"\" for an empty one (a Helm value that rendered to nothing does this)"
        )
    } else {
        format!(
            "{field}.{key} is {kind}, not a string: the API server refuses the object, so it \
             keeps what it had; quote the value"
        )
    }
}

/// The most the values of one ConfigMap or Secret may total, in bytes
/// (decoded, for base64): the API server refuses a larger object.
const MAX_VALUE_BYTES: u64 = 1 << 20;

/// `(text, decoded, not base64)` of `doc`'s `field` (see
/// [`VALUE_BYTES`]): its string values' bytes as text, what those that are
/// base64 decode to, and the first key whose value is not base64. `None`
/// when it has no non-empty string value.
fn value_lengths<'a>(doc: &'a Node, field: &str) -> Option<(u64, u64, Option<&'a str>)> {
    let Some(Node::Seq(items)) = doc.get(field) else {
        return None;
    };
    let number = |n: Option<&Node>| match n {
        Some(Node::Number(n)) => n.as_u64().unwrap_or(0),
        _ => 0,
    };
    items.iter().find_map(|k| match k.get(VALUE_BYTES) {
        Some(Node::Seq(marker)) => Some((
            number(marker.first()),
            number(marker.get(1)),
            marker.get(2).and_then(Node::as_str),
        )),
        _ => None,
    })
}

/// Why a value that is not base64 where the API server decodes base64 is
/// unusable input (the value is never named).
fn not_base64(field: &str, key: &str, object: &str) -> String {
    let plain = if object == "Secret" {
        " (plain text belongs in stringData)"
    } else {
        ""
    };
    format!(
        "{field}.{key} is not base64{plain}: the API server refuses the {object}, which keeps \
         the keys it had"
    )
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
    let kind = doc
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
        .to_owned();
    let api = doc
        .get("apiVersion")
        .and_then(Node::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad(at, "missing apiVersion"))?
        .to_owned();
    let expect_api = |wanted: &[&str]| -> Result<(), InputError> {
        if wanted.contains(&api.as_str()) {
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
    };
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
        // A `List` may hold objects of any group; it is `v1` itself.
        expect_api(typed_list.and_then(api_versions).unwrap_or(&["v1"]))?;
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
                    item.set("apiVersion", Node::String(api.clone()));
                }
            }
            load_doc(item, &item_at, options, out)?;
        }
        return Ok(());
    }
    let custom_kind = custom(&kind);
    if let Some(versions) = api_versions(&kind).filter(|_| !custom_kind) {
        expect_api(versions)?;
    }
    // A custom resource matches none of the known kinds' arms.
    let known_kind = if custom_kind { "" } else { kind.as_str() };
    let mut order = order(&doc, at)?;
    if order.kept_on_prune.is_none() {
        order.kept_on_prune = not_pruned(&doc, options);
    }
    let before = (
        out.workloads.len(),
        out.objects.len(),
        out.service_accounts.len(),
    );
    let (workloads_before, objects_before, accounts_before) = before;
    // Cluster-scoped: it names the namespaces of what it stands for.
    let placed = kind == "ClusterExternalSecret"
        || !namespace_left_out(doc.get("metadata").and_then(|m| m.get("namespace")));
    match known_kind {
        // Named by the API server when it is created, so no manifest can
        // name it: nothing reads it, and nothing it holds can go missing.
        "ConfigMap" | "Secret" if generate_name(&doc).is_some() => {}
        "ConfigMap" | "Secret" => {
            let (namespace, name) = meta_names(&doc, at, options)?;
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
            let mut keys = key_names(&doc, "data", at, secret)?;
            let mut overlap = false;
            for key in key_names(&doc, also, at, binary)? {
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
            let lengths = |field| value_lengths(&doc, field).map_or((0, 0), |(t, d, _)| (t, d));
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
            out.objects.push(ConfigObject {
                id: ObjectId {
                    kind: config_kind,
                    namespace,
                    name,
                },
                keys,
                immutable,
                secret_type,
                hook: None,
                sync_wave: None,
                made_by: None,
                kept_on_prune: None,
            });
        }
        "Pod" => {
            let (ns, name) = workload_names(&doc, at, options)?;
            let dormant = dormant(&kind, &doc);
            let spec = doc
                .take_path(&["spec"])
                .ok_or_else(|| bad(at, "Pod without spec"))?;
            push_workload(
                out,
                &kind,
                ns,
                name,
                typed::<PodSpec>(spec, at, "spec")?,
                dormant,
                at,
            )?;
        }
        "PodTemplate"
        | "ReplicationController"
        | "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "CronJob" => {
            let (ns, name) = workload_names(&doc, at, options)?;
            let path: &[&str] = match kind.as_str() {
                "PodTemplate" => &["template", "spec"],
                "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
                _ => &["spec", "template", "spec"],
            };
            let dormant = dormant(&kind, &doc);
            // Taken, not cloned: the document is not needed afterwards.
            let spec = doc
                .take_path(path)
                .ok_or_else(|| bad(at, format!("{kind} {name} without a pod template spec")))?;
            push_workload(
                out,
                &kind,
                ns,
                name,
                typed::<PodSpec>(spec, at, "template.spec")?,
                dormant,
                at,
            )?;
        }
        "ServiceAccount" => {
            let (namespace, name) = meta_names(&doc, at, options)?;
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
        }
        "Ingress" => {
            let (ns, name) = meta_names(&doc, at, options)?;
            if let Some(Node::Seq(tls)) = doc.get("spec").and_then(|s| s.get("tls")) {
                for t in tls {
                    if let Some(secret) = t.get("secretName").and_then(Node::as_str) {
                        let object = ObjectId {
                            kind: ConfigKind::Secret,
                            namespace: ns.clone(),
                            name: secret.to_owned(),
                        };
                        outside_pod_spec(out, &kind, &ns, &name, "spec.tls[].secretName", object);
                    }
                }
            }
        }
        // Gateway API objects (`Gateway`, `BackendTLSPolicy`, ...) name TLS
        // Secrets and CA ConfigMaps in `certificateRefs` and
        // `caCertificateRefs`: reported as an Ingress's TLS secrets are.
        "SealedSecret" if group == "bitnami.com" => {
            let (namespace, name) = meta_names(&doc, at, options)?;
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
            let mut made = made_secret(&kind, namespace, name, None, keys, immutable);
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
        }
        "Certificate" if group == "cert-manager.io" => {
            let (namespace, name) = meta_names(&doc, at, options)?;
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
                &kind,
                namespace,
                name,
                Some(secret),
                keys,
                false,
            ));
        }
        "ExternalSecret" if group == "external-secrets.io" => {
            let (namespace, name) = meta_names(&doc, at, options)?;
            let spec = doc
                .get("spec")
                .ok_or_else(|| bad(at, "ExternalSecret without spec"))?;
            if let Some(made) = external_secret(spec, &kind, namespace, name, at)? {
                out.objects.push(made);
            }
        }
        // The Secrets Store CSI driver syncs each of `spec.secretObjects`
        // into a Secret (`secretName`) with the keys its `data` items name
        // (`key`), once a pod that mounts the class starts.
        "SecretProviderClass" if group == "secrets-store.csi.x-k8s.io" => {
            let (namespace, name) = meta_names(&doc, at, options)?;
            let objects = match doc.get("spec").and_then(|s| s.get("secretObjects")) {
                None | Some(Node::Null) => &[][..],
                Some(Node::Seq(list)) => list,
                Some(_) => return Err(bad(at, "spec.secretObjects is not a list")),
            };
            for (i, object) in objects.iter().enumerate() {
                let secret = object.name_at("secretName").ok_or_else(|| {
                    bad(at, format!("spec.secretObjects[{i}] without a secretName"))
                })?;
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
                    &kind,
                    namespace.clone(),
                    name.clone(),
                    Some(secret.to_owned()),
                    keys,
                    false,
                );
                made.secret_type = secret_type.filter(|t| !t.is_empty()).map(str::to_owned);
                out.objects.push(made);
            }
        }
        // An ExternalSecret for each namespace it lists (`spec.namespaces`),
        // named `spec.externalSecretName` or as itself. The namespaces its
        // selectors pick are not in the input: none is derived for them.
        "ClusterExternalSecret" if group == "external-secrets.io" => {
            let (_, name) = meta_names(&doc, at, options)?;
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
                if let Some(made) =
                    external_secret(es_spec, &kind, ns.to_owned(), es_name.to_owned(), at)?
                {
                    out.objects.push(made);
                }
            }
        }
        _ if group == GATEWAY_API => {
            let (ns, name) = meta_names(&doc, at, options)?;
            let mut refs = Vec::new();
            certificate_refs(&doc, "", &ns, &mut refs);
            for (site, object) in refs {
                outside_pod_spec(out, &kind, &ns, &name, &site, object);
            }
        }
        _ if PROXY_GROUPS.contains(&group) => {
            let (ns, name) = meta_names(&doc, at, options)?;
            for path in PROXY_SECRETS {
                let found = path
                    .split('.')
                    .try_fold(&doc, |node, key| node.get(key))
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
                outside_pod_spec(out, &kind, &ns, &name, path, object);
            }
        }
        _ if group == operator::MONITORING_GROUP
            && operator::MONITORING_KINDS.contains(&kind.as_str()) =>
        {
            let (ns, name) = workload_names(&doc, at, options)?;
            let mut refs = operator::references(&doc);
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
        }
        _ if options.allow_kinds.contains(&kind)
            || (!group.is_empty() && options.allow_kinds.contains(&format!("{kind}.{group}"))) =>
        {
            let (ns, name) = workload_names(&doc, at, options)?;
            // A custom resource named like a Kubernetes kind is reported
            // with its group (`Job.batch.volcano.sh`), not as that kind.
            let label = if custom_kind {
                format!("{kind}.{group}")
            } else {
                kind.clone()
            };
            let mut specs = Vec::new();
            find_templates_at(&doc, "", &mut specs);
            let outside = if specs.is_empty() {
                None
            } else {
                operator::references_outside_templates(&doc).into_pod_spec_if_any()
            };
            if specs.is_empty()
                && let Some(from) = workload_ref(&doc, &ns, at)?
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
                find_containers(&doc, &mut containers, &mut volumes);
                if containers.is_empty() {
                    // No container either: the Secrets and ConfigMaps it
                    // names (`volumes`, `secrets`, key selectors...), read
                    // as one pod's.
                    match operator::references(&doc).into_pod_spec() {
                        Some(spec) => specs.push((String::new(), spec)),
                        None => {
                            return Err(bad(
                                at,
                                format!(
                                    "allow-listed kind {kind} {name} has no template.spec with \
                                     containers, no container (a map with an image) and names \
                                     no Secret or ConfigMap anywhere"
                                ),
                            ));
                        }
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
        }
        _ if api.starts_with("kustomize.config.k8s.io/") => {
            return Err(kustomize_source(at, &kind));
        }
        _ => {
            let reads_config = env_reference(&doc, "");
            let runs_template = doc
                .get("spec")
                .and_then(|s| s.get("workloadRef"))
                .is_some_and(|r| !matches!(r, Node::Null));
            // Fail closed: a kind this guard cannot read that names a
            // Secret or ConfigMap anywhere (`volumes`, `secrets`,
            // `configSecret`, `*SecretRef`, a key selector) may break when
            // one goes.
            let names_config = operator::references(&doc).first;
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
                return Err(bad(
                    at,
                    format!(
                        "unknown kind {kind} ({api}) names a Secret or ConfigMap (at {path}); \
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
                    format!(
                        "unknown kind {kind} ({api}) {what}; pass --allow-kind {allow} to read it"
                    ),
                ));
            }
        }
    }
    let after = (
        out.workloads.len(),
        out.objects.len(),
        out.service_accounts.len(),
    );
    if !placed && after != before {
        out.unplaced += 1;
    }
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

/// The key names the items of a `data` list (read as [`DATA_LIST`]) give in
/// `field`: an ExternalSecret's `secretKey`, a SecretProviderClass's `key`.
/// A list that is none, or an item without the field, is unusable input,
/// named by `what`.
fn data_list_names(
    list: &Node,
    field: &str,
    what: &str,
    at: &str,
) -> Result<BTreeSet<String>, InputError> {
    let Some(Node::Seq(items)) = list.get(DATA_LIST) else {
        return Err(bad(at, format!("{what} is not a list")));
    };
    items
        .iter()
        .enumerate()
        .map(|(j, item)| {
            let name = item
                .name_at(field)
                .ok_or_else(|| bad(at, format!("{what}[{j}] without a {field}")))?;
            valid_key(name, &format!("{what}[{j}].{field}"), at)?;
            Ok(name.to_owned())
        })
        .collect()
}

/// The workload whose pod template an allow-listed kind runs instead of
/// one of its own, as an Argo Rollout's `spec.workloadRef` names it (a
/// Deployment, a ReplicaSet or a PodTemplate, in the Rollout's namespace),
/// or `None` without one. One that names another kind, or leaves out its
/// name, is unusable input.
fn workload_ref(doc: &Node, namespace: &str, at: &str) -> Result<Option<WorkloadId>, InputError> {
    let reference = match doc.get("spec").and_then(|s| s.get("workloadRef")) {
        None | Some(Node::Null) => return Ok(None),
        Some(r) => r,
    };
    let api = reference.name_at("apiVersion").unwrap_or("");
    let kind = match (api, reference.name_at("kind")) {
        ("apps/v1", Some(kind @ ("Deployment" | "ReplicaSet")))
        | ("v1", Some(kind @ "PodTemplate")) => kind,
        (_, kind) => {
            return Err(bad(
                at,
                format!(
                    "spec.workloadRef names {} {:?}: only a Deployment or ReplicaSet (apps/v1) \
                     or a PodTemplate (v1) is a pod template this tool can read",
                    kind.unwrap_or("no kind"),
                    api
                ),
            ));
        }
    };
    let name = reference
        .name_at("name")
        .ok_or_else(|| bad(at, "spec.workloadRef without a name"))?;
    Ok(Some(WorkloadId {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }))
}

/// When `doc` is applied (see [`order_from`]).
fn order(doc: &Node, at: &str) -> Result<Order, InputError> {
    let Some(annotations) = doc.get("metadata").and_then(|m| m.get("annotations")) else {
        return Ok(Order::default());
    };
    order_from(
        |name| match annotations.get(name) {
            None | Some(Node::Null) => Ok(None),
            Some(Node::String(v)) => Ok(Some(v.as_str())),
            Some(_) => Err(bad(at, format!("annotation {name} is not a string"))),
        },
        at,
    )
}

/// When an object is applied, from its annotations.
#[derive(Debug, Default)]
struct Order {
    /// A Helm or Argo CD hook.
    hook: Option<Hook>,
    /// The Argo CD sync wave of a resource that is no hook (or a `Sync`
    /// hook).
    sync_wave: Option<i64>,
    /// The annotation that keeps it from a prune (see
    /// [`ConfigObject::kept_on_prune`]).
    kept_on_prune: Option<String>,
}

/// Helm's hook types (lower case, as Helm reads them): when an install or
/// upgrade creates a hook of each, `None` for one that it does not run.
/// A type that is not in this list makes Helm skip the resource.
const HELM_HOOKS: [(&str, Option<HookPhase>); 10] = [
    ("pre-install", Some(HookPhase::BeforeChange)),
    ("pre-upgrade", Some(HookPhase::BeforeChange)),
    ("post-install", Some(HookPhase::AfterChange)),
    ("post-upgrade", Some(HookPhase::AfterChange)),
    ("pre-delete", None),
    ("post-delete", None),
    ("pre-rollback", None),
    ("post-rollback", None),
    ("test", None),
    ("test-success", None),
];

/// Argo CD's hook types: when a sync creates a hook of each (`Skip`: the
/// resource is not applied).
const ARGO_HOOKS: [(&str, HookPhase); 6] = [
    ("PreSync", HookPhase::BeforeChange),
    ("Sync", HookPhase::WithChange),
    ("PostSync", HookPhase::AfterChange),
    ("SyncFail", HookPhase::NotRun),
    ("PostDelete", HookPhase::NotRun),
    ("Skip", HookPhase::NotRun),
];

/// When an object is applied, from its annotations (`annotation` reads
/// one), as Helm and Argo CD read them:
///
/// - `argocd.argoproj.io/hook` names Argo CD's hook types (comma-separated);
///   with none that Argo CD knows, it goes by `helm.sh/hook` (Argo CD
///   makes a `PreSync` hook of `pre-install` / `pre-upgrade`, a `PostSync`
///   one of `post-install` / `post-upgrade`, and runs no other);
/// - `helm.sh/hook` alone: Helm's types (any case); one Helm does not know
///   makes it skip the resource, which then is not created at all;
/// - a hook of several types is created in the earliest of their phases;
///   its weight is `helm.sh/hook-weight` (Helm's) or
///   `argocd.argoproj.io/sync-wave` (Argo CD's);
/// - a hook is deleted once its hooks succeed if either delete policy says
///   so (`helm.sh/hook-delete-policy: hook-succeeded`,
///   `argocd.argoproj.io/hook-delete-policy: HookSucceeded`; Argo CD reads
///   both);
/// - a resource that is no hook, or an Argo CD `Sync` hook, is in its
///   `argocd.argoproj.io/sync-wave`.
///
/// A weight or wave must be a whole number.
fn order_from<'a>(
    annotation: impl Fn(&str) -> Result<Option<&'a str>, InputError>,
    at: &str,
) -> Result<Order, InputError> {
    let number = |name: &str| -> Result<Option<i64>, InputError> {
        annotation(name)?
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| bad(at, format!("annotation {name} {v:?} is not a whole number")))
            })
            .transpose()
    };
    fn csv(v: &str) -> impl Iterator<Item = &str> {
        v.split(',').map(str::trim).filter(|t| !t.is_empty())
    }
    // Helm reads its resource policy trimmed and in any case; Argo CD its
    // sync options as a comma-separated list, each as written.
    let helm_keeps = annotation("helm.sh/resource-policy")?
        .filter(|v| v.trim().eq_ignore_ascii_case("keep"))
        .map(|v| format!("helm.sh/resource-policy={v}"));
    let argo_keeps = annotation("argocd.argoproj.io/sync-options")?
        .filter(|v| csv(v).any(|o| o == "Prune=false" || o == "Prune=confirm"))
        .map(|v| format!("argocd.argoproj.io/sync-options={v}"));
    let kept_on_prune = helm_keeps.or(argo_keeps);
    let (helm, argo) = (
        annotation("helm.sh/hook")?,
        annotation("argocd.argoproj.io/hook")?,
    );
    let argo_phase = argo.and_then(|v| {
        csv(v)
            .filter_map(|t| ARGO_HOOKS.iter().find(|(name, _)| *name == t))
            .map(|(_, phase)| *phase)
            .min()
    });
    // Helm's reading: `None` for a resource Helm skips (a type it does not
    // know), else the earliest phase of its types (`NotRun` if none runs).
    let helm_phase = |v: &str| -> Option<HookPhase> {
        let mut phase = HookPhase::NotRun;
        for t in csv(v) {
            let (_, p) = HELM_HOOKS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(t))?;
            if let Some(p) = p
                && *p < phase
            {
                phase = *p;
            }
        }
        Some(phase)
    };
    let (annotation_text, phase, weight, helm_order) = match (argo_phase, argo, helm) {
        (Some(phase), Some(v), _) => (
            format!("argocd.argoproj.io/hook={v}"),
            phase,
            number("argocd.argoproj.io/sync-wave")?,
            false,
        ),
        // Argo CD's annotation with no type it knows: Argo CD goes by Helm's.
        (None, Some(v), helm) => {
            let phase = helm.and_then(helm_phase).unwrap_or(HookPhase::NotRun);
            let by = match helm {
                Some(h) if phase != HookPhase::NotRun => format!("helm.sh/hook={h}"),
                _ => format!("argocd.argoproj.io/hook={v}"),
            };
            (by, phase, number("helm.sh/hook-weight")?, true)
        }
        (_, None, Some(v)) => (
            format!("helm.sh/hook={v}"),
            helm_phase(v).unwrap_or(HookPhase::NotRun),
            number("helm.sh/hook-weight")?,
            true,
        ),
        (_, None, None) => {
            return Ok(Order {
                hook: None,
                sync_wave: number("argocd.argoproj.io/sync-wave")?,
                kept_on_prune,
            });
        }
    };
    let mut deleted_after = None;
    for (name, policy) in [
        ("helm.sh/hook-delete-policy", "hook-succeeded"),
        ("argocd.argoproj.io/hook-delete-policy", "HookSucceeded"),
    ] {
        if let Some(v) = annotation(name)?
            && csv(v).any(|p| p.eq_ignore_ascii_case(policy))
        {
            deleted_after = Some(format!("{name}={v}"));
            break;
        }
    }
    let sync_wave = if phase == HookPhase::WithChange {
        weight
    } else {
        None
    };
    Ok(Order {
        hook: Some(Hook {
            annotation: annotation_text,
            phase,
            weight: weight.unwrap_or(0),
            helm: helm_order,
            deleted_after,
        }),
        sync_wave,
        kept_on_prune,
    })
}

/// The Secret a controller makes from `kind` `namespace/name` (a
/// SealedSecret, an ExternalSecret, a cert-manager Certificate), named
/// `target` (else `name`), with `keys`.
fn made_secret(
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
fn external_secret(
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
fn settle(out: &mut Manifests) {
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
const GATEWAY_API: &str = "gateway.networking.k8s.io";

/// The groups of Traefik's and Contour's custom resources, which name
/// Secrets outside any pod spec ([`PROXY_SECRETS`]).
const PROXY_GROUPS: [&str; 3] = ["traefik.io", "traefik.containo.us", "projectcontour.io"];

/// Where those resources name a Secret: Traefik's `IngressRoute` and
/// `IngressRouteTCP` (TLS), `TLSStore` (default certificate) and
/// `Middleware` (basic and digest auth users), and Contour's `HTTPProxy`
/// (TLS, client CA). Each path is under one kind only.
const PROXY_SECRETS: [&str; 6] = [
    "spec.tls.secretName",
    "spec.defaultCertificate.secretName",
    "spec.basicAuth.secret",
    "spec.digestAuth.secret",
    "spec.virtualhost.tls.secretName",
    "spec.virtualhost.tls.clientValidation.caSecret",
];

/// Notes a reference that no pod reads (an Ingress's or a Gateway's TLS
/// Secret): reported as a warning, not checked.
fn outside_pod_spec(
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
fn certificate_refs(node: &Node, path: &str, ns: &str, out: &mut Vec<(String, ObjectId)>) {
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
fn object_ref(item: &Node, default_kind: Option<&str>, ns: &str) -> Option<ObjectId> {
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

/// The apiVersions read for a kind this guard understands (`None` for any
/// other kind).
fn api_versions(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "ConfigMap"
        | "Secret"
        | "ServiceAccount"
        | "Pod"
        | "PodTemplate"
        | "ReplicationController" => &["v1"],
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => &["apps/v1"],
        "Job" | "CronJob" => &["batch/v1"],
        // Not `Ingress`: read from any group (its TLS secrets are only
        // reported), as a kind of that name from another group is no
        // reason to refuse the input.
        _ => return None,
    })
}

fn kustomize_source(at: &str, kind: &str) -> InputError {
    bad(
        at,
        format!(
            "a kustomize {kind} is a source, not a manifest (its generators and patches are not \
             applied here); check what it renders: `kubectl kustomize DIR > FILE`"
        ),
    )
}

fn find_templates_at(node: &Node, path: &str, out: &mut Vec<(String, Node)>) {
    if let Node::Map(entries) = node {
        for (k, v) in entries {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if k == "template"
                && let Some(spec) = v.get("spec")
                && matches!(spec.get("containers"), Some(Node::Seq(_)))
            {
                out.push((here, spec.clone()));
            } else {
                find_templates_at(v, &here, out);
            }
        }
    } else if let Node::Seq(items) = node {
        for (i, item) in items.iter().enumerate() {
            find_templates_at(item, &format!("{path}[{i}]"), out);
        }
    }
}

/// The annotation a service-account token Secret names its account by.
const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";

/// Unusable input if a Secret of type `secret_type` is a service-account
/// token Secret whose `annotations` (under `meta`) do not name its account:
/// the API server refuses it, so the control plane never writes its keys.
/// (Only the annotation's presence is read, not its value.)
fn token_names_account(
    secret_type: Option<&str>,
    meta: Option<&Node>,
    what: &str,
    at: &str,
) -> Result<(), InputError> {
    let named = meta
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(SERVICE_ACCOUNT_NAME))
        .is_some();
    if secret_type == Some(SERVICE_ACCOUNT_TOKEN) && !named {
        return Err(bad(
            at,
            format!(
                "{what} is of type {SERVICE_ACCOUNT_TOKEN} without the {SERVICE_ACCOUNT_NAME} \
                 annotation: the API server refuses it, so it never holds the keys the \
                 control plane writes into one (token, ca.crt, namespace)"
            ),
        ));
    }
    Ok(())
}

/// The type of a Secret holding a service account's token.
const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// Adds to a Secret of type `secret_type` the keys the control plane
/// writes into it: a service-account token Secret is declared with no data
/// and holds `ca.crt`, `namespace` and `token` once it exists.
fn add_control_plane_keys(secret_type: Option<&str>, keys: &mut BTreeSet<String>) {
    if secret_type == Some(SERVICE_ACCOUNT_TOKEN) {
        keys.extend(["ca.crt", "namespace", "token"].map(str::to_owned));
    }
}

/// Every container (a map with an `image`) and every entry of a `volumes`
/// list under `node`, outside pod templates' own shape: for an allowed kind
/// that runs containers without a pod template.
fn find_containers(node: &Node, containers: &mut Vec<Node>, volumes: &mut Vec<Node>) {
    match node {
        Node::Map(entries) => {
            if matches!(node.get("image"), Some(Node::String(_))) {
                containers.push(node.clone());
                return;
            }
            for (k, v) in entries {
                match (k.as_str(), v) {
                    ("volumes", Node::Seq(items)) => volumes.extend(items.iter().cloned()),
                    _ => find_containers(v, containers, volumes),
                }
            }
        }
        Node::Seq(items) => {
            for i in items {
                find_containers(i, containers, volumes);
            }
        }
        _ => {}
    }
}

/// Where under `node` a container reads a ConfigMap or Secret through its
/// environment (`valueFrom.configMapKeyRef` / `secretKeyRef`, `envFrom`),
/// as a path, if anywhere: what an unknown kind must not hide.
fn env_reference(node: &Node, path: &str) -> Option<String> {
    match node {
        Node::Map(entries) => entries.iter().find_map(|(k, v)| {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            let is_ref = match k.as_str() {
                "valueFrom" => {
                    v.get("configMapKeyRef").is_some() || v.get("secretKeyRef").is_some()
                }
                "envFrom" => matches!(v, Node::Seq(items) if !items.is_empty()),
                _ => false,
            };
            if is_ref {
                Some(here)
            } else {
                env_reference(v, &here)
            }
        }),
        Node::Seq(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| env_reference(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// Decodes a k8s-openapi type, failing closed on ignored reference fields.
fn typed<T: DeserializeOwned>(node: Node, at: &str, prefix: &str) -> Result<T, InputError> {
    let mut ignored = Vec::new();
    let value = node.into_json();
    let result: Result<T, _> =
        serde_ignored::deserialize(value, |path| ignored.push(path.to_string()));
    let decoded = result.map_err(|e| {
        bad(
            at,
            format!("{prefix}: {}", crate::parse::redact(&e.to_string())),
        )
    })?;
    for path in ignored {
        let lower = path.to_ascii_lowercase();
        let structural = [
            "env",
            "envfrom",
            "volumes",
            "projected",
            "sources",
            "volumemounts",
            "imagepullsecrets",
        ]
        .iter()
        .any(|seg| lower.split('.').any(|s| s == *seg));
        let looks_like_ref = ["secret", "configmap", "keyref", "config_map"]
            .iter()
            .any(|w| lower.contains(w));
        if structural || looks_like_ref {
            return Err(bad(
                at,
                format!(
                    "unknown field {prefix}.{path}: it may reference config this tool cannot check"
                ),
            ));
        }
    }
    Ok(decoded)
}

fn push_workload(
    out: &mut Manifests,
    kind: &str,
    namespace: String,
    name: String,
    spec: PodSpec,
    dormant: Option<String>,
    at: &str,
) -> Result<(), InputError> {
    out.workloads
        .push(workload(kind, namespace, name, &spec, dormant, at)?);
    Ok(())
}

/// A workload running `spec`, with every reference it makes.
fn workload(
    kind: &str,
    namespace: String,
    name: String,
    spec: &PodSpec,
    dormant: Option<String>,
    at: &str,
) -> Result<Workload, InputError> {
    let references = pod_references(spec).map_err(|m| bad(at, format!("{kind} {name}: {m}")))?;
    // `serviceAccount` is the deprecated spelling Kubernetes still reads.
    let service_account = spec
        .service_account_name
        .as_ref()
        .or(spec.service_account.as_ref())
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| "default".into());
    Ok(Workload {
        id: WorkloadId {
            kind: kind.to_owned(),
            namespace,
            name,
        },
        references,
        dormant,
        service_account,
        hook: None,
        sync_wave: None,
        template_from: None,
        kept_on_prune: None,
        source: None,
    })
}

/// Why a workload runs no pod and starts none by itself, read from what a
/// live object (`kubectl get -o yaml`) says about it; `None` if it runs or
/// may run pods. Only states nothing but an operator's action undoes:
///
/// - a Pod whose phase is `Succeeded` or `Failed` (its containers never
///   start again);
/// - a Job with a `Complete` or `Failed` condition (it creates no more
///   pods);
/// - a ReplicaSet at 0 replicas controlled by a Deployment: an old
///   revision, which only a rollback scales up again.
///
/// Anything else counts as serving, including a Deployment or StatefulSet
/// at 0 replicas (an autoscaler such as KEDA may scale it up at any time)
/// and a suspended CronJob.
fn dormant(kind: &str, doc: &Node) -> Option<String> {
    let status = |field: &str| doc.get("status").and_then(|s| s.get(field));
    match kind {
        "Pod" => {
            let phase = status("phase")?.as_str()?;
            matches!(phase, "Succeeded" | "Failed")
                .then(|| format!("a finished Pod (phase {phase})"))
        }
        "Job" => {
            let Node::Seq(conditions) = status("conditions")? else {
                return None;
            };
            conditions.iter().find_map(|c| {
                let kind = c.get("type")?.as_str()?;
                let finished = matches!(kind, "Complete" | "Failed")
                    && c.get("status")?.as_str() == Some("True");
                finished.then(|| format!("a finished Job (condition {kind})"))
            })
        }
        "ReplicaSet" => {
            let Node::Number(replicas) = doc.get("spec")?.get("replicas")? else {
                return None;
            };
            let Node::Seq(owners) = doc.get("metadata")?.get("ownerReferences")? else {
                return None;
            };
            let deployment = owners.iter().find_map(|o| {
                let controller = matches!(o.get("controller"), Some(Node::Bool(true)));
                (controller && o.get("kind")?.as_str() == Some("Deployment"))
                    .then(|| o.get("name").and_then(Node::as_str).unwrap_or("?"))
            })?;
            (replicas.as_u64() == Some(0)).then(|| {
                format!(
                    "an old revision of Deployment {deployment} (0 replicas), which only a rollback starts again"
                )
            })
        }
        _ => None,
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
/// use ate_configguard::{LoadOptions, load_str, unplaced_namespace};
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

fn nonempty<'a>(what: &str, s: &'a str) -> Result<&'a str, String> {
    if s.is_empty() {
        Err(format!("{what} is empty"))
    } else {
        Ok(s)
    }
}

struct Refs(Vec<Reference>);

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
        self.0.push(Reference {
            container: container.map(str::to_owned),
            site,
            kind,
            name: name.to_owned(),
            key: key.map(str::to_owned),
            bulk,
            optional: optional.unwrap_or(false),
        });
        Ok(())
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

fn container_refs(
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

fn subpath_refs(
    r: &mut Refs,
    c: &str,
    mounts: Option<&Vec<VolumeMount>>,
    volumes: &[Volume],
) -> Result<(), String> {
    for m in mounts.into_iter().flatten() {
        let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) else {
            continue;
        };
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
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
                    }
                }
            }
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
        let base = format!("volumes[{}]", v.name);
        if let Some(cm) = &v.config_map {
            let site = format!("{base}.configMap");
            r.source(
                site,
                ConfigKind::ConfigMap,
                &cm.name,
                cm.items.as_deref(),
                cm.optional,
            )?;
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.as_deref().unwrap_or("");
            r.source(
                format!("{base}.secret"),
                ConfigKind::Secret,
                name,
                s.items.as_deref(),
                s.optional,
            )?;
        }
        if let Some(p) = &v.projected {
            for (n, src) in p.sources.iter().flatten().enumerate() {
                if let Some(cm) = &src.config_map {
                    let site = format!("{base}.projected.sources[{n}].configMap");
                    r.source(
                        site,
                        ConfigKind::ConfigMap,
                        &cm.name,
                        cm.items.as_deref(),
                        cm.optional,
                    )?;
                }
                if let Some(s) = &src.secret {
                    let site = format!("{base}.projected.sources[{n}].secret");
                    r.source(
                        site,
                        ConfigKind::Secret,
                        &s.name,
                        s.items.as_deref(),
                        s.optional,
                    )?;
                }
            }
        }
        // Volume types that name a Secret: the plugin is handed every key
        // of it (the keys it reads are its own business), so the Secret is
        // loaded whole, as by a volume without `items`: a key it loses may
        // be one a mount needs, and a pod that cannot mount never starts.
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
        typed_object(
            ConfigKind::ConfigMap,
            &cm.metadata,
            default_namespace,
            keys,
            cm.immutable,
            None,
        )
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
        typed_object(
            ConfigKind::Secret,
            &secret.metadata,
            default_namespace,
            keys,
            secret.immutable,
            secret.type_.clone().filter(|t| !t.is_empty()),
        )
    }
}

fn typed_object(
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
        id: ObjectId {
            kind,
            namespace,
            name,
        },
        keys,
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
fn typed_meta(
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
