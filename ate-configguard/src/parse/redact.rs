//! Parser messages with any value they quote taken out.

/// Turns a parser message into one that cannot echo input values: quoted
/// and back-ticked spans are redacted unless they are a duplicate key name.
pub(crate) fn redact(message: &str) -> String {
    // serde ends an unknown field's or variant's message with the names the
    // type has ("expected `a` or `b`", "expected one of `a`, `b`, `c`"):
    // the type's names, kept whole, however many.
    let first = message.lines().next().unwrap_or("");
    let (message, names) = match first.rfind("expected ") {
        Some(at) if names_listed(&first[at + "expected ".len()..]) => {
            let at = at + "expected ".len();
            (&first[..at], &first[at..])
        }
        _ => (message, ""),
    };
    let mut out = String::with_capacity(message.len() + names.len());
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '"' | '`' | '\'') {
            let close = c;
            let mut inner = String::new();
            let mut closed = false;
            for d in chars.by_ref() {
                if d == close {
                    closed = true;
                    break;
                }
                inner.push(d);
            }
            // Field and key names are names, never values; and a YAML
            // indicator the parser quotes ("unclosed bracket '['") is
            // punctuation, which no value is made of alone.
            let indicator = {
                let mut one = inner.chars();
                matches!((one.next(), one.next()), (Some(c), None) if "[]{},:-?|>!&*#%@'\"`".contains(c))
            };
            let keep = closed
                && (indicator
                    || ["duplicate key ", "missing field ", "unknown field "]
                        .iter()
                        .any(|before| out.ends_with(before)));
            out.push(close);
            out.push_str(if keep { &inner } else { "…" });
            if closed {
                out.push(close);
            }
        } else {
            out.push(c);
        }
    }
    // Parser messages can quote a scalar without quotes ("found string x"):
    // keep only the first line and cap the length.
    let first = out.lines().next().unwrap_or("").to_owned();
    let capped = if first.chars().count() > 160 {
        first.chars().take(160).collect::<String>() + "…"
    } else {
        first
    };
    capped + names
}

/// Whether `tail` is, to its end, serde's list of a type's names: "`a`",
/// "`a` or `b`" or "one of `a`, `b`, ...", each a name (letters, digits,
/// `_ - . $ @`).
fn names_listed(tail: &str) -> bool {
    let name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$' | '@'))
    };
    let quoted = |item: &str| {
        item.strip_prefix('`')
            .and_then(|i| i.strip_suffix('`'))
            .is_some_and(name)
    };
    match tail.strip_prefix("one of ") {
        Some(list) => list.split(", ").all(quoted),
        None => match tail.split_once(" or ") {
            Some((a, b)) => quoted(a) && quoted(b),
            None => quoted(tail),
        },
    }
}
