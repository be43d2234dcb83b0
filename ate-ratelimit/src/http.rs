//! What an HTTP layer needs from a limiter, framework-neutral (features
//! `tower` and `actix` build on it): the caller's key, taken from the peer
//! or from forwarding headers only through trusted proxies, and the IETF
//! `RateLimit-Policy` / `RateLimit` header fields.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::{Combined, Quota};

pub use crate::layer::{Caller, Checked, Head};

/// Proxies whose forwarding headers are believed: load balancers and
/// ingress controllers in front of the service, as CIDRs.
///
/// ```
/// use ate_ratelimit::http::TrustedProxies;
///
/// let trusted = TrustedProxies::parse("10.0.0.0/8, 192.168.1.7")?;
/// assert!(trusted.contains("10.1.2.3".parse()?));
/// assert!(!trusted.contains("192.168.1.8".parse()?));
/// assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// No proxy is trusted: forwarding headers are ignored.
    pub fn none() -> Self {
        Self::default()
    }

    /// A comma-separated list of CIDRs or addresses (an address is its own
    /// /32 or /128); empty means none.
    ///
    /// # Errors
    ///
    /// [`KeyError::BadProxy`] naming the first entry that is neither.
    pub fn parse(list: &str) -> Result<Self, KeyError> {
        let mut nets = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let net = entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| KeyError::BadProxy {
                    value: entry.to_owned(),
                })?;
            nets.push(net);
        }
        Ok(Self(nets))
    }

    /// Whether `ip` is one of the trusted proxies (an IPv4-mapped IPv6
    /// address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Why a request's key could not be taken: the layers answer 400 naming
/// it, never a panic and never a key the client chose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A forwarding header from a trusted proxy holds something that is
    /// not an address.
    #[error("{header} holds {value:?}, which is not an IP address")]
    Malformed {
        /// The header's name.
        header: &'static str,
        /// The entry, as received (cut to 64 bytes).
        value: String,
    },
    /// The header the key is read from is missing, repeated, empty or not
    /// visible ASCII.
    #[error("header {header} must be given once, 1-256 visible ASCII characters")]
    BadHeader {
        /// The header's name.
        header: String,
    },
    /// The connection's peer address is not known to the layer.
    #[error("the peer address is unknown (is the server giving the layer its connect info?)")]
    NoPeer,
    /// A [`Caller::custom`](crate::http::Caller::custom) rule refused the
    /// request; the message is the 400's.
    #[error("{message}")]
    Refused {
        /// Why, for the client.
        message: String,
    },
    /// A trusted proxy entry that is neither a CIDR nor an address.
    #[error("trusted proxy {value:?} is neither a CIDR nor an IP address")]
    BadProxy {
        /// The entry.
        value: String,
    },
}

/// One hop of a forwarding chain.
enum Hop {
    Ip(IpAddr),
    /// `unknown` or an obfuscated identifier (RFC 7239): no address.
    Hidden,
}

fn shown(value: &str) -> String {
    value.chars().take(64).collect()
}

/// An address as forwarding headers write it: `1.2.3.4`, `1.2.3.4:80`,
/// `2001:db8::1`, `[2001:db8::1]:443`, optionally quoted.
fn parse_hop(raw: &str, header: &'static str) -> Result<Hop, KeyError> {
    let v = raw.trim().trim_matches('"');
    if v.eq_ignore_ascii_case("unknown") || v.starts_with('_') {
        return Ok(Hop::Hidden);
    }
    let malformed = || KeyError::Malformed {
        header,
        value: shown(v),
    };
    let port_ok = |port: &str| port.parse::<u16>().is_ok();
    let bare = if let Some(rest) = v.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        let (addr, after) = rest.split_once(']').ok_or_else(malformed)?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(port_ok)) {
            return Err(malformed());
        }
        addr
    } else if let Some((addr, port)) = v.split_once(':').filter(|(_, p)| !p.contains(':')) {
        // `v4:port` (a bare v6 has more than one colon).
        if !port_ok(port) {
            return Err(malformed());
        }
        addr
    } else {
        v
    };
    bare.parse::<IpAddr>()
        .map(|ip| Hop::Ip(canonical(ip)))
        .map_err(|_| malformed())
}

/// The hops a request's forwarding headers list, oldest (the client's
/// claim) first: RFC 7239 `Forwarded` (its `for=` values) when present,
/// else `X-Forwarded-For`. Every header line counts, in order.
fn hops<'a>(
    x_forwarded_for: impl IntoIterator<Item = &'a [u8]>,
    forwarded: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Hop>, KeyError> {
    let text = |header: &'static str, raw: &[u8]| {
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| KeyError::Malformed {
                header,
                value: shown(&String::from_utf8_lossy(raw)),
            })
    };
    let mut out = Vec::new();
    for line in forwarded {
        for element in text("Forwarded", line)?.split(',') {
            for pair in element.split(';') {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                if name.trim().eq_ignore_ascii_case("for") {
                    out.push(parse_hop(value, "Forwarded")?);
                }
            }
        }
    }
    if !out.is_empty() {
        return Ok(out);
    }
    for line in x_forwarded_for {
        for entry in text("X-Forwarded-For", line)?.split(',') {
            if !entry.trim().is_empty() {
                out.push(parse_hop(entry, "X-Forwarded-For")?);
            }
        }
    }
    Ok(out)
}

/// The client's address: the peer's, unless the peer is a trusted proxy;
/// then the forwarding chain is walked from the right (the entries the
/// proxies appended), skipping trusted proxies, and the first address that
/// is not one is the client. The leftmost entry is whatever the client
/// sent, so it is taken only when every hop after it is trusted. A hop a
/// proxy could not name (`unknown`) stops the walk at the proxy that
/// reported it.
///
/// ```
/// use std::net::IpAddr;
/// use ate_ratelimit::http::{TrustedProxies, client_ip};
///
/// let lb: IpAddr = "10.0.0.5".parse()?;
/// let trusted = TrustedProxies::parse("10.0.0.0/8")?;
/// // The client sent "6.6.6.6" itself; the load balancer appended the
/// // address it saw.
/// let xff = [b"6.6.6.6, 203.0.113.9".as_slice()];
/// assert_eq!(client_ip(lb, xff, [], &trusted)?, "203.0.113.9".parse::<IpAddr>()?);
/// // Not from a trusted proxy: the header is ignored.
/// let stranger: IpAddr = "198.51.100.1".parse()?;
/// assert_eq!(client_ip(stranger, xff, [], &trusted)?, stranger);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`KeyError::Malformed`] when a trusted proxy's header holds something
/// that is not an address.
pub fn client_ip<'a>(
    peer: IpAddr,
    x_forwarded_for: impl IntoIterator<Item = &'a [u8]>,
    forwarded: impl IntoIterator<Item = &'a [u8]>,
    trusted: &TrustedProxies,
) -> Result<IpAddr, KeyError> {
    let peer = canonical(peer);
    if !trusted.contains(peer) {
        return Ok(peer);
    }
    let mut nearest = peer;
    for hop in hops(x_forwarded_for, forwarded)?.into_iter().rev() {
        match hop {
            Hop::Hidden => return Ok(nearest),
            Hop::Ip(ip) if trusted.contains(ip) => nearest = ip,
            Hop::Ip(ip) => return Ok(ip),
        }
    }
    Ok(nearest)
}

/// A limit's name as a Structured Field string (`"notify"`): quotes and
/// backslashes escaped, anything outside visible ASCII left out.
fn push_sf_string(out: &mut String, name: &str) {
    out.push('"');
    for c in name.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// Whole seconds, rounded up (a client told less would come back early).
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
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
    use std::fmt::Write;
    let mut out = String::with_capacity(32 * decision.decisions().len());
    for (i, ((name, d), reset)) in decision
        .decisions()
        .iter()
        .zip(decision.resets())
        .enumerate()
    {
        let t = d.retry_after().unwrap_or(*reset);
        if i > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, name);
        let _ = write!(out, ";r={};t={}", d.remaining(), ceil_secs(t));
    }
    out
}
