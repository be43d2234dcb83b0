//! Reading text: files and directories, encodings, Helm output, and
//! splitting streams into documents placed by file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::load_doc;
use super::makers::settle;
use super::options::{LoadOptions, bad};
use crate::error::InputError;
use crate::model::Manifests;
use crate::model::Place;
use crate::parse::{Node, documents, without_bom};

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
    let mut out = Manifests::default();
    for file in manifest_files(paths)? {
        let text = read_text(&file)?;
        load_str_into(&text, &file.display().to_string(), options, &mut out)?;
    }
    settle(&mut out);
    Ok(out)
}

/// The manifest files under `paths` (`.yaml`, `.yml`, `.json`,
/// recursively, in name order), each once; a directory with none is an
/// input error.
pub(crate) fn manifest_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
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
    Ok(files)
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
/// use ate_configguard::text::decode_text;
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
pub(super) fn position(before: &str) -> String {
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
pub(super) struct Seen {
    files: BTreeSet<PathBuf>,
    /// With the manifest files found under each (0 while it is walked).
    dirs: BTreeMap<PathBuf, usize>,
}

/// Adds the manifest files under `path` not reached before; returns how
/// many manifest files it found, reached before or not.
pub(super) fn collect(
    path: &Path,
    out: &mut Vec<PathBuf>,
    seen: &mut Seen,
) -> Result<usize, InputError> {
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
pub(crate) const EMPTY_STATE: &str = "to check against an empty state on purpose, give a file holding an \
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

pub(super) fn load_str_into(
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

pub(super) const HELM_TEMPLATE: &str = "it holds `{{`: if this is a Helm chart's template, not what it \
    renders, give the output of `helm template` (or `helm get manifest RELEASE` for what is \
    deployed)";

/// Whether `e` may come from reading a chart's template (`{{ ... }}`
/// actions) as a manifest: a parse error in text that holds an action, or
/// an error that quotes one. A rendered ConfigMap may hold `{{` in its
/// values (alerting templates), so other errors get no hint.
pub(super) fn helm_template(text: &str, e: &InputError) -> bool {
    match e {
        InputError::Parse { .. } => template_in_yaml_position(text),
        InputError::Invalid { message, .. } => message.contains("{{"),
        InputError::Io { .. } => false,
    }
}

/// Whether `text` holds a template action where YAML itself is written:
/// a line that is an action (`{{- if .Values.x }}`), or an unquoted key
/// or value that starts with one (`name: {{ .Release.Name }}`). One inside
/// a quoted string (a Grafana legend) or a block scalar (an alerting
/// template in a ConfigMap) is a value, as a rendered manifest holds.
fn template_in_yaml_position(text: &str) -> bool {
    // The indentation of the key whose block scalar (`|`, `>`) is open.
    let mut block: Option<usize> = None;
    for line in text.lines() {
        let content = line.trim_start();
        let indent = line.len() - content.len();
        if let Some(key_indent) = block {
            if content.is_empty() || indent > key_indent {
                continue;
            }
            block = None;
        }
        if content.starts_with('#') {
            continue;
        }
        let item = content.trim_start_matches(['-', ' ']);
        if item.starts_with("{{") {
            return true;
        }
        if let Some((_, value)) = item.split_once(": ").or_else(|| item.split_once(":\t")) {
            let value = value.trim_start();
            if value.starts_with("{{") {
                return true;
            }
            let header = value.split('#').next().unwrap_or("").trim_end();
            if header.starts_with('|') || header.starts_with('>') {
                block = Some(indent);
            }
        } else if let Some(key) = item.strip_suffix(':')
            && key.trim_start().starts_with("{{")
        {
            return true;
        }
        if item.ends_with(": |")
            || item.ends_with(": >")
            || item.ends_with(": |-")
            || item.ends_with(": >-")
        {
            block = Some(indent);
        }
    }
    false
}

pub(super) const HELM_DRY_RUN: &str = "this looks like what `helm install` or `helm upgrade` prints with \
    `--dry-run` (a release summary, then HOOKS:, MANIFEST: and NOTES: around the manifests): \
    give the manifests alone, from `helm template` (or `helm get manifest RELEASE` for what is \
    deployed)";

/// Whether `text` is the output of `helm install` / `helm upgrade` with
/// `--dry-run`: a release summary (`LAST DEPLOYED:`), then the hooks,
/// `MANIFEST:` and `NOTES:`, not manifests alone.
pub(super) fn helm_dry_run(text: &str) -> bool {
    let mut lines = text.lines();
    lines.any(|l| l.starts_with("LAST DEPLOYED: ")) && lines.any(|l| l.trim_end() == "MANIFEST:")
}

pub(super) fn load_docs_into(
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
pub(super) fn load_located(
    doc: Node,
    source: &str,
    index: usize,
    lines: &[usize],
    options: &LoadOptions,
    out: &mut Manifests,
) -> Result<(), InputError> {
    let before = out.workloads.len();
    let line = lines.get(index).copied().unwrap_or(1);
    let at = format!("{source} document {}", index + 1);
    // Every input error names the line its document starts on (the place
    // alone names a generated workload, which must not change).
    load_doc(doc, &at, options, out).map_err(|e| match e {
        InputError::Invalid { at: place, message } if place.starts_with(&at) => {
            InputError::Invalid {
                at: format!("{at} (line {line}){}", &place[at.len()..]),
                message,
            }
        }
        other => other,
    })?;
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
pub(crate) fn document_lines(text: &str, count: usize) -> Vec<usize> {
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
