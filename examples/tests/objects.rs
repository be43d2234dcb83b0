//! The generation latch API and its background reconciler.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The control token, with the background reconciler off: the test is the
/// control plane, so observed moves only when the test moves it.
const TEST_IS_CONTROL_PLANE: &[(&str, &str)] = &[
    ("ATE_CONTROL_TOKEN", "t0k"),
    ("ATE_RECONCILE_INTERVAL_MS", "0"),
];

async fn get_json(c: &reqwest::Client, url: String) -> Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn spec_changes_bump_generation_and_the_reconciler_converges() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_CONTROL_TOKEN", "t0k")]);
        let c = client();
        let put = |body: Value| c.put(s.url("/objects/gw")).json(&body).send();
        let created: Value = put(json!({"replicas": 2}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (
                created["generation"].as_u64(),
                created["converged"].as_bool()
            ),
            (Some(1), Some(false)),
            "{bin}"
        );
        let url = s.url("/objects/gw");
        eventually(Duration::from_secs(5), || {
            let (c, url) = (c.clone(), url.clone());
            async move { get_json(&c, url).await["converged"] == true }
        })
        .await;
        // Same spec: no bump.
        let same: Value = put(json!({"replicas": 2}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(same["generation"], 1);
        // Changed spec on a converged ("running") object: bump and re-apply.
        let changed: Value = put(json!({"replicas": 3}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(changed["generation"], 2);
        eventually(Duration::from_secs(5), || {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let o = get_json(&c, url).await;
                o["observedGeneration"] == 2 && o["converged"] == true
            }
        })
        .await;
        assert_eq!(
            c.get(s.url("/objects/none")).send().await.unwrap().status(),
            404
        );
    }
}

#[tokio::test]
async fn a_number_written_another_way_is_not_a_spec_change() {
    for bin in SERVICES {
        let s = Service::start(bin, TEST_IS_CONTROL_PLANE);
        let c = client();
        let put = async |body: &'static str| -> Value {
            c.put(s.url("/objects/gw"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        };
        let generation = |o: &Value| o["generation"].as_u64().unwrap();
        let first = put(r#"{"replicas": 2, "limits": {"cpu": 1}}"#).await;
        assert_eq!(generation(&first), 1, "{bin}");
        // 2 and 2.0, 1 and 1e0: one desired state, no bump, the stored spec
        // as it was.
        let same = put(r#"{"replicas": 2.0, "limits": {"cpu": 1e0}}"#).await;
        assert_eq!(generation(&same), 1, "{bin}: {same}");
        assert_eq!(
            same["spec"],
            json!({"replicas": 2, "limits": {"cpu": 1}}),
            "{bin}"
        );
        // A different number is a change.
        let changed = put(r#"{"replicas": 2.5, "limits": {"cpu": 1}}"#).await;
        assert_eq!(generation(&changed), 2, "{bin}");
    }
}

#[tokio::test]
async fn observed_write_back_is_control_plane_only_and_monotonic() {
    for bin in SERVICES {
        let s = Service::start(bin, TEST_IS_CONTROL_PLANE);
        let c = client();
        c.put(s.url("/objects/gw"))
            .json(&json!({"v": 1}))
            .send()
            .await
            .unwrap();
        c.put(s.url("/objects/gw"))
            .json(&json!({"v": 2}))
            .send()
            .await
            .unwrap();
        let observe = |token: Option<&str>, n: u64| {
            let mut r = c
                .post(s.url("/objects/gw/observed"))
                .json(&json!({"observedGeneration": n}));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send()
        };
        assert_eq!(
            observe(None, 1).await.unwrap().status(),
            403,
            "{bin}: client write"
        );
        assert_eq!(observe(Some("wrong"), 1).await.unwrap().status(), 403);
        let ok = observe(Some("t0k"), 2).await.unwrap();
        assert_eq!(ok.status(), 200);
        let body: Value = ok.json().await.unwrap();
        assert_eq!(
            (&body["observedGeneration"], &body["changed"]),
            (&json!(2), &json!(true)),
            "{bin}: {body}"
        );
        let regress = observe(Some("t0k"), 1).await.unwrap();
        assert_eq!(regress.status(), 409);
        let body: Value = regress.json().await.unwrap();
        assert_eq!(
            (
                body["observedGeneration"].as_u64(),
                body["attempted"].as_u64()
            ),
            (Some(2), Some(1)),
            "{body}"
        );
        let over = observe(Some("t0k"), 9).await.unwrap();
        assert_eq!(over.status(), 409);
        let body: Value = over.json().await.unwrap();
        assert_eq!(
            (body["generation"].as_u64(), body["attempted"].as_u64()),
            (Some(2), Some(9))
        );
        let again = observe(Some("t0k"), 2).await.unwrap();
        assert_eq!(again.status(), 200, "{bin}: same value again: no-op");
        let body: Value = again.json().await.unwrap();
        assert_eq!(body["changed"], json!(false), "{bin}: {body}");
        let bad = c
            .post(s.url("/objects/gw/observed"))
            .bearer_auth("t0k")
            .body("{\"generation\": 1}")
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400);
    }
}

#[tokio::test]
async fn status_identity_and_client_generation_fields_never_advance_generation() {
    for bin in SERVICES {
        let s = Service::start(bin, TEST_IS_CONTROL_PLANE);
        let c = client();
        let put = |body: Value, token: Option<&'static str>| {
            let mut r = c.put(s.url("/objects/db")).json(&body);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            async move {
                let r = r.send().await.unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap())
            }
        };
        let (status, o) = put(json!({"spec": {"size": 1}, "generation": 40}), None).await;
        assert_eq!(
            (status, o["generation"].as_u64()),
            (201, Some(1)),
            "{bin}: {o}"
        );
        // A client-supplied generation (top level or in metadata), status,
        // and identity fields: no advance, and none of them is stored as spec.
        for body in [
            json!({"spec": {"size": 1}, "generation": 7, "metadata": {"generation": 8, "labels": {"a": "b"}}}),
            json!({"spec": {"size": 1}, "status": {"phase": "Degraded"}}),
            json!({"size": 1, "generation": 9, "apiVersion": "v1", "kind": "Db"}),
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "observedGeneration": 0}]}}),
        ] {
            let (status, o) = put(body.clone(), None).await;
            assert_eq!(status, 200, "{bin}: {body} -> {o}");
            assert_eq!(o["generation"], 1, "{bin}: {body} -> {o}");
            assert_eq!(o["spec"], json!({"size": 1}), "{bin}: {body} -> {o}");
        }
        // The health-only update was stored, not suppressed; its condition
        // observed generation 0 is stale against generation 1.
        let o: Value = get_json(&c, s.url("/objects/db")).await;
        assert_eq!(o["status"]["phase"], "Running", "{bin}: {o}");
        assert_eq!(o["status"]["conditions"][0]["stale"], true, "{bin}: {o}");
        // The control plane observes 1: converged, and the condition is
        // no longer stale once it carries generation 1.
        let ok = c
            .post(s.url("/objects/db/observed"))
            .bearer_auth("t0k")
            .json(&json!({"observedGeneration": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        let (_, o) = put(
            json!({"status": {"conditions": [{"type": "Ready", "observedGeneration": 1}]}}),
            None,
        )
        .await;
        assert_eq!(
            (
                o["converged"].as_bool(),
                o["status"]["conditions"][0]["stale"].as_bool()
            ),
            (Some(true), Some(false)),
            "{bin}: {o}"
        );
        // A GET put back as it is (observedGeneration echoed) is fine, and
        // so is an edit of its spec: that advances generation by exactly one
        // and leaves observed where it was.
        let mut back = o.clone();
        let (status, _) = put(back.clone(), None).await;
        assert_eq!(status, 200, "{bin}: round trip");
        back["spec"]["size"] = json!(2);
        let (status, o) = put(back, None).await;
        assert_eq!(
            (
                status,
                o["generation"].as_u64(),
                o["observedGeneration"].as_u64()
            ),
            (200, Some(2), Some(1)),
            "{bin}: {o}"
        );
        // A client PUT that moves observedGeneration is refused whole: 403,
        // and neither the spec nor observed changes.
        let (status, o) = put(json!({"spec": {"size": 3}, "observedGeneration": 2}), None).await;
        assert_eq!(status, 403, "{bin}");
        let hint = o["hint"].as_str().unwrap_or_default();
        assert!(hint.contains("(it is 1)"), "{bin}: {o}");
        let (status, _) = put(json!({"status": {"observedGeneration": 2}}), None).await;
        assert_eq!(status, 403, "{bin}");
        let o: Value = get_json(&c, s.url("/objects/db")).await;
        assert_eq!(
            (
                o["generation"].as_u64(),
                o["observedGeneration"].as_u64(),
                o["spec"]["size"].as_u64()
            ),
            (Some(2), Some(1), Some(2)),
            "{bin}: {o}"
        );
        // The control plane may carry it in a PUT, under the latch's rules.
        let (status, o) = put(json!({"status": {"observedGeneration": 2}}), Some("t0k")).await;
        assert_eq!(
            (status, o["converged"].as_bool()),
            (200, Some(true)),
            "{bin}: {o}"
        );
        let (status, o) = put(json!({"observedGeneration": 1}), Some("t0k")).await;
        assert_eq!(
            (status, o["attempted"].as_u64()),
            (409, Some(1)),
            "{bin}: regression {o}"
        );
        // Bodies it cannot split are 400s naming the problem.
        for body in [
            json!([1]),
            json!({"spec": 5}),
            json!({"spec": {}, "size": 2}),
            json!({"observedGeneration": -1}),
            json!({"metadata": {"name": "other"}, "spec": {"size": 9}}),
        ] {
            let (status, o) = put(body.clone(), None).await;
            assert_eq!(status, 400, "{bin}: {body} -> {o}");
        }
    }
}

#[tokio::test]
async fn object_names_must_be_dns_subdomain_names_on_every_object_route() {
    let longest = format!("{}.{}", "a".repeat(63), "b".repeat(189));
    let too_long = "a".repeat(254);
    for bin in SERVICES {
        let s = Service::start(bin, TEST_IS_CONTROL_PLANE);
        let c = client();
        let ok = c
            .put(s.url(&format!("/objects/{longest}")))
            .json(&json!({"replicas": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 201, "{bin}: a 253-character name");
        for (path, shown) in [
            ("Web", "\"Web\""),
            ("a_b", "\"a_b\""),
            ("-a", "\"-a\""),
            ("a..b", "\"a..b\""),
            ("%FF", ""),
            (too_long.as_str(), "254 bytes"),
        ] {
            let requests = [
                c.put(s.url(&format!("/objects/{path}")))
                    .json(&json!({"replicas": 1})),
                c.get(s.url(&format!("/objects/{path}"))),
                c.post(s.url(&format!("/objects/{path}/observed")))
                    .bearer_auth("t0k")
                    .json(&json!({"observedGeneration": 1})),
            ];
            for req in requests {
                let r = req.send().await.unwrap();
                let status = r.status();
                let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
                let body: Value = r
                    .json()
                    .await
                    .unwrap_or_else(|e| panic!("{bin} {path}: {e}"));
                assert_eq!(status, 400, "{bin} {path}: {body}");
                assert_eq!(ct, "application/json", "{bin} {path}");
                assert!(
                    body["error"].as_str().unwrap().contains(shown),
                    "{bin} {path}: {body}"
                );
            }
        }
        // Nothing was stored under a refused name.
        let lower = c.get(s.url("/objects/web")).send().await.unwrap();
        assert_eq!(lower.status(), 404, "{bin}");
    }
}

#[tokio::test]
async fn a_body_with_a_key_twice_is_refused_naming_it_and_changes_nothing() {
    // serde_json keeps the last of two equal keys, other parsers the first:
    // a validating proxy could approve {"replicas": 2} while the service
    // applied 3.
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_RECONCILE_INTERVAL_MS", "0")]);
        let c = client();
        let url = s.url("/objects/dup");
        for (body, key) in [
            (r#"{"replicas": 2, "replicas": 3}"#, "replicas"),
            (r#"{"spec": {"image": "a", "image": "b"}}"#, "image"),
            (r#"{"spec": {"tiers": [{"n": 1, "n": 2}]}}"#, "n"),
            (
                r#"{"spec": {"replicas": 1}, "spec": {"replicas": 9}}"#,
                "spec",
            ),
        ] {
            let res = c
                .put(url.clone())
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let text = refused(res, &format!("{bin} {body}")).await;
            assert!(text.contains(&format!("{key:?}")), "{bin} {body}: {text}");
            assert!(text.contains("twice"), "{bin} {body}: {text}");
        }
        let res = c.get(url.clone()).send().await.unwrap();
        assert_eq!(res.status(), 404, "{bin}: nothing was stored");
        // The same keys in different objects are fine.
        let res = c
            .put(url)
            .json(&json!({"spec": {"a": {"n": 1}, "b": {"n": 2}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "{bin}");
    }
}

/// Creates the object `gw` at generation 1.
async fn create_gw(c: &reqwest::Client, s: &Service, bin: &str) {
    let res = c
        .put(s.url("/objects/gw"))
        .json(&json!({"replicas": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{bin}");
}

#[tokio::test]
async fn a_bad_observed_write_body_is_a_400_naming_what_is_wrong() {
    for bin in SERVICES {
        let s = Service::start(bin, TEST_IS_CONTROL_PLANE);
        let c = client();
        create_gw(&c, &s, bin).await;
        for (body, says) in [
            (r#"{"observedGeneration": 1.5}"#, "1.5"),
            (r#"{"observedGeneration": "1"}"#, "string \"1\""),
            (r#"{"observedGeneration": -1}"#, "-1"),
            (
                r#"{"observedGeneration": 1, "observedGeneration": 1}"#,
                "duplicate field",
            ),
            (r#"{"observed": 1}"#, "unknown field `observed`"),
            ("{}", "missing field `observedGeneration`"),
            // Past u64 (read as a float): the message gives the range.
            (
                r#"{"observedGeneration": 18446744073709551616}"#,
                "a whole number from 0 to 18446744073709551615",
            ),
        ] {
            let res = c
                .post(s.url("/objects/gw/observed"))
                .header("authorization", "Bearer t0k")
                .body(body)
                .send()
                .await
                .unwrap();
            let text = refused(res, &format!("{bin} {body}")).await;
            assert!(text.contains(says), "{bin} {body}: {text}");
        }
        // Nothing was observed.
        let o = get_json(&c, s.url("/objects/gw")).await;
        assert_eq!(o["observedGeneration"], 0, "{bin}");
    }
}

#[tokio::test]
async fn the_control_token_is_a_bearer_token_whatever_the_scheme_case() {
    for bin in SERVICES {
        let s = Service::start(bin, TEST_IS_CONTROL_PLANE);
        let c = client();
        create_gw(&c, &s, bin).await;
        let observe = |auth: &'static str| {
            c.post(s.url("/objects/gw/observed"))
                .header("authorization", auth)
                .json(&json!({"observedGeneration": 1}))
                .send()
        };
        // A wrong token, or the right one under another scheme, is a client.
        for auth in ["Bearer t0K", "Basic t0k", "Bearer"] {
            assert_eq!(observe(auth).await.unwrap().status(), 403, "{bin} {auth}");
        }
        // RFC 9110: the scheme is case-insensitive.
        assert_eq!(observe("bearer t0k").await.unwrap().status(), 200, "{bin}");
    }
}
