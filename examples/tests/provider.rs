//! `/invoke` on a real HTTP provider (`ATE_PROVIDER_URL`): the documented
//! mapping of its answers, counted by the provider itself.

mod common;

use common::provider::CountingProvider;
use common::*;
use serde_json::{Value, json};

async fn invoke(c: &reqwest::Client, s: &Service, key: &str, body: &Value) -> reqwest::Response {
    c.post(s.url("/invoke"))
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_success_is_recorded_and_replayed_without_calling_the_provider_again() {
    let provider = CountingProvider::start().await;
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_PROVIDER_URL", &provider.url())]);
        let c = client();
        let key = format!("ok-{}", s.port);
        let body = json!({"amount": 5});
        let first = invoke(&c, &s, &key, &body).await;
        assert_eq!(first.status(), 200, "{bin}");
        let first_body = first.text().await.unwrap();
        let again = invoke(&c, &s, &key, &body).await;
        assert_eq!(again.status(), 200, "{bin}");
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(
            again.text().await.unwrap(),
            first_body,
            "{bin}: byte for byte"
        );
        let calls = provider.calls(&key);
        assert_eq!(calls.len(), 1, "{bin}: one provider call");
        // The body unchanged, and the ledger's fencing token beside it.
        assert_eq!(serde_json::from_str::<Value>(&calls[0].body).unwrap(), body);
        let fence = calls[0].fence.as_deref().expect("a fencing token");
        assert!(fence.parse::<ate_ledger::Fence>().is_ok(), "{bin}: {fence}");
        let answered: Value = serde_json::from_str(&first_body).unwrap();
        assert_eq!(answered["charged"], key.as_str());
    }
}

#[tokio::test]
async fn a_provider_that_did_not_process_the_request_is_called_again_on_retry() {
    // 429, 408 and a 503 with Retry-After say "not processed": recording
    // them replayed a refusal that decided nothing (the retry 2 s later
    // got the 429 again, and the provider was called once).
    let provider = CountingProvider::start().await;
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_PROVIDER_URL", &provider.url())]);
        let c = client();
        for (status, retry_after) in [(429, None), (408, None), (503, Some(1))] {
            let key = format!("not-processed-{status}-{}", s.port);
            let mut body = json!({"status_first": status});
            if let Some(secs) = retry_after {
                body["retry_after"] = json!(secs);
            }
            let first = invoke(&c, &s, &key, &body).await;
            assert_eq!(first.status(), 424, "{bin} {status}");
            let said: Value = first.json().await.unwrap();
            assert_eq!(said["retryable"], true, "{bin} {status}: {said}");
            let retried = invoke(&c, &s, &key, &body).await;
            assert_eq!(retried.status(), 200, "{bin} {status}");
            assert!(retried.headers().get("idempotent-replayed").is_none());
            assert_eq!(provider.calls(&key).len(), 2, "{bin} {status}");
            // Answered now: replayed, never called a third time.
            let again = invoke(&c, &s, &key, &body).await;
            assert_eq!(again.status(), 200, "{bin} {status}");
            assert_eq!(provider.calls(&key).len(), 2, "{bin} {status}");
        }
    }
}

#[tokio::test]
async fn a_4xx_is_a_recorded_rejection_and_a_5xx_is_ambiguous_and_never_rerun() {
    let provider = CountingProvider::start().await;
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_PROVIDER_URL", &provider.url())]);
        let c = client();
        let rejected = format!("rejected-{}", s.port);
        let body = json!({"status": 402});
        let first = invoke(&c, &s, &rejected, &body).await;
        assert_eq!(first.status(), 402, "{bin}");
        let again = invoke(&c, &s, &rejected, &body).await;
        assert_eq!(again.status(), 402, "{bin}");
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(provider.calls(&rejected).len(), 1, "{bin}");

        let failed = format!("failed-{}", s.port);
        let body = json!({"status": 503});
        let first = invoke(&c, &s, &failed, &body).await;
        assert_eq!(first.status(), 504, "{bin}");
        let said: Value = first.json().await.unwrap();
        assert_eq!(said["state"], "provider_unavailable", "{bin}: {said}");
        assert_eq!(said["retryable"], false);
        let again = invoke(&c, &s, &failed, &body).await;
        assert_eq!(again.status(), 504, "{bin}");
        assert_eq!(provider.calls(&failed).len(), 1, "{bin}: never run again");
    }
}

#[tokio::test]
async fn a_provider_that_answers_too_late_is_ambiguous_and_never_rerun() {
    let provider = CountingProvider::start().await;
    for bin in SERVICES {
        let s = Service::start(
            bin,
            &[
                ("ATE_PROVIDER_URL", &provider.url()),
                ("ATE_PROVIDER_TIMEOUT_MS", "300"),
            ],
        );
        let c = client();
        let key = format!("slow-{}", s.port);
        let body = json!({"delay_ms": 2_000});
        let first = invoke(&c, &s, &key, &body).await;
        assert_eq!(first.status(), 504, "{bin}");
        let said: Value = first.json().await.unwrap();
        assert!(
            said["reason"].as_str().unwrap().contains("within 300ms"),
            "{bin}: {said}"
        );
        assert_eq!(invoke(&c, &s, &key, &body).await.status(), 504, "{bin}");
        assert_eq!(provider.calls(&key).len(), 1, "{bin}");
    }
}

#[tokio::test]
async fn a_refused_connection_is_revivable_and_the_retry_runs_once() {
    let port = ate_readiness::testing::unused_loopback_port(30_000);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let url = format!("http://{addr}/charge");
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_PROVIDER_URL", &url)]);
        let c = client();
        let key = format!("down-{}", s.port);
        let body = json!({"amount": 1});
        let first = invoke(&c, &s, &key, &body).await;
        assert_eq!(first.status(), 424, "{bin}");
        let said: Value = first.json().await.unwrap();
        assert_eq!(said["state"], "failed_pre_provider", "{bin}: {said}");
        assert_eq!(said["retryable"], true);
        // The provider comes up; the retry with the same key runs it once.
        let provider = CountingProvider::start_on(addr).await;
        let retried = invoke(&c, &s, &key, &body).await;
        assert_eq!(retried.status(), 200, "{bin}");
        assert_eq!(provider.calls(&key).len(), 1, "{bin}");
        drop(provider);
    }
}

#[test]
fn a_bad_provider_setting_stops_the_start_naming_the_variable() {
    for (var, value, says) in [
        (
            "ATE_PROVIDER_URL",
            "https://p.example/charge",
            "https is not supported",
        ),
        ("ATE_PROVIDER_URL", "p.example:9000", "expected http://"),
        ("ATE_PROVIDER_TIMEOUT_MS", "0", "ATE_PROVIDER_TIMEOUT_MS"),
        ("ATE_PROVIDER_TIMEOUT_MS", "5s", "ATE_PROVIDER_TIMEOUT_MS"),
    ] {
        for bin in SERVICES {
            let stderr = start_refused(bin, var, value);
            assert!(
                stderr.contains(var) && stderr.contains(says),
                "{bin} {var}={value}: {stderr}"
            );
        }
    }
}

#[tokio::test]
async fn the_simulation_headers_are_refused_beside_a_real_provider() {
    let provider = CountingProvider::start().await;
    let s = Service::start(SERVICES[0], &[("ATE_PROVIDER_URL", &provider.url())]);
    let r = client()
        .post(s.url("/invoke"))
        .header("idempotency-key", "sim")
        .header("x-simulate", "timeout")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(provider.total(), 0);
}
