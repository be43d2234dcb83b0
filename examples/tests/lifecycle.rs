//! Health, readiness, drain and graceful shutdown, against both services
//! over real sockets.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test]
async fn drain_flips_ready_but_not_health_and_is_idempotent() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        assert_eq!(
            c.get(s.url("/health")).send().await.unwrap().status(),
            200,
            "{bin}"
        );
        assert_eq!(c.get(s.url("/ready")).send().await.unwrap().status(), 200);
        let first: serde_json::Value = c
            .post(s.url("/__internal/drain"))
            .bearer_auth(s.drain_token())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(first["started"], true, "{bin}");
        let second = s.drain(&c).send().await.unwrap();
        assert_eq!(second.status(), 200);
        let second: serde_json::Value = second.json().await.unwrap();
        assert_eq!(
            second["started"], false,
            "second drain must report it was already draining"
        );
        assert_eq!(first["draining_since"], second["draining_since"]);
        assert_eq!(c.get(s.url("/ready")).send().await.unwrap().status(), 503);
        assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
        let metrics = s.metrics().await;
        assert!(
            has_sample(&metrics, "ate_ready 0") && has_sample(&metrics, "ate_drain_in_progress 1"),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn a_drain_forwarded_by_a_proxy_from_loopback_is_refused() {
    // A mesh sidecar (Istio's Envoy) connects to the service from loopback
    // and passes on another pod's request with forwarding headers.
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        for (name, value) in [
            ("x-forwarded-proto", "http"),
            ("X-Forwarded-For", "10.1.2.3"),
            (
                "x-forwarded-client-cert",
                "By=spiffe://cluster.local/ns/a/sa/b",
            ),
            ("forwarded", "for=10.1.2.3"),
        ] {
            let r = c
                .post(s.url("/__internal/drain"))
                .bearer_auth(s.drain_token())
                .header(name, value)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 403, "{bin}: {name}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert!(
                body["error"]
                    .as_str()
                    .unwrap()
                    .contains("not through a proxy"),
                "{bin}: {body}"
            );
        }
        assert_eq!(
            c.get(s.url("/ready")).send().await.unwrap().status(),
            200,
            "{bin}: still serving"
        );
        let own = s.drain(&c).send().await.unwrap();
        assert_eq!(own.status(), 200, "{bin}: the pod's own call");
    }
}

#[tokio::test]
async fn lame_duck_requests_after_drain_are_served_with_connection_close() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        s.drain(&c).send().await.unwrap();
        let r = c.get(s.url("/work?ms=1")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{bin}");
        assert_eq!(
            r.headers().get("connection").map(|v| v.to_str().unwrap()),
            Some("close"),
            "{bin}"
        );
    }
}

/// A request: method, path, extra headers, body.
type Route = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// Every work route.
const WORK_ROUTES: &[Route] = &[
    ("GET", "/work?ms=1", &[], ""),
    ("POST", "/notify", &[("x-caller", "lame")], ""),
    (
        "POST",
        "/invoke",
        &[("idempotency-key", "lame-1")],
        r#"{"a":1}"#,
    ),
    ("PUT", "/objects/lame", &[], r#"{"replicas":2}"#),
    ("GET", "/objects/lame", &[], ""),
    (
        "POST",
        "/objects/lame/observed",
        &[("authorization", "Bearer t0k")],
        r#"{"observedGeneration":1}"#,
    ),
];

async fn send(
    c: &reqwest::Client,
    s: &Service,
    (method, path, headers, body): Route,
) -> reqwest::Response {
    let mut req = c.request(method.parse().unwrap(), s.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(body.to_owned()).send().await.unwrap()
}

#[tokio::test]
async fn every_work_route_answers_with_connection_close_while_draining() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_CONTROL_TOKEN", "t0k")]);
        let c = client();
        // The object exists before the drain, so the GET and the observed
        // write find it.
        let put = send(&c, &s, WORK_ROUTES[3]).await;
        assert_eq!(put.status(), 201, "{bin}");
        assert!(put.headers().get("connection").is_none(), "{bin}: serving");
        s.drain(&c).send().await.unwrap();
        for &route in WORK_ROUTES {
            let r = send(&c, &s, route).await;
            assert!(r.status().is_success(), "{bin} {route:?}: {}", r.status());
            assert_eq!(
                r.headers().get("connection").map(|v| v.to_str().unwrap()),
                Some("close"),
                "{bin} {route:?}: a keep-alive client must move to another pod"
            );
        }
        // And the server does close the connection after answering.
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(conn, "GET /objects/lame HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut all = Vec::new();
        conn.read_to_end(&mut all)
            .expect("closed by the server, not timed out");
        let text = String::from_utf8_lossy(&all);
        assert!(text.starts_with("HTTP/1.1 200"), "{bin}: {text}");
    }
}

#[tokio::test]
async fn the_strict_policy_refuses_work_while_draining_with_503_and_retry_after() {
    for bin in SERVICES {
        let s = Service::start(
            bin,
            &[
                ("ATE_ADMISSION_POLICY", "strict"),
                ("ATE_CONTROL_TOKEN", "t0k"),
            ],
        );
        let c = client();
        assert_eq!(send(&c, &s, WORK_ROUTES[3]).await.status(), 201, "{bin}");
        s.drain(&c).send().await.unwrap();
        for &route in WORK_ROUTES {
            let r = send(&c, &s, route).await;
            assert_eq!(r.status(), 503, "{bin} {route:?}");
            assert_eq!(r.headers()["retry-after"], "5", "{bin} {route:?}");
        }
        // Liveness stays 200; readiness is 503, as under either policy.
        assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
        assert_eq!(c.get(s.url("/ready")).send().await.unwrap().status(), 503);
        // Nothing refused ran: no provider call was made.
        assert!(
            !s.metrics().await.contains("outcome=\"dispatched\""),
            "{bin}"
        );
    }
}

#[tokio::test]
async fn drain_subcommand_posts_to_loopback_and_sleeps() {
    // A service on IPv6 loopback only is reached too (on ::1), on a port
    // no other test's service can hold on 127.0.0.1.
    let ipv6_only = format!(
        "[::1]:{}",
        ate_readiness::testing::unused_loopback_port(20_000)
    );
    for (bin, listen) in SERVICES
        .iter()
        .flat_map(|bin| [(*bin, "127.0.0.1:0"), (*bin, ipv6_only.as_str())])
    {
        let s = Service::start_on(bin, listen);
        let start = Instant::now();
        let out = std::process::Command::new(bin)
            .args(["drain", "--port", &s.port.to_string(), "--sleep", "1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{bin} on {listen}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            start.elapsed() >= Duration::from_secs(1),
            "it must sleep for the LB"
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"started\":true"));
        assert_eq!(
            client().get(s.url("/ready")).send().await.unwrap().status(),
            503
        );
    }
}

#[test]
fn drain_subcommand_with_nothing_on_loopback_fails_saying_where_to_listen() {
    // A port nothing listens on, nor can while the test runs.
    let port = ate_readiness::testing::unused_loopback_port(25_000);
    for bin in SERVICES {
        let out = std::process::Command::new(bin)
            .args(["drain", "--port", &port.to_string(), "--sleep", "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bin}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("127.0.0.1:{port}"))
                && said.contains("must listen on port")
                && said.contains("0.0.0.0"),
            "{bin}: {said}"
        );
    }
}

#[tokio::test]
async fn sigterm_drains_waits_for_in_flight_work_and_exits_zero() {
    for bin in SERVICES {
        let mut s = Service::start(bin, &[("ATE_DRAIN_TIMEOUT_SECS", "10")]);
        let c = client();
        let work: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                let url = s.url("/work?ms=1500");
                tokio::spawn(async move { c.get(url).send().await.map(|r| r.status().as_u16()) })
            })
            .collect();
        // Wait until all four are in flight.
        s.wait_for_metric("ate_in_flight 4").await;
        let started = Instant::now();
        s.sigterm();
        let ready_url = s.url("/ready");
        eventually(Duration::from_secs(2), || {
            let c = c.clone();
            let url = ready_url.clone();
            async move {
                c.get(url)
                    .send()
                    .await
                    .map(|r| r.status() == 503)
                    .unwrap_or(false)
            }
        })
        .await;
        for w in work {
            assert_eq!(
                w.await.unwrap().unwrap(),
                200,
                "{bin}: in-flight request dropped"
            );
        }
        let status = tokio::task::spawn_blocking(move || {
            let st = s.wait_exit(Duration::from_secs(8));
            (st, s)
        })
        .await
        .unwrap();
        let (st, s) = status;
        let st = st.unwrap_or_else(|| panic!("{bin} did not exit; stderr: {}", s.stderr()));
        assert!(st.success(), "{bin} exit {st:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        s.wait_for_stderr("in-flight wait completed").await;
    }
}

#[tokio::test]
async fn sigterm_wait_that_outlasts_the_bound_still_exits_reporting_the_timeout() {
    for bin in SERVICES {
        let mut s = Service::start(bin, &[("ATE_DRAIN_TIMEOUT_SECS", "1")]);
        let c = client();
        let url = s.url("/work?ms=20000");
        let _long = tokio::spawn(async move { c.get(url).send().await.map(|r| r.status()) });
        s.wait_for_metric("ate_in_flight 1").await;
        let started = Instant::now();
        s.sigterm();
        let (st, s) =
            tokio::task::spawn_blocking(move || (s.wait_exit(Duration::from_secs(10)), s))
                .await
                .unwrap();
        let st = st.unwrap_or_else(|| panic!("{bin} did not exit; stderr: {}", s.stderr()));
        assert!(st.success(), "{bin} exit {st:?}");
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "exit not bounded: {:?}",
            started.elapsed()
        );
        s.wait_for_stderr("timed out").await;
    }
}

#[tokio::test]
async fn a_second_signal_during_the_in_flight_wait_exits_at_once_with_status_1() {
    for (bin, second) in SERVICES.into_iter().zip(["INT", "TERM"]) {
        let mut s = Service::start(bin, &[("ATE_DRAIN_TIMEOUT_SECS", "60")]);
        let c = client();
        let url = s.url("/work?ms=60000");
        let _long = tokio::spawn(async move { c.get(url).send().await.map(|r| r.status()) });
        s.wait_for_metric("ate_in_flight 1").await;
        s.sigterm();
        s.wait_for_stderr("signal received: draining").await;
        let started = Instant::now();
        // A signal that lands between the first one's log line and the
        // second listener's start is not seen (as by any process, the
        // operator sends it again): so does the test, every 200 ms.
        let (st, s) = tokio::task::spawn_blocking(move || {
            let mut st = None;
            while st.is_none() && started.elapsed() < Duration::from_secs(10) {
                s.signal(second);
                st = s.wait_exit(Duration::from_millis(200));
            }
            (st, s)
        })
        .await
        .unwrap();
        let st = st.unwrap_or_else(|| panic!("{bin} ignored SIG{second}: {}", s.stderr()));
        assert_eq!(st.code(), Some(1), "{bin}: {}", s.stderr());
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            s.stderr()
                .contains("second signal: exiting without waiting"),
            "{bin}: {}",
            s.stderr()
        );
    }
}

#[tokio::test]
async fn bad_configuration_stops_the_binary_at_start_naming_the_variable() {
    for bin in SERVICES {
        for (var, value) in [
            ("ATE_NOTIFICATIONS_PER_MIN", "0"),
            ("ATE_PROMPT_PER_MIN", "ten"),
            ("ATE_REQUEST_BUCKET_PER_MIN", " 600"),
            ("ATE_DRAIN_TIMEOUT_SECS", "-1"),
            ("ATE_LEDGER_POSTGRES_CONNECTIONS", "0"),
            ("ATE_LEDGER_POSTGRES_CONNECTIONS", "4294967295"),
            ("ATE_LEDGER_LEASE_SECS", "0"),
            ("ATE_MAX_CALLERS", "0"),
            ("ATE_RECONCILE_INTERVAL_MS", "1.5"),
            ("ATE_ADMISSION_POLICY", "Strict"),
        ] {
            let mut child = std::process::Command::new(bin)
                .args(["--listen", "127.0.0.1:0"])
                .env(var, value)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // A service that ignored the variable would serve forever.
            let started = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if started.elapsed() > Duration::from_secs(20) {
                    child.kill().unwrap();
                    panic!("{bin} started with {var}={value:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let out = child.wait_with_output().unwrap();
            // Exit 2: a configuration error, not a failure while serving (1).
            assert_eq!(out.status.code(), Some(2), "{bin} with {var}={value:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(var) && err.contains(&format!("{value:?}")),
                "{bin}: {err}"
            );
            assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));
        }
    }
}

#[tokio::test]
async fn a_port_in_use_stops_the_binary_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(bin)
            .args(["--listen", &addr, "--data-dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bin}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("cannot listen on {addr}")),
            "{bin}: {err}"
        );
        assert!(err.contains("pass --listen 127.0.0.1:PORT"), "{bin}: {err}");
    }
}

#[test]
fn help_and_version_name_the_binary() {
    for bin in SERVICES {
        let name = std::path::Path::new(bin)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        let out = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with(&format!("{name} ")), "{bin}: {text}");
        let out = std::process::Command::new(bin)
            .arg("--help")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("Usage: {name} ")), "{bin}: {text}");
    }
}

#[tokio::test]
async fn a_bad_work_duration_or_simulated_delay_is_a_400_naming_the_value() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        for (query, says) in [
            ("ms=abc", "\"abc\""),
            ("ms=60001", "\"60001\""),
            ("ms=-1", "\"-1\""),
        ] {
            let res = c
                .get(s.url(&format!("/work?{query}")))
                .send()
                .await
                .unwrap();
            let text = refused(res, &format!("{bin} {query}")).await;
            assert!(text.contains(says), "{bin} {query}: {text}");
        }
        let res = c
            .post(s.url("/invoke"))
            .header("idempotency-key", "d1")
            .header("x-simulate-delay-ms", "soon")
            .body("{}")
            .send()
            .await
            .unwrap();
        let text = refused(res, bin).await;
        assert!(text.contains("\"soon\""), "{bin}: {text}");
    }
}

#[tokio::test]
async fn under_kube_proxy_alone_ready_stays_up_for_the_grace_while_clients_move_away() {
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_READY_WHILE_DRAINING_SECS", "600")]);
        let c = client();
        s.wait_ready().await;
        let drained = s.drain(&c).send().await.unwrap();
        assert_eq!(drained.status(), 200, "{bin}");
        // Still serving as kube-proxy's fallback for terminating endpoints...
        let ready = c.get(s.url("/ready")).send().await.unwrap();
        assert_eq!(ready.status(), 200, "{bin}");
        let body: serde_json::Value = ready.json().await.unwrap();
        assert_eq!(body["state"], "draining", "{bin}");
        // ...while every response tells keep-alive clients to go.
        let work = c.get(s.url("/work?ms=1")).send().await.unwrap();
        assert_eq!(work.status(), 200, "{bin}");
        assert_eq!(work.headers()["connection"], "close", "{bin}");
    }
}
