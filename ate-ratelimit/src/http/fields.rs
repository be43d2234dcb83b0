//! The IETF `RateLimit-Policy` and `RateLimit` header fields
//! (draft-ietf-httpapi-ratelimit-headers-11), written as Structured Field
//! lists.

use std::time::Duration;

use bytes::Bytes;

use super::key::push_decimal;
use crate::{Combined, Quota};

/// The `RateLimit-Policy` field's name.
pub(crate) const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// The `RateLimit` field's name.
pub(crate) const RATELIMIT: &str = "ratelimit";

/// A limit's name as a Structured Field string (`"notify"`): quotes and
/// backslashes escaped, anything outside visible ASCII left out.
fn write_sf_string(out: &mut impl std::fmt::Write, name: &str) {
    let _ = out.write_char('"');
    for c in name.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            let _ = out.write_char('\\');
        }
        let _ = out.write_char(c);
    }
    let _ = out.write_char('"');
}

/// Whole seconds, rounded up (a client told less would come back early).
fn ceil_secs(d: Duration) -> u64 {
    // Saturating: a wait near Duration::MAX is u64::MAX seconds, not an
    // overflow (a panic in debug builds, 0 in release).
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The `RateLimit-Policy` field value (draft-ietf-httpapi-ratelimit-headers
/// -11) for named limits: one item per limit, its quota and window in
/// seconds: `"notify";q=150;w=60, "requests";q=600;w=60`.
pub fn policy_field<'n>(limits: impl IntoIterator<Item = (&'n str, Quota)>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for (i, (name, quota)) in limits.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_sf_string(&mut out, name);
        let _ = write!(out, ";q={};w={}", quota.limit(), ceil_secs(quota.window()));
    }
    out
}

/// The `RateLimit` field value for a decision: one item per limit, the
/// attempts left (`r`) and the seconds until its quota starts to come back
/// (`t`: a denial's `Retry-After`, or for an allowed one the time until
/// the oldest attempt counted leaves its window):
/// `"notify";r=149;t=60, "requests";r=599;t=60`.
pub fn ratelimit_field(decision: &Combined<'_>) -> String {
    String::from_utf8_lossy(&field_bytes(decision)).into_owned()
}

/// [`ratelimit_field`] as the bytes of a header value: written on the
/// stack, copied once.
pub(crate) fn ratelimit_bytes(decision: &Combined<'_>) -> Bytes {
    Bytes::copy_from_slice(&field_bytes(decision))
}

/// The `RateLimit` field's bytes, inline up to 128, written without the
/// formatting machinery (through it, this cost more than the check).
fn field_bytes(decision: &Combined<'_>) -> smallvec::SmallVec<[u8; 128]> {
    let mut out = smallvec::SmallVec::new();
    for (i, ((name, d), reset)) in decision
        .decisions()
        .iter()
        .zip(decision.resets())
        .enumerate()
    {
        let t = d.retry_after().unwrap_or(*reset);
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        push_sf_string(&mut out, name);
        out.extend_from_slice(b";r=");
        push_decimal(&mut out, u64::from(d.remaining()));
        out.extend_from_slice(b";t=");
        push_decimal(&mut out, ceil_secs(t));
    }
    out
}

/// `name` as a Structured Field string onto `out`: at once where it needs
/// no escape (visible ASCII without `"` or `\`), else as
/// [`write_sf_string`] writes it.
fn push_sf_string(out: &mut smallvec::SmallVec<[u8; 128]>, name: &str) {
    let plain = name
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\');
    if plain {
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
    } else {
        let mut quoted = String::new();
        write_sf_string(&mut quoted, name);
        out.extend_from_slice(quoted.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ceil_secs, push_sf_string, write_sf_string};

    #[test]
    fn ceil_secs_saturates_on_the_longest_wait() {
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
        assert_eq!(ceil_secs(Duration::from_millis(1_500)), 2);
    }

    #[test]
    fn a_name_reads_the_same_on_the_fast_path_and_the_escaping_one() {
        for name in [
            "notify",
            "a b",
            "q\"x",
            "back\\slash",
            "caf\u{e9}",
            "",
            "~!",
        ] {
            let mut fast = smallvec::SmallVec::<[u8; 128]>::new();
            push_sf_string(&mut fast, name);
            let mut slow = String::new();
            write_sf_string(&mut slow, name);
            assert_eq!(std::str::from_utf8(&fast).unwrap(), slow, "{name:?}");
        }
    }
}
