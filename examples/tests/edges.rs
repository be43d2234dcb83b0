//! The rough edges a new user meets, over real sockets on both services:
//! every input given at most once and as documented, every error JSON.

mod common;

use common::*;

#[tokio::test]
async fn a_joined_header_value_is_refused_like_two_headers() {
    // A proxy may join two header lines into "a, b": sent as one line it
    // must not be a key of its own while two lines are a 400.
    for bin in SERVICES {
        let s = Service::start(bin, &[EDGE]);
        let c = client();
        for key in ["a, b", "a b", "a,b"] {
            let r = c
                .post(s.url("/invoke"))
                .header("idempotency-key", key)
                .body(r#"{"amount":1}"#)
                .send()
                .await
                .unwrap();
            let error = refused(r, &format!("{bin}: key {key:?}")).await;
            assert!(error.contains("no space or comma"), "{bin}: {error}");
            let r = c
                .post(s.url("/notify"))
                .header("x-caller", key)
                .send()
                .await
                .unwrap();
            let error = refused(r, &format!("{bin}: caller {key:?}")).await;
            assert!(error.contains("X-Caller"), "{bin}: {error}");
        }
    }
}

#[tokio::test]
async fn a_simulation_header_given_twice_is_refused() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        for name in ["x-simulate", "x-simulate-delay-ms"] {
            let (first, second) = if name == "x-simulate" {
                ("rejected", "success")
            } else {
                ("1", "2")
            };
            let r = c
                .post(s.url("/invoke"))
                .header("idempotency-key", format!("twice-{name}"))
                .header(name, first)
                .header(name, second)
                .body(r#"{"amount":1}"#)
                .send()
                .await
                .unwrap();
            let error = refused(r, &format!("{bin}: {name}")).await;
            assert!(error.contains("exactly one"), "{bin}: {error}");
        }
    }
}

#[tokio::test]
async fn a_body_over_the_bound_is_413_on_the_limited_routes_too() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        for path in ["/notify", "/prompt"] {
            let r = c
                .post(s.url(path))
                .body(vec![b'x'; (1 << 20) + 1])
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 413, "{bin} {path}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert!(body["error"].is_string(), "{bin} {path}: {body}");
            // At the bound, served.
            let r = c
                .post(s.url(path))
                .body(vec![b'x'; 1 << 20])
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{bin} {path}");
        }
    }
}

#[tokio::test]
async fn a_plain_get_of_the_websocket_route_is_a_json_error() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let r = client().get(s.url("/ws")).send().await.unwrap();
        assert_eq!(r.status().as_u16() / 100, 4, "{bin}");
        let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("application/json"), "{bin}: {kind}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("not a WebSocket handshake"),
            "{bin}: {body}"
        );
    }
}
