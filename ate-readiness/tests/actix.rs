//! The Actix middleware (feature `actix`) through actix-web's own test
//! utilities and over a real socket: lame duck against strict, a
//! streaming body keeping its request in flight until done, exempt paths,
//! the probes and the drain endpoint, Starting -> Serving, and the
//! request's `Admitted` extending work past the response.
#![cfg(feature = "actix")]

use std::net::SocketAddr;

use actix_web::body::MessageBody;
use actix_web::http::{ConnectionType, StatusCode};
use actix_web::{App, HttpResponse, test, web};
use ate_readiness::actix::{Admitted, PATHS, Readiness, probes};
use ate_readiness::{AdmissionPolicy, Gate, State};

/// Serves the app `factory` makes on a free loopback port, one worker,
/// no signal handling: its address, and a handle to stop it.
macro_rules! serve {
    ($factory:expr) => {{
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = actix_web::HttpServer::new($factory)
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        (addr, handle)
    }};
}

fn app(
    gate: Gate,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let counted = gate.clone();
    App::new()
        .wrap(Readiness::new(gate.clone()).exempt(PATHS))
        .configure(probes(gate.clone()))
        .route(
            "/work",
            web::get().to(move || {
                let n = counted.in_flight();
                async move { format!("in flight: {n}") }
            }),
        )
}

#[actix_web::test]
async fn a_request_is_counted_while_served_and_released_after() {
    let gate = Gate::new();
    let app = test::init_service(app(gate.clone())).await;
    let res = test::call_service(&app, test::TestRequest::get().uri("/work").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_ne!(
        res.response().head().connection_type(),
        ConnectionType::Close
    );
    assert_eq!(test::read_body(res).await, "in flight: 1");
    assert_eq!(gate.in_flight(), 0);
}

#[actix_web::test]
async fn lame_duck_serves_while_draining_and_closes_the_connection() {
    let gate = Gate::new();
    let app = test::init_service(app(gate.clone())).await;
    assert!(gate.begin_drain().started());
    let res = test::call_service(&app, test::TestRequest::get().uri("/work").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.response().head().connection_type(),
        ConnectionType::Close
    );
    assert_eq!(test::read_body(res).await, "in flight: 1");
    assert_eq!(gate.snapshot().admitted_while_draining, 1);
}

#[actix_web::test]
async fn strict_refuses_while_draining_with_503_and_retry_after() {
    let gate = Gate::builder()
        .policy(AdmissionPolicy::Strict {
            retry_after_secs: 7,
        })
        .build();
    let app = test::init_service(app(gate.clone())).await;
    assert!(gate.begin_drain().started());
    let res = test::call_service(&app, test::TestRequest::get().uri("/work").to_request()).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers().get("retry-after").unwrap(), "7");
    assert_eq!(gate.in_flight(), 0);
    assert_eq!(gate.snapshot().refused_while_draining, 1);
    // The probes are exempt: they answer, and say why.
    let ready = test::call_service(&app, test::TestRequest::get().uri("/ready").to_request()).await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        test::read_body(ready).await,
        r#"{"ready":false,"state":"draining"}"#
    );
    let health =
        test::call_service(&app, test::TestRequest::get().uri("/health").to_request()).await;
    assert_eq!(health.status(), StatusCode::OK);
}

#[actix_web::test]
async fn starting_answers_503_until_marked_ready() {
    let gate = Gate::builder().starting().build();
    let app = test::init_service(app(gate.clone())).await;
    let res = test::call_service(&app, test::TestRequest::get().uri("/ready").to_request()).await;
    let (status, body) = (res.status(), test::read_body(res).await);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, r#"{"ready":false,"state":"starting"}"#);
    assert!(gate.mark_ready());
    assert_eq!(gate.state(), State::Serving);
    let res = test::call_service(&app, test::TestRequest::get().uri("/ready").to_request()).await;
    let (status, body) = (res.status(), test::read_body(res).await);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, r#"{"ready":true,"state":"serving"}"#);
    // HEAD is served where GET is; other methods get 405 with Allow.
    let head = test::call_service(
        &app,
        test::TestRequest::default()
            .method(actix_web::http::Method::HEAD)
            .uri("/ready")
            .to_request(),
    )
    .await;
    assert_eq!(head.status(), StatusCode::OK);
    let delete =
        test::call_service(&app, test::TestRequest::delete().uri("/ready").to_request()).await;
    assert_eq!(delete.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[actix_web::test]
async fn the_drain_endpoint_drains_for_its_secret_from_loopback_only() {
    let token = ate_readiness::DrainToken::generate().unwrap();
    let bearer = format!("Bearer {}", token.secret());
    let gate = Gate::builder().drain_token(token).build();
    let app = test::init_service(app(gate.clone())).await;
    let outsider: SocketAddr = "10.0.0.7:40000".parse().unwrap();
    let res = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/__internal/drain")
            .peer_addr(outsider)
            .insert_header(("authorization", bearer.as_str()))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    assert!(!gate.is_draining());
    // A loopback peer forwarding someone else's request is refused too.
    let local: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let proxied = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/__internal/drain")
            .peer_addr(local)
            .insert_header(("x-forwarded-for", "203.0.113.9"))
            .insert_header(("authorization", bearer.as_str()))
            .to_request(),
    )
    .await;
    assert_eq!(proxied.status(), StatusCode::FORBIDDEN);
    assert!(!gate.is_draining());
    // Loopback without the secret: refused.
    let bare = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/__internal/drain")
            .peer_addr(local)
            .to_request(),
    )
    .await;
    assert_eq!(bare.status(), StatusCode::FORBIDDEN);
    assert!(!gate.is_draining());
    let res = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/__internal/drain")
            .peer_addr(local)
            .insert_header(("authorization", bearer.as_str()))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(gate.is_draining());
    // Exempt: the drain call itself was never counted.
    assert_eq!(gate.snapshot().admitted_while_draining, 0);
}

#[actix_web::test]
async fn a_streaming_body_keeps_its_request_in_flight_until_done() {
    let gate = Gate::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<web::Bytes>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
    let app = test::init_service(App::new().wrap(Readiness::new(gate.clone())).route(
        "/stream",
        web::get().to(move || {
            let mut rx = rx.lock().unwrap().take().unwrap();
            async move {
                let stream = futures_util::stream::poll_fn(move |cx| {
                    rx.poll_recv(cx).map(|c| c.map(Ok::<_, actix_web::Error>))
                });
                HttpResponse::Ok().streaming(stream)
            }
        }),
    ))
    .await;
    let res = test::call_service(&app, test::TestRequest::get().uri("/stream").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    // The handler has answered; the body is still streaming.
    assert_eq!(gate.in_flight(), 1);
    let mut body = res.into_body();
    tx.send(web::Bytes::from_static(b"part")).unwrap();
    let chunk = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_next(cx)).await;
    assert_eq!(chunk.unwrap().unwrap(), "part");
    assert_eq!(gate.in_flight(), 1);
    drop(tx);
    let end = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_next(cx)).await;
    assert!(end.is_none());
    assert_eq!(gate.in_flight(), 0, "released when the body is done");
}

#[actix_web::test]
async fn admitted_work_handed_to_a_task_is_waited_for() {
    let gate = Gate::new();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(Some(done_rx)));
    let app = test::init_service(App::new().wrap(Readiness::new(gate.clone())).route(
        "/spawn",
        web::post().to(move |admitted: web::ReqData<Admitted>| {
            let held = admitted.hold();
            let done = done_rx.lock().unwrap().take().unwrap();
            actix_web::rt::spawn(async move {
                let _ = done.await;
                drop(held);
            });
            async { "accepted" }
        }),
    ))
    .await;
    let res = test::call_service(&app, test::TestRequest::post().uri("/spawn").to_request()).await;
    assert_eq!(test::read_body(res).await, "accepted");
    // The response is done; the task's guard still counts.
    assert_eq!(gate.in_flight(), 1);
    done_tx.send(()).unwrap();
    for _ in 0..100 {
        if gate.in_flight() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(gate.in_flight(), 0);
}

#[actix_web::test]
async fn over_a_socket_a_draining_response_closes_its_connection() {
    let gate = Gate::new();
    let g = gate.clone();
    let (addr, handle) = serve!(move || app(g.clone()));
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/work");
    let serving = client.get(&url).send().await.unwrap();
    assert_eq!(serving.status(), 200);
    assert!(
        serving
            .headers()
            .get("connection")
            .is_none_or(|v| v != "close")
    );
    assert!(gate.begin_drain().started());
    let draining = client.get(&url).send().await.unwrap();
    assert_eq!(draining.status(), 200);
    assert_eq!(draining.headers()["connection"], "close");
    assert_eq!(draining.text().await.unwrap(), "in flight: 1");
    handle.stop(true).await;
}

/// A WebSocket opened while draining (lame duck), through actix-ws: the
/// handshake keeps its upgrade, and the session (the 101's body is its
/// outgoing stream) stays counted until it closes.
#[actix_web::test]
async fn a_websocket_opened_while_draining_keeps_its_upgrade_and_its_admission() {
    use futures_util::{SinkExt, StreamExt};

    async fn ws(
        req: actix_web::HttpRequest,
        body: web::Payload,
    ) -> Result<HttpResponse, actix_web::Error> {
        let (response, mut session, mut messages) = actix_ws::handle(&req, body)?;
        actix_web::rt::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                if let actix_ws::Message::Close(reason) = msg {
                    let _ = session.close(reason).await;
                    return;
                }
                if let actix_ws::Message::Text(text) = msg
                    && session.text(text).await.is_err()
                {
                    break;
                }
            }
            let _ = session.close(None).await;
        });
        Ok(response)
    }

    let gate = Gate::new();
    let g = gate.clone();
    let (addr, handle) = serve!(move || {
        App::new()
            .wrap(Readiness::new(g.clone()))
            .route("/ws", web::get().to(ws))
    });
    assert!(gate.begin_drain().started());
    let (mut socket, response) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .expect("the handshake succeeds while draining");
    assert_eq!(response.status(), 101);
    socket
        .send(tokio_tungstenite::tungstenite::Message::text("ping"))
        .await
        .unwrap();
    let echo = socket.next().await.unwrap().unwrap();
    assert_eq!(echo.into_text().unwrap().as_str(), "ping");
    assert_eq!(gate.in_flight(), 1, "the session is counted");
    socket.close(None).await.unwrap();
    while socket.next().await.is_some() {}
    let idle = gate
        .wait_idle_async(std::time::Duration::from_secs(10))
        .await;
    assert!(idle.is_completed(), "{idle:?}");
    handle.stop(true).await;
}

/// `without_admitted`: no `Admitted` in the request, and the request
/// still counts in flight while served.
#[actix_web::test]
async fn without_admitted_leaves_the_extension_out_and_still_counts() {
    let gate = Gate::new();
    let counted = gate.clone();
    let app = test::init_service(
        App::new()
            .wrap(Readiness::new(gate.clone()).without_admitted())
            .route(
                "/work",
                web::get().to(move |admitted: Option<web::ReqData<Admitted>>| {
                    let body = format!("{} {}", admitted.is_some(), counted.in_flight());
                    async move { body }
                }),
            ),
    )
    .await;
    let res = test::call_service(&app, test::TestRequest::get().uri("/work").to_request()).await;
    assert_eq!(test::read_body(res).await, "false 1");
    assert_eq!(gate.in_flight(), 0);
}
