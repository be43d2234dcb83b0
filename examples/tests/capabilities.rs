//! Readiness per capability in both services, over real sockets: a
//! provider that refuses connections or credentials closes `/prompt`
//! (prompt-bridge) and nothing else; the pod stays ready; the route opens
//! again on its own once the provider answers.

mod common;

use std::time::Duration;

use common::fault::free_port;
use common::provider::CountingProvider;
use common::*;
use serde_json::Value;

async fn post(s: &Service, path: &str) -> (u16, Value) {
    let r = client().post(s.url(path)).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn status(s: &Service, path: &str) -> u16 {
    client()
        .get(s.url(path))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The documented delay (`ATE_PROVIDER_HEALTH_INTERVAL_MS`) set small,
/// and a bound far above it, only to end a test whose route never opens.
const INTERVAL_MS: &str = "100";
const BOUND: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_refusing_provider_closes_its_route_and_not_the_pod() {
    for bin in SERVICES {
        // Nothing listens there yet: connections are refused.
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}/charge");
        let s = Service::start(
            bin,
            &[
                ("ATE_PROVIDER_URL", &url),
                ("ATE_PROVIDER_HEALTH_INTERVAL_MS", INTERVAL_MS),
            ],
        );
        let (code, body) = post(&s, "/prompt").await;
        assert_eq!(code, 503, "{bin}: {body}");
        assert_eq!(body["error"], "capability_unavailable", "{bin}");
        assert_eq!(body["capability"], "prompt-bridge", "{bin}");
        assert!(
            body["reason"].as_str().unwrap().contains("cannot connect"),
            "{bin}: {body}"
        );
        assert_eq!(post(&s, "/notify").await.0, 200, "{bin}");
        assert_eq!(status(&s, "/ready").await, 200, "{bin}: the pod left");
        let probe: Value = client()
            .get(s.url("/ready/capabilities"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(probe["ready"], true, "{bin}: {probe}");
        let caps = &probe["capabilities"]["capabilities"];
        assert_eq!(caps[0]["name"], "prompt-bridge", "{bin}: {probe}");
        assert_eq!(caps[0]["state"], "not_ready", "{bin}: {probe}");
        assert_eq!(caps[1]["state"], "ready", "{bin}: {probe}");
        s.wait_for_metric(r#"ate_capability_ready{name="prompt-bridge"} 0"#)
            .await;
        // The provider comes up: the route opens on its own.
        let provider =
            CountingProvider::start_on(format!("127.0.0.1:{port}").parse().unwrap()).await;
        eventually(BOUND, || async { post(&s, "/prompt").await.0 == 200 }).await;
        s.wait_for_metric(r#"ate_capability_ready{name="prompt-bridge"} 1"#)
            .await;
        // It refuses this service's credentials: closed again, with why.
        provider.set_health(401);
        eventually(BOUND, || async { post(&s, "/prompt").await.0 == 503 }).await;
        let (_, body) = post(&s, "/prompt").await;
        assert!(
            body["reason"].as_str().unwrap().contains("401"),
            "{bin}: {body}"
        );
        assert_eq!(post(&s, "/notify").await.0, 200, "{bin}");
        assert_eq!(status(&s, "/ready").await, 200, "{bin}");
        provider.set_health(200);
        eventually(BOUND, || async { post(&s, "/prompt").await.0 == 200 }).await;
    }
}

#[tokio::test]
async fn without_a_provider_both_capabilities_are_ready_once_started() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        assert_eq!(post(&s, "/prompt").await.0, 200, "{bin}");
        assert_eq!(post(&s, "/notify").await.0, 200, "{bin}");
        s.wait_for_metric(r#"ate_capability_ready{name="client-notifications"} 1"#)
            .await;
    }
}
