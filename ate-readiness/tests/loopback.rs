//! The loopback rule for the drain trigger endpoint.

use ate_readiness::peer::{is_forwarding_header, is_local_caller, is_loopback_peer};

#[test]
fn only_loopback_peers_may_trigger_the_drain() {
    let table = [
        ("127.0.0.1", true),
        ("127.0.0.2", true),
        ("127.255.255.254", true),
        ("::1", true),
        ("::ffff:127.0.0.1", true),
        ("::ffff:127.10.0.1", true),
        ("0.0.0.0", false),
        ("::", false),
        ("10.0.0.1", false),
        ("172.16.0.5", false),
        ("192.168.1.1", false),
        ("169.254.1.1", false),
        ("8.8.8.8", false),
        ("128.0.0.1", false),
        ("126.255.255.255", false),
        ("fe80::1", false),
        ("fd00::1", false),
        ("2001:db8::1", false),
        ("::ffff:10.0.0.1", false),
        ("::ffff:0.0.0.0", false),
        ("::127.0.0.1", false),
        ("::2", false),
    ];
    for (addr, allowed) in table {
        assert_eq!(
            is_loopback_peer(addr.parse().unwrap()),
            allowed,
            "peer {addr}"
        );
    }
}

#[test]
fn a_loopback_peer_forwarding_someone_elses_request_may_not_trigger_the_drain() {
    // Istio's sidecar connects from 127.0.0.6 and adds X-Forwarded-Proto;
    // the pod's own preStop hook adds no forwarding header.
    let sidecar = "127.0.0.6".parse().unwrap();
    let plain = [
        "host",
        "content-length",
        "connection",
        "user-agent",
        "x-request-id",
    ];
    assert!(is_local_caller(sidecar, plain));
    assert!(is_local_caller("::1".parse().unwrap(), plain));
    for forwarded in [
        "Forwarded",
        "via",
        "X-Forwarded-For",
        "x-forwarded-proto",
        "X-FORWARDED-HOST",
        "x-forwarded-client-cert",
        "x-real-ip",
        "x-envoy-attempt-count",
        "x-envoy-external-address",
        "l5d-client-id",
    ] {
        assert!(is_forwarding_header(forwarded), "{forwarded}");
        assert!(
            !is_local_caller(sidecar, ["host", forwarded]),
            "a request carrying {forwarded}"
        );
    }
    for other in [
        "x-forwarded",
        "forwarded-for",
        "x-envoy",
        "l5d",
        "via-x",
        "é-forwarded-",
        "",
        "x-request-id",
    ] {
        assert!(!is_forwarding_header(other), "{other}");
    }
    // A remote peer stays refused whatever its headers.
    assert!(!is_local_caller("10.0.0.7".parse().unwrap(), plain));
}
