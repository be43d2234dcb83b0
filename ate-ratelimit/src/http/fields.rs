//! The IETF `RateLimit-Policy` and `RateLimit` header fields
//! (draft-ietf-httpapi-ratelimit-headers-11), written as Structured Field
//! lists.

use std::time::Duration;

use bytes::Bytes;

use crate::{Combined, Quota};

/// The `RateLimit-Policy` field's name.
pub(crate) const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// The `RateLimit` field's name.
pub(crate) const RATELIMIT: &str = "ratelimit";

/// A header field value being written, inline up to 128 bytes.
struct FieldValue(smallvec::SmallVec<[u8; 128]>);

impl std::fmt::Write for FieldValue {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A limit's name as a Structured Field string (`"notify"`): quotes and
/// backslashes escaped, anything outside visible ASCII left out.
fn push_sf_string(out: &mut String, name: &str) {
    write_sf_string(out, name);
}

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
#[test]
fn ceil_secs_saturates_on_the_longest_wait() {
    assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
    assert_eq!(ceil_secs(Duration::from_millis(1_500)), 2);
}

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
        push_sf_string(&mut out, name);
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
    let mut out = String::with_capacity(32 * decision.decisions().len());
    write_ratelimit_field(&mut out, decision);
    out
}

/// [`ratelimit_field`], written into `out`.
fn write_ratelimit_field(out: &mut impl std::fmt::Write, decision: &Combined<'_>) {
    for (i, ((name, d), reset)) in decision
        .decisions()
        .iter()
        .zip(decision.resets())
        .enumerate()
    {
        let t = d.retry_after().unwrap_or(*reset);
        if i > 0 {
            let _ = out.write_str(", ");
        }
        write_sf_string(out, name);
        let _ = write!(out, ";r={};t={}", d.remaining(), ceil_secs(t));
    }
}

/// [`ratelimit_field`] as the bytes of a header value: written on the
/// stack, copied once.
pub(crate) fn ratelimit_bytes(decision: &Combined<'_>) -> Bytes {
    let mut field = FieldValue(smallvec::SmallVec::new());
    write_ratelimit_field(&mut field, decision);
    Bytes::copy_from_slice(&field.0)
}
