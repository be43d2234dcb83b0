//! Readiness per capability: routes bound to one close while it is not
//! ready and the rest serve; the pod's `/ready` depends on the gate and
//! the required capabilities only; the drain overrides everything. On
//! both frameworks, and against a reference model.
#![cfg(all(feature = "tower", feature = "actix"))]

use actix_web::{App, test as atest, web};
use ate_readiness::tower::{CapabilityLayer, Probe};
use ate_readiness::{Capabilities, CapabilityError, CapabilityState, Gate};
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::{get_service, post};
use http_body_util::BodyExt;
use proptest::prelude::*;
use tower::ServiceExt;

fn caps() -> Capabilities {
    Capabilities::builder()
        .capability("prompt-bridge")
        .ready_capability("client-notifications")
        .required("local-disk")
        .build()
        .unwrap()
}

fn router(gate: &Gate, caps: &Capabilities) -> Router {
    Router::new()
        .route(
            "/prompt",
            post(|| async { "prompted" })
                .layer(CapabilityLayer::new(caps, "prompt-bridge").unwrap()),
        )
        .route(
            "/notify",
            post(|| async { "notified" })
                .layer(CapabilityLayer::new(caps, "client-notifications").unwrap()),
        )
        .route("/ready", get_service(Probe::ready(gate.clone())))
}

async fn call(app: &Router, method: &str, path: &str) -> (u16, Option<String>, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, retry, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn one_broken_capability_closes_its_routes_and_not_the_pod() {
    let caps = caps();
    let gate = Gate::builder().capabilities(caps.clone()).build();
    let app = router(&gate, &caps);
    let (prompt, disk) = (
        caps.id("prompt-bridge").unwrap(),
        caps.id("local-disk").unwrap(),
    );
    caps.set_ready(disk);
    // Starts not ready until checked once: its route refuses.
    let (status, retry, body) = call(&app, "POST", "/prompt").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry.as_deref(), Some("5"));
    assert_eq!(
        body,
        r#"{"error":"capability_unavailable","capability":"prompt-bridge","reason":"not checked yet"}"#
    );
    assert_eq!(call(&app, "POST", "/notify").await.0, 200);
    // Not required: the pod stays in the load balancer.
    assert_eq!(call(&app, "GET", "/ready").await.0, 200);
    caps.set_ready(prompt);
    assert_eq!(call(&app, "POST", "/prompt").await.0, 200);
    caps.set_not_ready(prompt, "provider answered 401");
    let (status, _, body) = call(&app, "POST", "/prompt").await;
    assert_eq!(status, 503);
    assert!(body.contains("provider answered 401"), "{body}");
    // A required one takes the pod out, and /ready names it.
    caps.set_not_ready(disk, "disk full");
    let (status, _, body) = call(&app, "GET", "/ready").await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        r#"{"ready":false,"state":"serving","not_ready":["local-disk"]}"#
    );
    caps.set_ready(disk);
    assert_eq!(call(&app, "GET", "/ready").await.0, 200);
    // The drain overrides everything, and stays.
    caps.set_ready(prompt);
    let _ = gate.begin_drain();
    assert_eq!(call(&app, "GET", "/ready").await.0, 503);
    caps.set_ready(disk);
    assert_eq!(gate.readiness_status(), 503);
}

#[test]
fn an_unknown_capability_on_a_route_is_a_build_error() {
    let caps = caps();
    let err = CapabilityLayer::new(&caps, "promt-bridge").unwrap_err();
    assert!(matches!(err, CapabilityError::Unknown { .. }), "{err}");
    assert!(err.to_string().contains("prompt-bridge"), "{err}");
    assert!(ate_readiness::actix::RequireCapability::new(&caps, "").is_err());
}

#[actix_web::test]
async fn actix_resources_close_by_capability_too() {
    let caps = caps();
    let prompt = caps.id("prompt-bridge").unwrap();
    let require = ate_readiness::actix::RequireCapability::new(&caps, "prompt-bridge").unwrap();
    let app = atest::init_service(
        App::new()
            .service(
                web::resource("/prompt")
                    .wrap(require)
                    .route(web::post().to(|| async { "prompted" })),
            )
            .route("/notify", web::post().to(|| async { "notified" })),
    )
    .await;
    let post = |path: &'static str| atest::TestRequest::post().uri(path).to_request();
    let res = atest::call_service(&app, post("/prompt")).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers().get("retry-after").unwrap(), "5");
    let body = atest::read_body(res).await;
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .contains(r#""capability":"prompt-bridge""#)
    );
    assert_eq!(
        atest::call_service(&app, post("/notify")).await.status(),
        200
    );
    caps.set_ready(prompt);
    assert_eq!(
        atest::call_service(&app, post("/prompt")).await.status(),
        200
    );
}

#[cfg(feature = "serde")]
#[test]
fn the_snapshot_says_every_capability_with_its_reason() {
    let caps = caps();
    let prompt = caps.id("prompt-bridge").unwrap();
    caps.set_not_ready(prompt, "refused");
    let json = serde_json::to_value(caps.snapshot()).unwrap();
    assert_eq!(json["required_ready"], false);
    assert_eq!(json["capabilities"][0]["name"], "prompt-bridge");
    assert_eq!(json["capabilities"][0]["state"], "not_ready");
    assert_eq!(json["capabilities"][0]["reason"], "refused");
    assert_eq!(json["capabilities"][1]["state"], "ready");
    assert_eq!(json["capabilities"][2]["required"], true);
    assert!(json["capabilities"][0]["since"].is_string());
}

/// One step of the reference model.
#[derive(Debug, Clone)]
enum Step {
    Ready(usize),
    NotReady(usize),
    Drain,
    Request(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            2 => (0usize..3).prop_map(Step::Ready),
            2 => (0usize..3).prop_map(Step::NotReady),
            1 => Just(Step::Drain),
            5 => (0usize..2).prop_map(Step::Request),
        ],
        1..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// No request is admitted to a capability once a flip to not ready is
    /// visible; the pod is ready iff serving and every required one is;
    /// the drain wins over everything.
    #[test]
    fn routes_and_readiness_follow_the_flags(seq in steps()) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let caps = caps();
            let gate = Gate::builder().capabilities(caps.clone()).build();
            let app = router(&gate, &caps);
            let names = ["prompt-bridge", "client-notifications", "local-disk"];
            let ids: Vec<_> = names.iter().map(|n| caps.id(n).unwrap()).collect();
            // The model: the flags, and whether the gate drains.
            let mut ready = [false, true, false];
            let mut draining = false;
            for step in seq {
                match step {
                    Step::Ready(i) => { caps.set_ready(ids[i]); ready[i] = true; }
                    Step::NotReady(i) => { caps.set_not_ready(ids[i], "down"); ready[i] = false; }
                    Step::Drain => { let _ = gate.begin_drain(); draining = true; }
                    Step::Request(i) => {
                        let path = ["/prompt", "/notify"][i];
                        let (status, _, _) = call(&app, "POST", path).await;
                        prop_assert_eq!(status, if ready[i] { 200 } else { 503 }, "{}", path);
                    }
                }
                let want = if !draining && ready[2] { 200 } else { 503 };
                prop_assert_eq!(gate.readiness_status(), want);
                for (i, id) in ids.iter().enumerate() {
                    prop_assert_eq!(caps.is_ready(*id), ready[i]);
                    prop_assert_eq!(
                        matches!(caps.state(*id), CapabilityState::Ready { .. }),
                        ready[i]
                    );
                }
            }
            Ok(())
        })?;
    }
}
