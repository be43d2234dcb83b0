//! Who may trigger the drain endpoint: the pod's own preStop hook, i.e. a
//! loopback peer that is not a proxy forwarding someone else's request.

use std::net::IpAddr;

/// Whether `peer` may call the drain trigger endpoint.
///
/// Allowed: `127.0.0.0/8`, `::1`, and IPv4-mapped IPv6 loopback
/// (`::ffff:127.0.0.1`). Everything else is refused, including `0.0.0.0`,
/// `::`, link-local, private and public addresses, and the deprecated
/// IPv4-compatible form `::127.0.0.1`.
///
/// ```
/// use ate_readiness::peer::is_loopback_peer;
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

/// Whether a header named `name` (any case) marks a request a proxy
/// forwarded: `Forwarded`, `Via`, `X-Real-IP`, and every `X-Forwarded-*`,
/// `X-Envoy-*` and `L5d-*` header (Envoy, so Istio, and Linkerd add these
/// to what they pass on).
#[must_use]
pub fn is_forwarding_header(name: &str) -> bool {
    // Bytes, not `str` slices: a name that is not ASCII must not panic.
    let has_prefix = |prefix: &str| {
        name.as_bytes()
            .get(..prefix.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes()))
    };
    ["forwarded", "via", "x-real-ip"]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        || ["x-forwarded-", "x-envoy-", "l5d-"]
            .iter()
            .any(|p| has_prefix(p))
}

/// Whether a request from `peer` with headers named `header_names` may
/// trigger the drain: a loopback peer ([`is_loopback_peer`]) and no
/// header a forwarding proxy adds ([`is_forwarding_header`]).
///
/// A sidecar proxy connects to the application from loopback: behind
/// Istio's Envoy every request comes from `127.0.0.6` (or `127.0.0.1`), so
/// the peer address alone would let any pod in the mesh drain this one.
/// The requests such a proxy passes on carry forwarding headers (Envoy
/// sends `X-Forwarded-Proto` with every HTTP/1.1 request it passes on,
/// and Istio's mutual TLS adds `X-Forwarded-Client-Cert`), so they are
/// refused; the pod's own preStop hook sends none. A proxy that adds no
/// such header (a plain TCP proxy) cannot be told apart from a local
/// caller: in a mesh, also deny the drain path to other workloads at the
/// mesh (with Istio, an `AuthorizationPolicy` on the path). Neither can
/// `kubectl port-forward`, whose connections reach the pod from its own
/// loopback: whoever may port-forward to the pod (RBAC
/// `pods/portforward`) may drain it, as whoever may `exec` into it could.
///
/// ```
/// use ate_readiness::peer::is_local_caller;
/// let loopback = "127.0.0.1".parse().unwrap();
/// assert!(is_local_caller(loopback, ["host", "content-length"]));
/// // Envoy forwarding a request from another pod, from 127.0.0.6:
/// let sidecar = "127.0.0.6".parse().unwrap();
/// assert!(!is_local_caller(sidecar, ["host", "x-forwarded-proto", "x-request-id"]));
/// assert!(!is_local_caller("10.0.0.7".parse().unwrap(), ["host"]));
/// ```
#[must_use]
pub fn is_local_caller<'a>(peer: IpAddr, header_names: impl IntoIterator<Item = &'a str>) -> bool {
    is_loopback_peer(peer) && !header_names.into_iter().any(is_forwarding_header)
}
