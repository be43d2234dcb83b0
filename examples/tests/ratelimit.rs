//! Rate-limited routes: per-caller limits, the shared bucket, 429 with
//! Retry-After, and denials that keep a caller throttled.

mod common;

use std::time::Duration;

use common::*;

async fn post(c: &reqwest::Client, url: String, caller: &str) -> reqwest::Response {
    c.post(url).header("x-caller", caller).send().await.unwrap()
}

/// The `Retry-After` header, in whole seconds.
fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_151st_notification_gets_429_with_retry_after() {
    for bin in SERVICES {
        let s = Service::start(bin, &[EDGE]);
        let c = client();
        for i in 0..150 {
            assert_eq!(
                post(&c, s.url("/notify"), "alice").await.status(),
                200,
                "{bin} #{i}"
            );
        }
        let denied = post(&c, s.url("/notify"), "alice").await;
        assert_eq!(denied.status(), 429, "{bin}");
        let retry = retry_after(&denied);
        assert!((59..=61).contains(&retry), "{bin}: Retry-After {retry}");
        let body: serde_json::Value = denied.json().await.unwrap();
        assert_eq!(body["denied_by"], serde_json::json!(["notifications"]));
        // Another caller is unaffected.
        assert_eq!(post(&c, s.url("/notify"), "bob").await.status(), 200);
    }
}

#[tokio::test]
async fn an_unusable_x_caller_from_the_edge_is_a_400_naming_it_not_the_peers_window() {
    use reqwest::header::HeaderValue;
    let long = "a".repeat(129);
    let bad: [(&str, Vec<HeaderValue>, &str); 4] = [
        ("empty", vec![HeaderValue::from_static("")], "empty"),
        (
            "129 bytes",
            vec![HeaderValue::from_str(&long).unwrap()],
            "129 bytes",
        ),
        (
            "not ASCII",
            vec![HeaderValue::from_bytes("jos\u{e9}".as_bytes()).unwrap()],
            "byte 3 is 0xc3",
        ),
        (
            "twice",
            vec![HeaderValue::from_static("a"), HeaderValue::from_static("b")],
            "this request has 2",
        ),
    ];
    for bin in SERVICES {
        let s = Service::start(bin, &[EDGE]);
        let c = client();
        for route in ["/notify", "/prompt"] {
            for (what, values, says) in &bad {
                let mut request = c.post(s.url(route));
                for v in values {
                    request = request.header("x-caller", v.clone());
                }
                let res = request.send().await.unwrap();
                assert_eq!(res.status(), 400, "{bin} {route}: {what}");
                let error = res.json::<serde_json::Value>().await.unwrap()["error"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(
                    error.contains("X-Caller") && error.contains(says),
                    "{bin} {route}: {what}: {error}"
                );
            }
        }
        // None of them was counted, in the peer's window or any other.
        let by_address = c.post(s.url("/notify")).send().await.unwrap();
        let body: serde_json::Value = by_address.json().await.unwrap();
        assert_eq!(body["remaining"], 149, "{bin}: {body}");
        // The longest caller there may be is one.
        let res = post(&c, s.url("/notify"), &"a".repeat(128)).await;
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["remaining"], 149, "{bin}: {body}");
    }
}

#[tokio::test]
async fn the_shared_bucket_denies_across_routes() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_REQUEST_BUCKET_PER_MIN", "5")]);
        let c = client();
        for _ in 0..3 {
            assert_eq!(post(&c, s.url("/notify"), "carol").await.status(), 200);
        }
        for _ in 0..2 {
            assert_eq!(post(&c, s.url("/prompt"), "carol").await.status(), 200);
        }
        let denied = post(&c, s.url("/prompt"), "carol").await;
        assert_eq!(denied.status(), 429, "{bin}");
        let body: serde_json::Value = denied.json().await.unwrap();
        assert_eq!(body["denied_by"], serde_json::json!(["requests"]), "{bin}");
    }
}

#[tokio::test]
async fn denied_calls_keep_a_caller_throttled() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_NOTIFICATIONS_PER_MIN", "1")]);
        let c = client();
        assert_eq!(post(&c, s.url("/notify"), "dave").await.status(), 200);
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let denied = post(&c, s.url("/notify"), "dave").await;
            assert_eq!(denied.status(), 429);
            // The denial itself was recorded: the wait restarts at a full
            // window instead of counting down from the allowed attempt.
            // (Recorded times round up to the microsecond, so a whole-second
            // Retry-After can read 61.)
            let retry = retry_after(&denied);
            assert!((60..=61).contains(&retry), "{bin}: Retry-After {retry}");
        }
        let metrics = s.metrics().await;
        assert!(
            has_sample(
                &metrics,
                r#"ate_ratelimit_decisions_total{limit="notifications",result="denied"} 2"#
            ),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn a_restart_on_the_same_data_dir_keeps_callers_throttled() {
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let env = [("ATE_NOTIFICATIONS_PER_MIN", "2"), EDGE];
        {
            let s = Service::start_in(bin, &env, dir.path().to_path_buf());
            let c = client();
            for _ in 0..2 {
                assert_eq!(post(&c, s.url("/notify"), "erin").await.status(), 200);
            }
        } // killed here, without a drain
        let s = Service::start_in(bin, &env, dir.path().to_path_buf());
        let c = client();
        let denied = post(&c, s.url("/notify"), "erin").await;
        assert_eq!(
            denied.status(),
            429,
            "{bin}: a restart handed erin a fresh burst"
        );
        let retry = retry_after(&denied);
        assert!((50..=61).contains(&retry), "{bin}: Retry-After {retry}");
        // Other callers start fresh.
        assert_eq!(post(&c, s.url("/notify"), "frank").await.status(), 200);
        let audit = std::fs::read_to_string(dir.path().join("ratelimit-audit.jsonl")).unwrap();
        assert_eq!(audit.lines().count(), 4, "{bin}: {audit}");
        assert!(audit.contains("\"key\":\"caller:erin\""), "{bin}: {audit}");
    }
}

#[tokio::test]
async fn a_flood_of_new_callers_is_refused_past_max_callers_not_stored() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_MAX_CALLERS", "4"), EDGE]);
        let c = client();
        assert_eq!(post(&c, s.url("/notify"), "first").await.status(), 200);
        // The bound is split over the table's lock shards, so which new
        // caller is refused first depends on hashing; one soon is.
        let mut refused = None;
        for i in 0..500 {
            let r = post(&c, s.url("/notify"), &format!("made-up-{i}")).await;
            match r.status().as_u16() {
                200 => {}
                503 => {
                    refused = Some(r);
                    break;
                }
                other => panic!("{bin}: caller {i} got {other}"),
            }
        }
        let refused = refused.unwrap_or_else(|| panic!("{bin}: 500 new callers all admitted"));
        assert!(retry_after(&refused) >= 1, "{bin}");
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(body["error"], "too_many_callers", "{bin}: {body}");
        // A caller that already has a window keeps being served.
        assert_eq!(
            post(&c, s.url("/notify"), "first").await.status(),
            200,
            "{bin}"
        );
        let metrics = s.metrics().await;
        let keys: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("ate_ratelimit_keys "))
            .unwrap_or_else(|| panic!("{bin}: no keys gauge in {metrics}"))
            .parse()
            .unwrap();
        assert!(keys >= 2, "{bin}: 'first' is held in two limits: {keys}");
    }
}

#[tokio::test]
async fn a_shadow_limit_is_counted_and_reported_but_never_refuses() {
    for bin in SERVICES {
        let s = Service::start(
            bin,
            &[
                ("ATE_RATELIMIT_SHADOW", "notify"),
                ("ATE_NOTIFICATIONS_PER_MIN", "2"),
            ],
        );
        let c = client();
        for i in 0..4 {
            let r = post(&c, s.url("/notify"), "shadowed").await;
            assert_eq!(r.status(), 200, "{bin} #{i}");
            // The fields speak of the enforced limits alone: clients are
            // never told to slow to a shadow limit.
            let field = r.headers()["ratelimit"].to_str().unwrap().to_owned();
            assert!(!field.contains("notifications"), "{bin}: {field}");
            assert!(field.contains(r#""requests";r="#), "{bin}: {field}");
        }
        s.wait_for_metric(
            r#"ate_ratelimit_decisions_total{limit="notifications",result="shadow_denied"} 2"#,
        )
        .await;
        // The prompt limit is not in shadow mode: it still refuses.
        let s = Service::start(
            bin,
            &[
                ("ATE_RATELIMIT_SHADOW", "notify"),
                ("ATE_PROMPT_PER_MIN", "1"),
            ],
        );
        assert_eq!(post(&c, s.url("/prompt"), "p").await.status(), 200);
        assert_eq!(post(&c, s.url("/prompt"), "p").await.status(), 429, "{bin}");
    }
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_client_key_comes_from_the_named_source_only() {
    for bin in SERVICES {
        // The test client is the "proxy": loopback is trusted, and it writes
        // what a proxy appending to X-Forwarded-For writes.
        let s = Service::start(
            bin,
            &[
                ("ATE_TRUSTED_PROXIES", "127.0.0.0/8"),
                ("ATE_NOTIFICATIONS_PER_MIN", "1"),
            ],
        );
        let c = client();
        let mut allowed = 0;
        for i in 0..20 {
            let r = c
                .post(s.url("/notify"))
                .header("forwarded", format!("for=198.51.100.{i}"))
                .header("x-forwarded-for", format!("junk{i}, 203.0.113.9"))
                .send()
                .await
                .unwrap();
            allowed += usize::from(r.status() == 200);
        }
        assert_eq!(allowed, 1, "{bin}: one of 20 under a limit of 1");
        // IPv6 callers by /64: another address in the same /64 shares it.
        let v6 = |addr: &str| {
            c.post(s.url("/notify"))
                .header("x-forwarded-for", addr.to_owned())
                .send()
        };
        assert_eq!(v6("2001:db8:1:2::1").await.unwrap().status(), 200, "{bin}");
        assert_eq!(
            v6("2001:db8:1:2::ffff").await.unwrap().status(),
            429,
            "{bin}"
        );
        assert_eq!(v6("2001:db8:1:3::1").await.unwrap().status(), 200, "{bin}");
    }
}

#[test]
fn bad_client_address_settings_stop_the_start_naming_the_variable() {
    for (var, value) in [
        ("ATE_CLIENT_IP_SOURCE", "x forwarded for"),
        ("ATE_CLIENT_IPV6_PREFIX", "129"),
        ("ATE_CLIENT_IPV6_PREFIX", "0"),
        ("ATE_RATELIMIT_SHADOW", "notify,unknown"),
    ] {
        for bin in SERVICES {
            let stderr = start_refused(bin, var, value);
            assert!(stderr.contains(var), "{bin} {var}={value}: {stderr}");
        }
    }
}

#[tokio::test]
async fn no_url_spelling_reaches_a_limited_route_unlimited() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_NOTIFICATIONS_PER_MIN", "1")]);
        let c = client();
        assert_eq!(post(&c, s.url("/notify"), "speller").await.status(), 200);
        for path in [
            "/%6Eotify",
            "/notif%79",
            "/notify/",
            "//notify",
            "/NOTIFY",
            "/notify?x=1",
        ] {
            let status = post(&c, s.url(path), "speller").await.status();
            assert!(
                status == 429 || status == 404,
                "{bin} {path}: {status} (served past the limit)"
            );
        }
    }
}
