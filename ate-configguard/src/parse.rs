//! Reading manifests: multi-document YAML or JSON, into a names-only form.
//!
//! Values never survive parsing: the `data`, `stringData`, `binaryData` and
//! `annotations` fields of every document are read as key names with an
//! ignored value, so a Secret's values (and the copy of them `kubectl apply`
//! leaves in an annotation) are dropped by the deserializer itself.
//! Everything else is read into a [`Node`] tree that refuses duplicate
//! keys, and workloads
//! are then decoded into k8s-openapi types with every ignored field
//! reported (k8s-openapi silently drops fields it does not know).

use crate::error::InputError;

/// The `visit_*` methods of a [`Visitor`] for every scalar (a bool, a
/// number, a string), each skipping the value and answering `$answer`.
macro_rules! scalars_answer {
    ($value:ty, $answer:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$value, E> {
            Ok($answer)
        }
        fn visit_str<E>(self, _: &str) -> Result<$value, E> {
            Ok($answer)
        }
    };
}

mod node;
use node::{Full, Redacted, Wrapped};
pub(crate) use node::{NOT_A_STRING, Node, VALUE_BYTES, VALUE_DIGESTS, value_digest};
mod redact;
pub(crate) use redact::redact;

/// Fields whose values are configuration values (never kept). The names of
/// `annotations` are kept but not their values: `kubectl apply` copies a
/// whole object, a Secret's values included, into its
/// `kubectl.kubernetes.io/last-applied-configuration` annotation, and no
/// check here reads an annotation's value.
/// A SealedSecret's `encryptedData` holds ciphertexts: dropped as well.
pub(crate) const VALUE_FIELDS: [&str; 5] = [
    "data",
    "stringData",
    "binaryData",
    "encryptedData",
    "annotations",
];

/// The one key of the map that stands for a `data`-like field holding a
/// list (an ExternalSecret's or a SecretProviderClass's `data`): for each
/// item, a map of the key names it gives (`secretKey`, `key`), or null for
/// an item that is no map.
pub(crate) const DATA_LIST: &str = "(list)";

/// Splits `text` (from `source`) into documents, dropping every value of
/// `data`, `stringData` and `binaryData` while parsing.
pub(crate) fn documents(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    parse_documents::<Redacted>(text, source)
}

/// Splits `text` into documents keeping every value (drift check only,
/// after the kind was checked with [`documents`]).
pub(crate) fn documents_with_values(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    parse_documents::<Full>(text, source)
}

/// `text` without a leading byte-order mark (U+FEFF), which YAML allows and
/// kubectl skips, in JSON too.
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

fn parse_documents<W: Wrapped>(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    let text = without_bom(text);
    let trimmed = text.trim_start();
    if source.ends_with(".json") {
        return json_documents::<W>(text, source);
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // JSON by its look; but YAML holds JSON too, and a stream may go
        // on in YAML after a `---` (a JSON document first, then YAML
        // ones): read as YAML what JSON cannot read, and name the JSON
        // error if YAML cannot either.
        return json_documents::<W>(text, source)
            .or_else(|json| yaml_documents::<W>(text, source).map_err(|_| json));
    }
    yaml_documents::<W>(text, source)
}

/// A serde_json error's position (`line L column C`) and its message
/// without it (serde_json's message ends with the same position).
pub(crate) fn json_error(e: &serde_json::Error) -> (String, String) {
    let location = format!("line {} column {}", e.line(), e.column());
    let message = e.to_string();
    let message = match message.strip_suffix(&format!(" at {location}")) {
        Some(m) => m.to_owned(),
        None => message,
    };
    (location, message)
}

/// One JSON document, or a stream of them one after another (what `jq -c
/// '.items[]'` prints), read with one deserializer so that an error's
/// line is the file's.
fn json_documents<W: Wrapped>(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut out = Vec::new();
    loop {
        let node = W::deserialize(&mut de).map(W::node).map_err(|e| {
            let (location, message) = json_error(&e);
            InputError::Parse {
                file: source.into(),
                location,
                message: redact(&message),
            }
        })?;
        match node {
            // A bare JSON array of objects is a document list.
            Node::Seq(items) => out.extend(items),
            other => out.push(other),
        }
        if de.end().is_ok() {
            return Ok(out);
        }
    }
}

/// A multi-document YAML stream.
fn yaml_documents<W: Wrapped>(text: &str, source: &str) -> Result<Vec<Node>, InputError> {
    let chunks = split_stream(
        text,
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
    );
    if chunks.len() == 1 {
        return parse_yaml::<W>(text, source, 0);
    }
    // A big stream: its documents are parsed in parallel, one chunk of
    // whole documents per core, and concatenated in order.
    let results: Vec<Result<Vec<Node>, InputError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|&(line, chunk)| scope.spawn(move || parse_yaml::<W>(chunk, source, line)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(InputError::Invalid {
                        at: source.into(),
                        message: "internal error while parsing".into(),
                    })
                })
            })
            .collect()
    });
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// Below this size a stream is parsed on one thread.
const PARALLEL_PARSE_BYTES: usize = 512 * 1024;

/// Cuts a YAML stream into about `parts` pieces at document-start lines
/// (`---` at column 0, which can only be a document marker: YAML forbids it
/// inside scalars), returning each piece with the number of lines before it.
fn split_stream(text: &str, parts: usize) -> Vec<(usize, &str)> {
    if parts < 2 || text.len() < PARALLEL_PARSE_BYTES || text.starts_with('%') {
        return vec![(0, text)];
    }
    let bytes = text.as_bytes();
    let mut cuts = vec![0usize];
    for k in 1..parts {
        let mut pos = (text.len() * k / parts).max(*cuts.last().unwrap_or(&0));
        let found = loop {
            let Some(off) = text[pos..].find("\n---") else {
                break None;
            };
            let start = pos + off + 1;
            match bytes.get(start + 3) {
                None | Some(b' ' | b'\n' | b'\r' | b'\t') => break Some(start),
                _ => pos = start,
            }
        };
        match found {
            Some(start) if start > *cuts.last().unwrap_or(&0) => cuts.push(start),
            _ => break,
        }
    }
    cuts.push(text.len());
    let mut line = 0;
    let mut out = Vec::with_capacity(cuts.len() - 1);
    for w in cuts.windows(2) {
        out.push((line, &text[w[0]..w[1]]));
        line += text[w[0]..w[1]].bytes().filter(|&b| b == b'\n').count();
    }
    out
}

/// The parser's message without its own location suffix: the error's
/// `location` field holds it, counted from the start of the whole stream,
/// where the parser's own count starts at the chunk it was given (a chunk
/// of a large stream said "line 200001" and "line 100000" for one error).
/// Other lines it names (an alias's definition) get the chunk's offset.
fn yaml_message(e: &serde_saphyr::Error, line_offset: usize) -> String {
    use serde_saphyr::Location;
    use serde_saphyr::localizer::Localizer;
    struct LocatedElsewhere;
    impl Localizer for LocatedElsewhere {
        fn attach_location<'a>(
            &self,
            base: std::borrow::Cow<'a, str>,
            _: Location,
        ) -> std::borrow::Cow<'a, str> {
            base
        }
    }
    let formatter = serde_saphyr::DefaultMessageFormatter.with_localizer(&LocatedElsewhere);
    let mut options = serde_saphyr::RenderOptions::default();
    options.formatter = &formatter;
    options.snippets = serde_saphyr::SnippetMode::Off;
    options.line_offset = line_offset as u64;
    let text = e
        .render_with_options(options)
        // Advice to the parser's caller (this tool), not to its user.
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
    budget_in_words(&text).unwrap_or(text)
}

/// The parser's resource limits, said in the user's terms rather than as
/// its Rust debug text (`budget breached: Depth { depth: 65 }`).
fn budget_in_words(text: &str) -> Option<String> {
    let rest = text.strip_prefix("budget breached: ")?;
    let (what, number) = rest.split_once(" { ")?;
    let number: String = number.chars().filter(char::is_ascii_digit).collect();
    let said = match what {
        "Depth" => format!("nested {number} levels deep, deeper than this tool reads"),
        "Aliases" | "AliasExpansions" => {
            format!(
                "expands YAML aliases {number} times, more than this tool reads (an alias bomb?)"
            )
        }
        "Documents" => format!("holds {number} documents, more than this tool reads"),
        other => format!(
            "is larger than this tool reads ({} {number})",
            other.to_lowercase()
        ),
    };
    Some(format!("the YAML {said}"))
}

fn parse_yaml<W: Wrapped>(
    text: &str,
    source: &str,
    line_offset: usize,
) -> Result<Vec<Node>, InputError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    // YAML 1.1, as kubectl reads it: `010` is eight (a key `010:` is the key
    // `8`; `defaultMode: 0644` is 420).
    options.legacy_octal_numbers = true;
    // `.inf` and `.nan` reach the visitors as floats (kubectl reads them so,
    // and the API server refuses them): a data value then says "a number",
    // as any other unquoted number does, instead of a parser policy error.
    options.non_finite_float_policy = serde_saphyr::options::NonFiniteFloatPolicy::PassThrough;
    // The default budget (1,024 documents, 250k nodes) is meant for config
    // files; rendered manifests of a whole cluster are far larger. Alias
    // and depth limits stay at their defaults (alias bombs are still
    // refused).
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 10_000_000;
    budget.max_nodes = 200_000_000;
    budget.max_events = 400_000_000;
    budget.max_total_scalar_bytes = 4 << 30;
    budget.max_reader_input_bytes = None;
    options.budget = Some(budget);
    let docs: Vec<Option<W>> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
            let location = e
                .location()
                .map(|l| {
                    format!(
                        "line {} column {}",
                        l.line() as usize + line_offset,
                        l.column()
                    )
                })
                .unwrap_or_else(|| "unknown location".into());
            InputError::Parse {
                file: source.into(),
                location,
                message: redact(&yaml_message(&e, line_offset)),
            }
        })?;
    Ok(docs
        .into_iter()
        .flatten()
        .map(W::node)
        .filter(|n| *n != Node::Null)
        .collect())
}

#[cfg(test)]
mod tests;
