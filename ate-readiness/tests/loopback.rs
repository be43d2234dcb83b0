//! The loopback rule for the drain trigger endpoint.

use ate_readiness::is_loopback_peer;

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
