//! The idempotent provider route on the durable ledger.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

async fn invoke(
    c: &reqwest::Client,
    s: &Service,
    key: &str,
    body: Value,
    simulate: &str,
) -> reqwest::Response {
    c.post(s.url("/invoke"))
        .header("idempotency-key", key)
        .header("x-simulate", simulate)
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn success_replays_and_a_different_body_is_refused() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        let first = invoke(&c, &s, "k1", json!({"amount": 5}), "success").await;
        assert_eq!(first.status(), 200, "{bin}");
        let first_body = first.text().await.unwrap();
        let again = invoke(&c, &s, "k1", json!({"amount": 5}), "success").await;
        assert_eq!(again.status(), 200);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(
            again.text().await.unwrap(),
            first_body,
            "a replay returns the same body"
        );
        let other = invoke(&c, &s, "k1", json!({"amount": 6}), "success").await;
        assert_eq!(other.status(), 422, "{bin}");
        let missing = c
            .post(s.url("/invoke"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 400);
    }
}

#[tokio::test]
async fn pre_provider_failure_is_revived_by_a_retry_with_the_same_key() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        let failed = invoke(&c, &s, "k2", json!({"a": 1}), "credential_error").await;
        assert_eq!(failed.status(), 424, "{bin}");
        let body: Value = failed.json().await.unwrap();
        assert_eq!(
            (body["state"].as_str(), body["retryable"].as_bool()),
            (Some("failed_pre_provider"), Some(true)),
            "{bin}: the client is told a retry with the same key runs it: {body}"
        );
        let retried = invoke(&c, &s, "k2", json!({"a": 1}), "success").await;
        assert_eq!(retried.status(), 200, "{bin}: revived");
        assert!(retried.headers().get("idempotent-replayed").is_none());
    }
}

#[tokio::test]
async fn provider_unavailable_is_never_re_executed() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        assert_eq!(
            invoke(&c, &s, "k3", json!({"a": 1}), "timeout")
                .await
                .status(),
            504,
            "{bin}"
        );
        let retry = invoke(&c, &s, "k3", json!({"a": 1}), "success").await;
        assert_eq!(
            retry.status(),
            504,
            "{bin}: an ambiguous outcome was re-executed"
        );
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        assert_eq!(
            invoke(&c, &s, "k4", json!({"a": 1}), "rejected")
                .await
                .status(),
            502
        );
        assert_eq!(
            invoke(&c, &s, "k4", json!({"a": 1}), "success")
                .await
                .status(),
            502
        );
    }
}

#[tokio::test]
async fn a_second_request_while_in_flight_gets_409_with_retry_after() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        let slow = {
            let c = c.clone();
            let url = s.url("/invoke");
            tokio::spawn(async move {
                c.post(url)
                    .header("idempotency-key", "k5")
                    .header("x-simulate-delay-ms", "1500")
                    .json(&json!({"a": 1}))
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let conflict = invoke(&c, &s, "k5", json!({"a": 1}), "success").await;
        assert_eq!(conflict.status(), 409, "{bin}");
        // Come back soon (the call takes 1.5 s), not when the 30 s lease
        // would run out; that is in the body, for a client that wants it.
        let retry: u64 = conflict.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=2).contains(&retry), "{bin}: Retry-After {retry}");
        let body: serde_json::Value = conflict.json().await.unwrap();
        let lease = body["lease_expires_in_secs"].as_u64().unwrap();
        assert!((25..=30).contains(&lease), "{bin}: {body}");
        assert_eq!(slow.await.unwrap(), 200);
    }
}

#[tokio::test]
async fn a_call_that_outlasts_its_lease_keeps_it_by_renewing() {
    for bin in SERVICES {
        // A 2 s lease and a 4 s provider call: the call renews its lease
        // every 2/3 s (a renewal would have to be 1.3 s late to lose it).
        let s = Service::start(bin, &[("ATE_LEDGER_LEASE_SECS", "2")]);
        let c = client();
        let slow = {
            let c = c.clone();
            let url = s.url("/invoke");
            tokio::spawn(async move {
                let res = c
                    .post(url)
                    .header("idempotency-key", "long")
                    .header("x-simulate-delay-ms", "4000")
                    .json(&json!({"a": 1}))
                    .send()
                    .await
                    .unwrap();
                (res.status(), res.text().await.unwrap())
            })
        };
        // Past the first lease's end: still in flight, so 409, not a
        // recovery that closes the call as provider_unavailable (504).
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let retry = invoke(&c, &s, "long", json!({"a": 1}), "success").await;
        assert_eq!(
            retry.status(),
            409,
            "{bin}: {}",
            retry.text().await.unwrap()
        );
        // The call itself ends with the provider's answer, recorded once.
        let (status, body) = slow.await.unwrap();
        assert_eq!(status, 200, "{bin}: {body}");
        let again = invoke(&c, &s, "long", json!({"a": 1}), "success").await;
        assert_eq!(again.status(), 200);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.text().await.unwrap(), body);
        assert!(
            !s.stderr().contains("cannot renew"),
            "{bin}: {}",
            s.stderr()
        );
    }
}

#[tokio::test]
async fn a_restart_on_the_same_data_dir_replays_instead_of_re_executing() {
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let body = {
            let s = Service::start_in(bin, &[], dir.path().to_path_buf());
            let r = invoke(&client(), &s, "k6", json!({"a": 1}), "success").await;
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }; // killed here
        let s = Service::start_in(bin, &[], dir.path().to_path_buf());
        let r = invoke(&client(), &s, "k6", json!({"a": 1}), "success").await;
        assert_eq!(r.status(), 200, "{bin}");
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        assert_eq!(r.text().await.unwrap(), body);
    }
}

#[tokio::test]
async fn a_restart_after_a_crash_mid_call_resolves_the_attempt_at_once() {
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Service::start_in(bin, &[], dir.path().to_path_buf());
            let c = client();
            // A slow provider call, dispatched, and then the process dies.
            let slow = c
                .post(s.url("/invoke"))
                .header("idempotency-key", "crash-1")
                .header("x-simulate-delay-ms", "30000")
                .json(&json!({"a": 1}))
                .send();
            let pending = tokio::spawn(slow);
            s.wait_for_metric("ate_ledger_transitions_total{outcome=\"dispatched\"} 1")
                .await;
            drop(s); // SIGKILL: no drain, no close
            assert!(
                pending.await.unwrap().is_err(),
                "{bin}: the call died with the process"
            );
        }
        let s = Service::start_in(bin, &[], dir.path().to_path_buf());
        let c = client();
        // Not 409 until the dead run's lease runs out: resolved at start as
        // provider unavailable (it was dispatched), and never re-executed.
        let retry = invoke(&c, &s, "crash-1", json!({"a": 1}), "success").await;
        assert_eq!(retry.status(), 504, "{bin}");
        let body: Value = retry.json().await.unwrap();
        assert_eq!(
            (body["state"].as_str(), body["retryable"].as_bool()),
            (Some("provider_unavailable"), Some(false)),
            "{bin}: {body}"
        );
        s.wait_for_stderr("recovered open attempts").await;
    }
}

#[tokio::test]
async fn a_second_process_on_the_same_data_dir_refuses_to_start() {
    for bin in SERVICES {
        let first = Service::start(bin, &[EDGE]);
        let out = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&first.data_dir)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bin}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("already open"), "{bin}: {stderr}");
        assert!(!stderr.contains("corrupt"), "{bin}: {stderr}");
        // It stopped before the audit trail: the first service's appends
        // still land in the file it has open.
        let c = client();
        let ok = c
            .post(first.url("/notify"))
            .header("x-caller", "gail")
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        let audit = std::fs::read_to_string(first.data_dir.join("ratelimit-audit.jsonl")).unwrap();
        assert!(audit.contains("caller:gail"), "{bin}: {audit}");
    }
}

#[test]
fn a_data_dir_that_is_a_file_is_a_startup_error_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, "not a directory").unwrap();
    for bin in SERVICES {
        let out = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bin}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "{}: it exists and is not a directory",
                file.display()
            )),
            "{bin}: {stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "not a directory",
            "{bin}: the file is left as it was"
        );
    }
}

/// A clock stopped in the past, to write records that are already old.
#[derive(Debug)]
struct Past(chrono::DateTime<chrono::Utc>);

impl ate_ledger::clock::Clock for Past {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0
    }
}

#[tokio::test]
async fn ended_records_past_the_retention_are_purged_at_start() {
    use ate_ledger::{Begin, Close, Config, Fingerprint, Key, Ledger, RedbStore};
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        {
            // A call that ended two days ago (the retention is 24 h).
            let two_days_ago = chrono::Utc::now() - chrono::Duration::hours(48);
            let store = RedbStore::open(dir.path().join("ledger.redb")).unwrap();
            let ledger = Ledger::with_clock(store, Config::default(), Past(two_days_ago))
                .expect("a valid config");
            let key = Key::new("default", "old-1");
            let fp = Fingerprint("sha256:another-request".into());
            let Begin::Started(lease) = ledger.begin(&key, &fp, "old-run").unwrap() else {
                panic!()
            };
            ledger.mark_dispatched(&lease).unwrap();
            ledger.close(&lease, Close::Succeeded("{}".into())).unwrap();
        }
        let s = Service::start_in(bin, &[], dir.path().to_path_buf());
        s.wait_for_stderr("purged=1").await;
        let c = client();
        // Kept, it would answer 422 (the key was used with another request);
        // purged, the key is free again.
        let r = invoke(&c, &s, "old-1", json!({"a": 1}), "success").await;
        assert_eq!(r.status(), 200, "{bin}");
        assert!(r.headers().get("idempotent-replayed").is_none(), "{bin}");
        // A record inside the retention is kept: a repeat replays.
        let again = invoke(&c, &s, "old-1", json!({"a": 1}), "success").await;
        assert_eq!(again.headers()["idempotent-replayed"], "true", "{bin}");
    }
}

/// Asserts that `key` has nothing recorded: a call runs afresh.
async fn runs_afresh(c: &reqwest::Client, s: &Service, key: &str, bin: &str) {
    let first = invoke(c, s, key, json!({"amount": 5}), "success").await;
    assert_eq!(first.status(), 200, "{bin} {key}");
    assert!(
        first.headers().get("idempotent-replayed").is_none(),
        "{bin} {key}"
    );
}

#[tokio::test]
async fn a_request_with_two_idempotency_keys_is_refused_before_anything_runs() {
    // Two header lines are, to HTTP, one comma-joined value ("a, b"), which a
    // proxy may or may not merge: taking either line alone would let the same
    // request run under "a" directly and under "a, b" through a proxy.
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        let res = c
            .post(s.url("/invoke"))
            .header("idempotency-key", "a")
            .header("idempotency-key", "b")
            .json(&json!({"amount": 5}))
            .send()
            .await
            .unwrap();
        let error = refused(res, bin).await;
        assert!(error.contains("exactly one"), "{bin}: {error}");
        for key in ["a", "b"] {
            runs_afresh(&c, &s, key, bin).await;
        }
    }
}

#[tokio::test]
async fn an_idempotency_key_that_is_not_visible_ascii_is_refused_saying_so() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        for (value, says) in [
            (&b"caf\xc3\xa9"[..], "visible ASCII"),
            (&b"a\tb"[..], "visible ASCII"),
            (&[b'k'; 257][..], "at most 256"),
        ] {
            let res = c
                .post(s.url("/invoke"))
                .header(
                    "idempotency-key",
                    reqwest::header::HeaderValue::from_bytes(value).unwrap(),
                )
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            let error = refused(res, bin).await;
            assert!(error.contains(says), "{bin}: {error}");
        }
    }
}

#[tokio::test]
async fn a_request_body_with_a_key_twice_is_refused_before_anything_runs() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        let res = c
            .post(s.url("/invoke"))
            .header("idempotency-key", "dup")
            .body(r#"{"amount": 5, "amount": 6}"#)
            .send()
            .await
            .unwrap();
        let error = refused(res, bin).await;
        assert!(
            error.contains("\"amount\"") && error.contains("twice"),
            "{bin}: {error}"
        );
        runs_afresh(&c, &s, "dup", bin).await;
    }
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_call_does_not_lose_the_providers_answer() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_LEDGER_LEASE_SECS", "2")]);
        // The client sends the call, then goes away while the provider
        // works (a timeout, a crash, a mobile network).
        {
            use tokio::io::AsyncWriteExt;
            let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", s.port))
                .await
                .unwrap();
            let body = r#"{"a":1}"#;
            conn.write_all(
                format!(
                    "POST /invoke HTTP/1.1\r\nHost: x\r\nIdempotency-Key: hangup\r\n\
                     X-Simulate-Delay-Ms: 3000\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            s.wait_for_metric("ate_ledger_transitions_total{outcome=\"dispatched\"} 1")
                .await;
        }
        // The provider was called and answers; the retry gets that answer,
        // recorded once: not a 409 forever, nor a provider_unavailable
        // from a recovery after the lease ran out.
        let c = client();
        let started = std::time::Instant::now();
        let (status, body) = loop {
            let r = invoke(&c, &s, "hangup", json!({"a": 1}), "success").await;
            let (status, body) = (r.status(), r.text().await.unwrap());
            if status != 409 || started.elapsed() > Duration::from_secs(10) {
                break (status, body);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(status, 200, "{bin}: {body}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let r = invoke(&c, &s, "hangup", json!({"a": 1}), "success").await;
        assert_eq!(r.status(), 200, "{bin}");
        assert_eq!(r.headers()["idempotent-replayed"], "true");
    }
}

#[tokio::test]
async fn idempotency_keys_are_scoped_per_caller() {
    for bin in SERVICES {
        let s = Service::start(bin, &[EDGE]);
        let c = client();
        let send = |caller: &'static str, amount: u32| {
            c.post(s.url("/invoke"))
                .header("idempotency-key", "shared-key")
                .header("x-caller", caller)
                .json(&json!({ "amount": amount }))
                .send()
        };
        let alice = send("alice", 5).await.unwrap();
        assert_eq!(alice.status(), 200, "{bin}");
        assert!(alice.headers().get("idempotent-replayed").is_none());
        // The same key and body from another caller is its own request: it
        // executes, and is never handed alice's receipt.
        let bob = send("bob", 5).await.unwrap();
        assert_eq!(bob.status(), 200, "{bin}");
        assert!(
            bob.headers().get("idempotent-replayed").is_none(),
            "{bin}: bob got alice's receipt"
        );
        // Nor does another body from bob collide with alice's request.
        assert_eq!(
            send("bob", 6).await.unwrap().status(),
            422,
            "{bin}: bob's own key, other body"
        );
        // Each caller's repeat replays its own.
        let again = send("alice", 5).await.unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true", "{bin}");
        // An unusable caller is a 400, not a shared scope.
        let twice = c
            .post(s.url("/invoke"))
            .header("idempotency-key", "shared-key")
            .header("x-caller", "a")
            .header("x-caller", "b")
            .json(&json!({ "amount": 5 }))
            .send()
            .await
            .unwrap();
        assert_eq!(twice.status(), 400, "{bin}");
    }
}
