//! The tower layer (feature `tower`), mounted in axum: lame duck against
//! strict, a streaming body keeping its request in flight until done,
//! exempt paths, Starting -> Serving, and the same over a real socket.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::time::Duration;

use ate_readiness::tower::{ReadinessLayer, answer};
use ate_readiness::{AdmissionPolicy, Gate, State};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::routing::get;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

fn app(gate: &Gate) -> Router {
    let (ready, health) = (gate.clone(), gate.clone());
    let counted = gate.clone();
    Router::new()
        .route(
            "/work",
            get(move || async move { format!("in flight: {}", counted.in_flight()) }),
        )
        .route(
            "/ready",
            get(move || async move { answer(ready.ready_answer()) }),
        )
        .route(
            "/health",
            get(move || async move { answer(health.health_answer()) }),
        )
        .layer(ReadinessLayer::new(gate.clone()).exempt(["/ready", "/health"]))
}

async fn get_path(app: &Router, path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into(),
    )
}

#[tokio::test]
async fn a_request_is_counted_while_served_and_released_after() {
    let gate = Gate::new();
    let app = app(&gate);
    let (status, headers, body) = get_path(&app, "/work").await;
    assert_eq!(status, 200);
    assert_eq!(body, "in flight: 1");
    assert!(headers.get("connection").is_none());
    assert_eq!(gate.in_flight(), 0);
}

#[tokio::test]
async fn lame_duck_serves_while_draining_with_connection_close() {
    let gate = Gate::new();
    let app = app(&gate);
    let _ = gate.begin_drain();
    let (status, headers, body) = get_path(&app, "/work").await;
    assert_eq!(status, 200);
    assert_eq!(body, "in flight: 1");
    assert_eq!(headers["connection"], "close");
    assert_eq!(gate.snapshot().admitted_while_draining, 1);
}

#[tokio::test]
async fn strict_refuses_while_draining_with_503_and_retry_after() {
    let gate = Gate::builder()
        .policy(AdmissionPolicy::Strict {
            retry_after_secs: 7,
        })
        .build();
    let app = app(&gate);
    let _ = gate.begin_drain();
    let (status, headers, body) = get_path(&app, "/work").await;
    assert_eq!(status, 503);
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(body, "", "the handler never ran");
    assert_eq!(gate.snapshot().refused_while_draining, 1);
    // Probes are exempt: /ready answers (503, draining), /health 200.
    let (status, _, body) = get_path(&app, "/ready").await;
    assert_eq!(
        (status.as_u16(), body.as_str()),
        (503, r#"{"ready":false,"state":"draining"}"#)
    );
    assert_eq!(get_path(&app, "/health").await.0, 200);
    assert_eq!(
        gate.snapshot().refused_while_draining,
        1,
        "exempt: not counted"
    );
}

#[tokio::test]
async fn a_streaming_body_keeps_its_request_in_flight_until_done() {
    let gate = Gate::new();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let rx = rx.lock().unwrap().take().unwrap();
                async move {
                    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
                        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
                    }))
                }
            }),
        )
        .layer(ReadinessLayer::new(gate.clone()));
    let response = app
        .oneshot(Request::get("/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(gate.in_flight(), 1, "headers sent, body not done");
    let mut body = response.into_body();
    tx.send(Bytes::from_static(b"one")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "one");
    assert_eq!(gate.in_flight(), 1, "still streaming");
    drop(tx);
    assert!(body.frame().await.is_none());
    assert_eq!(gate.in_flight(), 0, "released when the body ended");
}

#[tokio::test]
async fn a_body_dropped_unread_releases_its_request() {
    let gate = Gate::new();
    let app = app(&gate);
    let response = app
        .oneshot(Request::get("/work").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(gate.in_flight(), 1);
    drop(response);
    assert_eq!(gate.in_flight(), 0, "a client that hung up");
}

#[tokio::test]
async fn ready_is_503_until_the_service_marks_itself_ready() {
    let gate = Gate::builder().starting().build();
    let app = app(&gate);
    let (status, _, body) = get_path(&app, "/ready").await;
    assert_eq!(
        (status.as_u16(), body.as_str()),
        (503, r#"{"ready":false,"state":"starting"}"#)
    );
    assert_eq!(
        get_path(&app, "/work").await.0,
        200,
        "work is served while starting"
    );
    assert!(gate.mark_ready());
    let (status, _, body) = get_path(&app, "/ready").await;
    assert_eq!(
        (status.as_u16(), body.as_str()),
        (200, r#"{"ready":true,"state":"serving"}"#)
    );
    // A drain during Starting goes straight to Draining, and stays there.
    let early = Gate::builder().starting().build();
    let _ = early.begin_drain();
    assert!(!early.mark_ready());
    assert_eq!(early.state(), State::Draining);
}

/// Over a real socket with axum's server: the lame-duck response carries
/// `Connection: close` and the server closes the connection after it.
#[tokio::test]
async fn over_a_socket_a_draining_response_closes_its_connection() {
    let gate = Gate::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, app(&gate)).into_future());
    let _ = gate.begin_drain();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /work HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut reply))
        .await
        .expect("the server closed the connection")
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("connection: close"),
        "{reply}"
    );
    assert!(reply.ends_with("in flight: 1"), "{reply}");
    assert_eq!(gate.in_flight(), 0);
    server.abort();
}

#[tokio::test]
async fn the_probe_services_answer_by_state_and_drain_for_loopback_only() {
    use ate_readiness::tower::Probe;
    use axum::routing::{get_service, post_service};
    use std::net::SocketAddr;
    let token = ate_readiness::DrainToken::generate().unwrap();
    let bearer = format!("Bearer {}", token.secret());
    let gate = Gate::builder().starting().drain_token(token).build();
    // The peer as a test server's connect info would give it.
    let peer: std::sync::Arc<std::sync::Mutex<SocketAddr>> =
        std::sync::Arc::new(std::sync::Mutex::new("10.0.0.7:1".parse().unwrap()));
    let seen = peer.clone();
    let app = Router::new()
        .route("/health", get_service(Probe::health(gate.clone())))
        .route("/ready", get_service(Probe::ready(gate.clone())))
        .route(
            "/__internal/drain",
            post_service(
                Probe::drain(gate.clone()).peer_from(move |_| Some(seen.lock().unwrap().ip())),
            ),
        )
        .layer(ReadinessLayer::new(gate.clone()).exempt(Probe::PATHS));
    let (status, _, body) = get_path(&app, "/ready").await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"ready":false,"state":"starting"}"#
        )
    );
    assert!(gate.mark_ready());
    let (status, _, _) = get_path(&app, "/ready").await;
    assert_eq!(status, 200);
    let (status, _, _) = get_path(&app, "/health").await;
    assert_eq!(status, 200);
    let post = |app: Router, authorization: &str| {
        let req = Request::post("/__internal/drain")
            .header("authorization", authorization)
            .body(Body::empty())
            .unwrap();
        async move { app.oneshot(req).await.unwrap().status() }
    };
    // GET on the drain endpoint is 405 (the method router's), and drains nothing.
    let (status, headers, _) = get_path(&app, "/__internal/drain").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(headers["allow"].to_str().unwrap().contains("POST"));
    assert_eq!(post(app.clone(), &bearer).await, StatusCode::FORBIDDEN);
    assert!(!gate.is_draining());
    *peer.lock().unwrap() = "127.0.0.1:1".parse().unwrap();
    assert_eq!(post(app.clone(), "Bearer 00").await, StatusCode::FORBIDDEN);
    assert!(!gate.is_draining(), "loopback alone is not enough");
    assert_eq!(post(app.clone(), &bearer).await, StatusCode::OK);
    assert!(gate.is_draining());
    // Without any peer the drain is refused, not a panic.
    let blind = Router::new().route("/d", post_service(Probe::drain(Gate::new())));
    let status = blind
        .oneshot(Request::post("/d").body(Body::empty()).unwrap())
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_handler_holds_the_admission_for_work_that_outlives_the_response() {
    use ate_readiness::tower::Admitted;
    let gate = Gate::new();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(Some(done_rx)));
    let app = Router::new()
        .route(
            "/spawn",
            get(
                move |axum::Extension(admitted): axum::Extension<Admitted>| async move {
                    let held = admitted.hold();
                    let done = done_rx.lock().unwrap().take().unwrap();
                    tokio::spawn(async move {
                        let _ = done.await;
                        drop(held);
                    });
                    "accepted"
                },
            ),
        )
        .layer(ReadinessLayer::new(gate.clone()));
    let (status, _, body) = get_path(&app, "/spawn").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "accepted"));
    assert_eq!(gate.in_flight(), 1, "the task's guard still counts");
    done_tx.send(()).unwrap();
    let waited = tokio::task::spawn_blocking({
        let gate = gate.clone();
        move || gate.wait_idle(Duration::from_secs(5))
    });
    assert!(waited.await.unwrap().is_completed());
}

/// A WebSocket opened while draining (lame duck): the handshake keeps its
/// `Connection: upgrade`, and the session holds its admission until it
/// closes, so the drain's wait waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_opened_while_draining_keeps_its_upgrade_and_its_admission() {
    use ate_readiness::tower::Admitted;
    use axum::Extension;
    use axum::extract::ws::{Message, WebSocketUpgrade};
    use futures_util::{SinkExt, StreamExt};

    let gate = Gate::new();
    let app = Router::new()
        .route(
            "/ws",
            get(
                |Extension(admitted): Extension<Admitted>, ws: WebSocketUpgrade| async move {
                    // The session's own admission, held until it ends.
                    let session = admitted.hold();
                    ws.on_upgrade(move |mut socket| async move {
                        while let Some(Ok(msg)) = socket.recv().await {
                            if matches!(msg, Message::Close(_)) || socket.send(msg).await.is_err() {
                                break;
                            }
                        }
                        drop(session);
                    })
                },
            ),
        )
        .layer(ReadinessLayer::new(gate.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    assert!(gate.begin_drain().started());
    let (mut ws, response) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .expect("the handshake succeeds while draining");
    assert_eq!(response.status(), 101);
    let connection = response.headers()["connection"].to_str().unwrap();
    assert!(connection.eq_ignore_ascii_case("upgrade"), "{connection}");
    ws.send(tokio_tungstenite::tungstenite::Message::text("ping"))
        .await
        .unwrap();
    let echo = ws.next().await.unwrap().unwrap();
    assert_eq!(echo.into_text().unwrap().as_str(), "ping");
    // The 101's body has ended; the session is still counted.
    assert_eq!(gate.in_flight(), 1);
    ws.close(None).await.unwrap();
    let idle = gate.wait_idle_async(Duration::from_secs(10)).await;
    assert!(idle.is_completed(), "{idle:?}");
    assert_eq!(gate.in_flight(), 0);
}

/// `without_admitted`: no `Admitted` in the request (a handler asking for
/// it as an `Option` gets `None`), and the request still counts in
/// flight while served.
#[tokio::test]
async fn without_admitted_leaves_the_extension_out_and_still_counts() {
    use ate_readiness::tower::Admitted;
    let gate = Gate::new();
    let counted = gate.clone();
    let app = Router::new()
        .route(
            "/work",
            get(
                move |admitted: Option<axum::Extension<Admitted>>| async move {
                    format!("{} {}", admitted.is_some(), counted.in_flight())
                },
            ),
        )
        .layer(ReadinessLayer::new(gate.clone()).without_admitted());
    let (status, _, body) = get_path(&app, "/work").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "false 1"));
    assert_eq!(gate.in_flight(), 0);
    let with = Router::new()
        .route(
            "/work",
            get(|admitted: Option<axum::Extension<Admitted>>| async move {
                admitted.is_some().to_string()
            }),
        )
        .layer(ReadinessLayer::new(gate.clone()));
    assert_eq!(get_path(&with, "/work").await.2, "true");
}
