//! An outsider on the network against both services, over real sockets:
//! the drain needs the process's secret whatever edge a request came
//! through, and every resource a client can hold is bounded.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::fault::Haproxy;
use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// `/ready` straight from the service.
async fn ready(s: &Service) -> u16 {
    client()
        .get(s.url("/ready"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn an_outside_drain_through_a_loopback_http_proxy_is_refused() {
    // HAProxy in `mode http` adds no forwarding header by default: to the
    // service its requests are a loopback peer with a clean head.
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let front = Haproxy::start(&[s.port]);
        let c = client();
        // Through the front once it has found the replica ready.
        eventually(Duration::from_secs(10), || async {
            c.get(front.url("/health"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        for authorization in [None, Some("Bearer 00"), Some("Basic YTpi")] {
            let mut req = c.post(front.url("/__internal/drain"));
            if let Some(a) = authorization {
                req = req.header("authorization", a);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 403, "{bin}: {authorization:?}");
            let body = r.text().await.unwrap();
            assert!(body.contains("drain token"), "{bin}: {body}");
        }
        assert_eq!(ready(&s).await, 200, "{bin}: an outsider drained the pod");
        // The pod's own hook still drains it.
        assert_eq!(s.drain(&c).send().await.unwrap().status(), 200, "{bin}");
        assert_eq!(ready(&s).await, 503, "{bin}");
    }
}

#[tokio::test]
async fn client_address_headers_never_open_the_drain() {
    // Configured (the service keys callers by it) and unconfigured
    // headers an edge may set naming the client: none proves the pod.
    let configured = [
        ("ATE_TRUSTED_PROXIES", "127.0.0.1/32,::1/128"),
        ("ATE_CLIENT_IP_SOURCE", "cf-connecting-ip"),
    ];
    for bin in SERVICES {
        for env in [&configured[..], &[]] {
            let s = Service::start(bin, env);
            let c = client();
            for name in [
                "cf-connecting-ip",
                "true-client-ip",
                "fly-client-ip",
                "x-client-ip",
                "x-cluster-client-ip",
                "fastly-client-ip",
                "x-original-forwarded-for",
                "x-appengine-user-ip",
            ] {
                let r = c
                    .post(s.url("/__internal/drain"))
                    .header(name, "203.0.113.9")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 403, "{bin} {env:?}: {name}");
            }
            assert_eq!(ready(&s).await, 200, "{bin} {env:?}");
        }
    }
}

#[tokio::test]
async fn the_hook_drains_over_ipv6_and_ipv4_mapped_loopback() {
    for bin in SERVICES {
        for listen in ["[::1]:0", "[::]:0"] {
            let s = Service::start_on(bin, listen);
            let c = client();
            // No secret from IPv6 loopback: refused.
            let bare = c
                .post(format!("http://[::1]:{}/__internal/drain", s.port))
                .send()
                .await
                .unwrap();
            assert_eq!(bare.status(), 403, "{bin} {listen}");
            // The hook, which tries 127.0.0.1 first (a dual-stack
            // listener sees ::ffff:127.0.0.1), then ::1.
            let out = std::process::Command::new(bin)
                .args(["drain", "--port", &s.port.to_string(), "--sleep", "0"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{bin} {listen}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r = c
                .get(format!("http://[::1]:{}/ready", s.port))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 503, "{bin} {listen}");
        }
    }
}

#[tokio::test]
async fn the_secret_file_is_private_and_goes_with_the_process() {
    use std::os::unix::fs::PermissionsExt;
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run").join("drain.token");
        let file_text = file.to_str().unwrap().to_owned();
        let mut s = Service::start(bin, &[("ATE_DRAIN_TOKEN_FILE", &file_text)]);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{bin}");
        // The hook finds it through the same variable.
        let out = std::process::Command::new(bin)
            .args(["drain", "--port", &s.port.to_string(), "--sleep", "0"])
            .env("ATE_DRAIN_TOKEN_FILE", &file_text)
            .output()
            .unwrap();
        assert!(out.status.success(), "{bin}");
        s.sigterm();
        assert!(s.wait_exit(Duration::from_secs(30)).is_some(), "{bin}");
        assert!(!file.exists(), "{bin}: the secret outlived the process");
    }
}

/// Reads until the server closes the connection or `bound` passes; what
/// it read, and whether it closed.
fn read_until_closed(stream: &mut std::net::TcpStream, bound: Duration) -> (String, bool) {
    stream.set_read_timeout(Some(bound)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&got).into_owned(), true);
            }
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
        }
    }
}

#[test]
fn slow_headers_and_idle_connections_are_closed() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_HTTP_IDLE_TIMEOUT_SECS", "1")]);
        // A head that never ends.
        let mut slow = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        // A kept-alive connection that goes quiet after one request.
        let mut idle = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        // A silent one.
        let mut silent = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        let start = Instant::now();
        // The bound is far above the 1 s setting: it only stops a test
        // whose server never closes.
        for (what, stream) in [
            ("slow", &mut slow),
            ("idle", &mut idle),
            ("silent", &mut silent),
        ] {
            let (read, closed) = read_until_closed(stream, Duration::from_secs(20));
            assert!(
                closed,
                "{bin}: a {what} connection stayed open; read {read:?}"
            );
            if what == "idle" {
                assert!(read.starts_with("HTTP/1.1 200"), "{bin}: {read:?}");
            }
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{bin}");
        // The service still serves.
        let mut fresh = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        fresh
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (read, _) = read_until_closed(&mut fresh, Duration::from_secs(20));
        assert!(read.starts_with("HTTP/1.1 200"), "{bin}: {read:?}");
    }
}

#[tokio::test]
async fn objects_are_bounded_in_count_per_caller_and_in_bytes() {
    for bin in SERVICES {
        let s = Service::start(
            bin,
            &[
                ("ATE_TRUSTED_PROXIES", "127.0.0.1/32"),
                ("ATE_MAX_OBJECTS", "3"),
                ("ATE_MAX_OBJECTS_PER_CALLER", "2"),
                ("ATE_MAX_OBJECT_BYTES", "3000"),
            ],
        );
        let c = client();
        let put = |name: &'static str, caller: &'static str, size: usize| {
            let c = c.clone();
            let url = s.url(&format!("/objects/{name}"));
            async move {
                let body = format!(r#"{{"pad":"{}"}}"#, "x".repeat(size));
                let r = c
                    .put(url)
                    .header("x-caller", caller)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                (status, r.text().await.unwrap())
            }
        };
        assert_eq!(put("a", "alice", 10).await.0, 201, "{bin}");
        assert_eq!(put("b", "alice", 10).await.0, 201, "{bin}");
        let (status, body) = put("c", "alice", 10).await;
        assert_eq!(status, 507, "{bin}: {body}");
        assert!(body.contains("ATE_MAX_OBJECTS_PER_CALLER"), "{bin}: {body}");
        // Rewriting one's own object is not a new one.
        assert_eq!(put("a", "alice", 20).await.0, 200, "{bin}");
        // Bytes in all: bob's first object would take them past 3,000.
        let (status, body) = put("d", "bob", 2_990).await;
        assert_eq!(status, 507, "{bin}: {body}");
        assert!(body.contains("ATE_MAX_OBJECT_BYTES"), "{bin}: {body}");
        assert_eq!(put("d", "bob", 100).await.0, 201, "{bin}");
        // Count in all.
        let (status, body) = put("e", "carol", 10).await;
        assert_eq!(status, 507, "{bin}: {body}");
        assert!(body.contains("ATE_MAX_OBJECTS)"), "{bin}: {body}");
        // A refused write changed nothing.
        let r = c.get(s.url("/objects/e")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{bin}");
    }
}

#[tokio::test]
async fn invoke_is_rate_limited_per_caller() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_INVOKE_PER_MIN", "5")]);
        let c = client();
        let mut statuses = Vec::new();
        for i in 0..8 {
            let r = c
                .post(s.url("/invoke"))
                .header("idempotency-key", format!("fresh-{i}"))
                .body(r#"{"amount":1}"#)
                .send()
                .await
                .unwrap();
            statuses.push(r.status().as_u16());
        }
        assert_eq!(
            statuses,
            [200, 200, 200, 200, 200, 429, 429, 429],
            "{bin}: one caller's fresh keys"
        );
    }
}

#[tokio::test]
async fn a_clients_own_x_caller_never_names_it() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_NOTIFICATIONS_PER_MIN", "3")]);
        let c = client();
        let mut allowed = 0;
        for i in 0..10 {
            let r = c
                .post(s.url("/notify"))
                .header("x-caller", format!("rotating-{i}"))
                .send()
                .await
                .unwrap();
            allowed += u32::from(r.status() == 200);
        }
        assert_eq!(allowed, 3, "{bin}: rotating X-Caller escaped the limit");
    }
}

#[tokio::test]
async fn websocket_sessions_are_capped_and_idle_ones_closed() {
    for bin in SERVICES {
        let s = Service::start(
            bin,
            &[
                ("ATE_MAX_WS_SESSIONS", "2"),
                ("ATE_WS_IDLE_TIMEOUT_SECS", "1"),
            ],
        );
        let url = format!("ws://127.0.0.1:{}/ws", s.port);
        let (mut one, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        let (_two, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        let third = tokio_tungstenite::connect_async(&url).await;
        match third {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
                assert_eq!(r.status(), 503, "{bin}");
            }
            other => panic!("{bin}: a third session: {other:?}"),
        }
        // A session that talks stays; both close once silent for 1 s.
        one.send(Message::text("hi")).await.unwrap();
        assert_eq!(one.next().await.unwrap().unwrap(), Message::text("hi"));
        let closed = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match one.next().await {
                    Some(Ok(Message::Close(frame))) => return frame,
                    Some(Ok(_)) => continue,
                    other => panic!("{bin}: {other:?}"),
                }
            }
        })
        .await
        .expect("an idle session was never closed")
        .unwrap();
        assert_eq!(u16::from(closed.code), 1001, "{bin}");
        assert_eq!(closed.reason, "idle timeout", "{bin}");
        // Slots come back: a new session opens once the old ones are gone.
        eventually(Duration::from_secs(20), || async {
            tokio_tungstenite::connect_async(&url).await.is_ok()
        })
        .await;
    }
}

#[test]
fn startup_errors_never_print_a_urls_credentials() {
    for bin in SERVICES {
        for (var, value) in [
            (
                "ATE_PROVIDER_URL",
                "http://user:s3cret@provider:9000/charge",
            ),
            ("ATE_PROVIDER_URL", "htp://user:s3cret@provider:9000/charge"),
            (
                "ATE_RATELIMIT_REDIS_CLUSTER",
                "rdis://app:s3cret@cache:6379",
            ),
        ] {
            let said = start_refused(bin, var, value);
            assert!(!said.contains("s3cret"), "{bin}: {said}");
            assert!(said.contains(var), "{bin}: {said}");
        }
    }
}
