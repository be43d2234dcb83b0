//! Who may trigger the drain endpoint: the pod's own preStop hook, i.e. a
//! loopback peer.

use std::net::IpAddr;

/// Whether `peer` may call the drain trigger endpoint.
///
/// Allowed: `127.0.0.0/8`, `::1`, and IPv4-mapped IPv6 loopback
/// (`::ffff:127.0.0.1`). Everything else is refused, including `0.0.0.0`,
/// `::`, link-local, private and public addresses, and the deprecated
/// IPv4-compatible form `::127.0.0.1`.
///
/// ```
/// use ate_readiness::is_loopback_peer;
/// assert!(is_loopback_peer("127.0.0.1".parse().unwrap()));
/// assert!(is_loopback_peer("::ffff:127.0.0.1".parse().unwrap()));
/// assert!(!is_loopback_peer("10.0.0.7".parse().unwrap()));
/// ```
#[must_use]
pub fn is_loopback_peer(peer: IpAddr) -> bool {
    match peer {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.is_loopback(),
            None => v6.is_loopback(),
        },
    }
}
