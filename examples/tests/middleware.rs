//! The services run on the crates' middleware: the IETF RateLimit fields
//! on `/notify` and `/prompt`, the caller behind `ATE_TRUSTED_PROXIES`
//! (never the client-set leftmost `X-Forwarded-For` entry), and `/ready`
//! answering 503 while the startup checks run.

mod common;

use common::*;

/// `"notifications";r=1;t=60` -> ("notifications", r).
fn remaining(field: &str, limit: &str) -> i64 {
    let list: sfv::List = sfv::Parser::new(field).parse().unwrap();
    for entry in list {
        if let sfv::ListEntry::Item(item) = entry
            && item.bare_item.as_string().unwrap().as_str() == limit
        {
            return i64::from(item.params.get("r").unwrap().as_integer().unwrap());
        }
    }
    panic!("{limit} not in {field:?}")
}

#[tokio::test]
async fn limited_routes_carry_the_ratelimit_fields_allowed_or_denied() {
    for bin in SERVICES {
        let s = Service::start(
            bin,
            &[
                ("ATE_NOTIFICATIONS_PER_MIN", "2"),
                ("ATE_PROMPT_PER_MIN", "1"),
            ],
        );
        let c = client();
        for (route, limit, n) in [("/notify", "notifications", 2), ("/prompt", "prompt", 1)] {
            for left in (0..n).rev() {
                let res = c
                    .post(s.url(route))
                    .header("x-caller", "fields")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200, "{bin} {route}");
                let policy = res.headers()["ratelimit-policy"]
                    .to_str()
                    .unwrap()
                    .to_owned();
                assert!(
                    policy.contains(&format!("\"{limit}\";q={n};w=60")),
                    "{bin}: {policy}"
                );
                assert!(
                    policy.contains("\"requests\";q=600;w=60"),
                    "{bin}: {policy}"
                );
                let now = res.headers()["ratelimit"].to_str().unwrap().to_owned();
                assert_eq!(remaining(&now, limit), left, "{bin} {route}: {now}");
            }
            let denied = c
                .post(s.url(route))
                .header("x-caller", "fields")
                .send()
                .await
                .unwrap();
            assert_eq!(denied.status(), 429, "{bin} {route}");
            assert!(denied.headers().contains_key("retry-after"));
            assert!(denied.headers().contains_key("ratelimit-policy"));
            let now = denied.headers()["ratelimit"].to_str().unwrap().to_owned();
            assert_eq!(remaining(&now, limit), 0, "{bin} {route}: {now}");
        }
    }
}

#[tokio::test]
async fn behind_trusted_proxies_the_caller_is_the_rightmost_untrusted_hop() {
    for bin in SERVICES {
        // The test client connects from loopback: that is the proxy.
        let s = Service::start(
            bin,
            &[
                ("ATE_NOTIFICATIONS_PER_MIN", "1"),
                ("ATE_TRUSTED_PROXIES", "127.0.0.1/32, ::1"),
            ],
        );
        let c = client();
        let notify = |xff: &'static str| {
            c.post(s.url("/notify"))
                .header("x-forwarded-for", xff)
                .send()
        };
        assert_eq!(notify("203.0.113.9").await.unwrap().status(), 200, "{bin}");
        // Another client behind the same proxy has a window of its own.
        assert_eq!(notify("198.51.100.4").await.unwrap().status(), 200, "{bin}");
        // A spoofed leftmost entry does not buy the first client a fresh one.
        assert_eq!(
            notify("6.6.6.6, 203.0.113.9").await.unwrap().status(),
            429,
            "{bin}"
        );
        // Nor does a chain of trusted hops.
        assert_eq!(
            notify("1.2.3.4, 203.0.113.9, 127.0.0.1")
                .await
                .unwrap()
                .status(),
            429,
            "{bin}"
        );
        // A malformed header from a trusted proxy is a 400 naming it.
        let bad = notify("not-an-address").await.unwrap();
        assert_eq!(bad.status(), 400, "{bin}");
        assert!(
            refused(bad, "bad XFF").await.contains("X-Forwarded-For"),
            "{bin}"
        );
        // X-Caller still wins.
        let named = c
            .post(s.url("/notify"))
            .header("x-caller", "svc")
            .header("x-forwarded-for", "203.0.113.9")
            .send()
            .await
            .unwrap();
        assert_eq!(named.status(), 200, "{bin}");
    }
}

#[tokio::test]
async fn without_trusted_proxies_forwarding_headers_are_ignored() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_NOTIFICATIONS_PER_MIN", "1")]);
        let c = client();
        let notify = |xff: &'static str| {
            c.post(s.url("/notify"))
                .header("x-forwarded-for", xff)
                .send()
        };
        assert_eq!(notify("203.0.113.9").await.unwrap().status(), 200, "{bin}");
        // A different claimed client is still the same peer.
        assert_eq!(notify("198.51.100.4").await.unwrap().status(), 429, "{bin}");
        // Not even a malformed one is read.
        assert_eq!(
            notify("not-an-address").await.unwrap().status(),
            429,
            "{bin}"
        );
    }
}

#[test]
fn a_bad_trusted_proxy_list_stops_the_service_naming_the_entry() {
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("ATE_TRUSTED_PROXIES", "10.0.0.0/8, lb.internal")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bin}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("ATE_TRUSTED_PROXIES") && stderr.contains("lb.internal"),
            "{bin}: {stderr}"
        );
    }
}

#[tokio::test]
async fn ready_is_503_starting_until_the_startup_checks_pass() {
    use axum::body::Body;
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let config = ate_examples::Config::from_env(dir.path().to_path_buf()).unwrap();
    let state = ate_examples::AppState::new(config).await.unwrap();
    let app = ate_examples::axum_app::router(state.clone());
    let get = |path: &'static str| {
        let app = app.clone();
        async move {
            let res = app
                .oneshot(axum::http::Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = res.status().as_u16();
            let body = axum::body::to_bytes(res.into_body(), 1 << 16)
                .await
                .unwrap();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    assert_eq!(
        get("/ready").await,
        (503, r#"{"ready":false,"state":"starting"}"#.to_owned())
    );
    assert_eq!(get("/health").await.0, 200, "alive while starting");
    state.ready_after_checks().await;
    assert_eq!(
        get("/ready").await,
        (200, r#"{"ready":true,"state":"serving"}"#.to_owned())
    );
}
