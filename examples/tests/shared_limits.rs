//! Rate limits shared by replicas through Redis (`ATE_RATELIMIT_REDIS_URL`):
//! one caller gets its limit once in total, not once per replica; Redis
//! going away changes only the limits' scope (or, as configured, refuses);
//! Redis coming back restores the shared window.

mod common;

use ate_ratelimit::testing::TestRedis;
use common::*;

async fn notify(c: &reqwest::Client, s: &Service, caller: &str) -> reqwest::Response {
    c.post(s.url("/notify"))
        .header("x-caller", caller)
        .send()
        .await
        .unwrap()
}

fn replicas(bin: &str, redis: &TestRedis, fallback: &str) -> [Service; 2] {
    let env = [
        ("ATE_RATELIMIT_REDIS_URL", redis.url()),
        ("ATE_RATELIMIT_REDIS_FALLBACK", fallback.to_owned()),
        (EDGE.0, EDGE.1.to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    [Service::start(bin, &env), Service::start(bin, &env)]
}

/// Two replicas on one Redis: a caller alternating between them gets
/// exactly 150 notifications a minute in total, then 429 from either.
#[tokio::test]
async fn two_replicas_share_one_limit_of_150_a_minute() {
    let redis = TestRedis::start();
    for bin in SERVICES {
        let pods = replicas(bin, &redis, "local");
        let c = client();
        let caller = format!("shared-{}", bin.len());
        let mut allowed = 0;
        for i in 0..160 {
            let r = notify(&c, &pods[i % 2], &caller).await;
            match r.status().as_u16() {
                200 => allowed += 1,
                429 => {
                    let body: serde_json::Value = r.json().await.unwrap();
                    assert_eq!(body["denied_by"], serde_json::json!(["notifications"]));
                }
                other => panic!("{bin}: status {other}"),
            }
        }
        assert_eq!(allowed, 150, "{bin}: 150 in total, not 150 per replica");
        for pod in &pods {
            pod.wait_for_metric("ate_ratelimit_store_up 1").await;
        }
    }
}

/// Redis killed mid-run under `local`: clients still get answers from
/// each replica's own windows, `/ready` stays 200, the store is reported
/// down and the change logged once; Redis back (empty), the limits are
/// shared again.
#[tokio::test]
async fn redis_going_away_changes_only_the_scope_under_local() {
    let mut redis = TestRedis::start();
    for bin in SERVICES {
        let pods = replicas(bin, &redis, "local");
        let c = client();
        for i in 0..10 {
            assert_eq!(notify(&c, &pods[i % 2], "mia").await.status(), 200);
        }
        redis.kill();
        for i in 0..10 {
            let r = notify(&c, &pods[i % 2], "mia").await;
            assert_eq!(r.status(), 200, "{bin}: served from local windows");
        }
        for pod in &pods {
            let ready = c.get(pod.url("/ready")).send().await.unwrap();
            assert_eq!(
                ready.status(),
                200,
                "{bin}: a blinking cache must not unready the pod"
            );
            pod.wait_for_metric("ate_ratelimit_store_up 0").await;
            pod.wait_for_stderr("deciding with this process's own windows")
                .await;
            let logged = pod.stderr().matches("rate-limit Redis unreachable").count();
            assert_eq!(logged, 1, "{bin}: logged once, not per request");
        }
        redis.restart();
        // The restarted Redis is empty: a new shared window.
        let mut shared = false;
        for _ in 0..50 {
            let r = notify(&c, &pods[0], "nina").await;
            assert_eq!(r.status(), 200);
            if has_sample(&pods[0].metrics().await, "ate_ratelimit_store_up 1") {
                shared = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(shared, "{bin}: shared again once Redis is back");
        pods[0]
            .wait_for_stderr("rate-limit Redis answers again")
            .await;
    }
}

/// Under `refuse`, a rate-limited route answers 503 with `Retry-After`
/// while Redis is away; other routes and `/ready` are unaffected.
#[tokio::test]
async fn redis_going_away_refuses_under_refuse() {
    let mut redis = TestRedis::start();
    for bin in SERVICES {
        let pods = replicas(bin, &redis, "refuse");
        let c = client();
        assert_eq!(notify(&c, &pods[0], "omar").await.status(), 200);
        redis.kill();
        let r = notify(&c, &pods[0], "omar").await;
        assert_eq!(r.status(), 503, "{bin}");
        assert!(r.headers().contains_key("retry-after"), "{bin}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "rate_limit_store_unavailable", "{bin}");
        let ready = c.get(pods[0].url("/ready")).send().await.unwrap();
        assert_eq!(ready.status(), 200, "{bin}");
        redis.restart();
    }
}

/// A bad fallback value stops the start, naming the variable and value.
#[test]
fn a_bad_fallback_value_stops_the_start() {
    for bin in SERVICES {
        let out = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0"])
            .env("ATE_RATELIMIT_REDIS_URL", "redis://127.0.0.1:1/0")
            .env("ATE_RATELIMIT_REDIS_FALLBACK", "sometimes")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bin}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("ATE_RATELIMIT_REDIS_FALLBACK") && err.contains("\"sometimes\""),
            "{bin}: {err}"
        );
    }
}
