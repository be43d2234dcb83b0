//! The Axum adapter: routes, extraction, and the serve loop with the
//! SIGTERM → drain → bounded wait → exit sequence.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use ate_ratelimit::http::Checked;
use ate_ratelimit::tower::{Caller, RateLimitLayer};
use ate_readiness::tower::{CapabilityLayer, Probe, ReadinessLayer};
use ate_readiness::{Admitted, SessionAdmission};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{
    ConnectInfo, DefaultBodyLimit, Extension, FromRequest, FromRequestParts, Path, Query, Request,
    State,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, get_service, post, post_service, put};
use tower::ServiceExt;

use crate::config::{CLIENT_NOTIFICATIONS, NOTIFICATIONS, PROMPT, PROMPT_BRIDGE};
use crate::service::{
    ApiResponse, AppState, CLOSE_HANDSHAKE, MAX_BODY_BYTES, MAX_WS_MESSAGE_BYTES, Shared,
    WS_IDLE_REASON, WsRefusal, body_refused, caller_key, run_background, shutdown_sequence,
    trusted_peer, values,
};

impl IntoResponse for ApiResponse {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        }
        response
    }
}

/// The peer address axum records (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`).
fn connect_info_peer(parts: &Parts) -> Option<std::net::IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Every value of header `name`, as received (the service refuses two).
fn header_values<'a>(h: &'a HeaderMap, name: &str) -> Vec<&'a [u8]> {
    h.get_all(name).iter().map(|v| v.as_bytes()).collect()
}

/// The rate-limit layer: `/notify` and `/prompt` against their limits and
/// the shared bucket, keyed by [`caller_key`], every decision recorded.
fn rate_limits(state: &Shared) -> RateLimitLayer {
    let client = Caller::client_ip(state.config.client_ip.clone()).peer_from(connect_info_peer);
    let client_ip = state.config.client_ip.clone();
    let caller = Caller::custom(move |parts: &Parts| {
        let trusted = trusted_peer(&client_ip, connect_info_peer(parts));
        caller_key(&header_values(&parts.headers, "x-caller"), trusted, || {
            client.key(parts)
        })
    });
    let recorder = state.clone();
    let (limits, routes) = state.limits();
    let mut layer = RateLimitLayer::new(limits)
        .caller(caller)
        .shadow(&state.shadowed())
        .on_decision(move |key, decision| recorder.record_decision(key, decision));
    for (path, ids) in routes {
        layer = layer.route(path, &ids, NonZeroU32::MIN);
    }
    layer
}

/// The router. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`
/// (the drain endpoint and per-IP limits need the peer address).
///
/// Every request but the probes, `/metrics` and `/ws` (whose sessions the
/// gate admits on their own) goes through the readiness layer, then the
/// rate-limit layer.
pub fn router(state: Shared) -> Router {
    let gate = state.gate.clone();
    let readiness = ReadinessLayer::new(gate.clone())
        .exempt(Probe::PATHS)
        .exempt(["/metrics", "/ws", "/ready/capabilities"]);
    // The capabilities are the service's own: their names cannot fail.
    let needs = |name: &str| {
        CapabilityLayer::new(&state.capabilities, name).expect("declared in AppState::new")
    };
    Router::new()
        .route("/health", get_service(Probe::health(gate.clone())))
        .route("/ready", get_service(Probe::ready(gate.clone())))
        .route(
            "/ready/capabilities",
            get(|State(s): State<Shared>| async move { s.capabilities_answer() }),
        )
        .route(
            "/metrics",
            get(|State(s): State<Shared>| async move { s.metrics() }),
        )
        .route(
            "/__internal/drain",
            post_service(Probe::drain(gate).peer_from(connect_info_peer)),
        )
        .route(
            "/work",
            get(
                |State(s): State<Shared>, Query(q): Query<Vec<(String, String)>>| async move {
                    s.work(&values(&q, "ms")).await
                },
            ),
        )
        .route("/ws", get(ws))
        .route(
            "/notify",
            // The body is read (and dropped) so a larger one gets 413, as
            // on every route.
            post(
                |State(s): State<Shared>,
                 Extension(checked): Extension<Checked>,
                 Limited(_body): Limited| async move {
                    s.limited(NOTIFICATIONS, checked.remaining())
                },
            )
            .layer(needs(CLIENT_NOTIFICATIONS)),
        )
        .route(
            "/prompt",
            post(
                |State(s): State<Shared>,
                 Extension(checked): Extension<Checked>,
                 Limited(_body): Limited| async move {
                    s.limited(PROMPT, checked.remaining())
                },
            )
            .layer(needs(PROMPT_BRIDGE)),
        )
        .route(
            "/objects/{name}",
            put(
                |State(s): State<Shared>,
                 ObjectName(name): ObjectName,
                 peer: Option<Extension<ConnectInfo<SocketAddr>>>,
                 headers: HeaderMap,
                 Limited(body): Limited| async move {
                    let caller = s.caller_of(
                        &header_values(&headers, "x-caller"),
                        peer.map(|Extension(ConnectInfo(a))| a.ip()),
                        &header_values(&headers, s.client_ip_header()),
                    );
                    s.put_object(&name, caller, header(&headers, "authorization"), &body)
                },
            )
            .get(
                |State(s): State<Shared>, ObjectName(name): ObjectName| async move {
                    s.get_object(&name)
                },
            ),
        )
        .route(
            "/objects/{name}/observed",
            post(
                |State(s): State<Shared>,
                 ObjectName(name): ObjectName,
                 headers: HeaderMap,
                 Limited(body): Limited| async move {
                    s.observe(&name, header(&headers, "authorization"), &body)
                },
            ),
        )
        .route(
            "/invoke",
            post(
                |State(s): State<Shared>,
                 admitted: Option<Extension<Admitted>>,
                 peer: Option<Extension<ConnectInfo<SocketAddr>>>,
                 headers: HeaderMap,
                 Limited(body): Limited| async move {
                    let caller = s.caller_of(
                        &header_values(&headers, "x-caller"),
                        peer.map(|Extension(ConnectInfo(a))| a.ip()),
                        &header_values(&headers, s.client_ip_header()),
                    );
                    s.invoke(
                        admitted.map(|Extension(a)| a),
                        caller,
                        &header_values(&headers, "idempotency-key"),
                        &header_values(&headers, "x-simulate"),
                        &header_values(&headers, "x-simulate-delay-ms"),
                        &body,
                    )
                    .await
                },
            ),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(rate_limits(&state))
        .layer(readiness)
        .with_state(state)
}

/// The `{name}` of an object path; one that does not decode (say `%FF`,
/// not UTF-8) is refused with a JSON 400 like every other bad name, not
/// the framework's own text.
struct ObjectName(String);

impl<S: Send + Sync> FromRequestParts<S> for ObjectName {
    type Rejection = ApiResponse;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiResponse> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(name)| ObjectName(name))
            .map_err(|e| ApiResponse::json(400, serde_json::json!({"error": e.body_text()})))
    }
}

/// A request body of at most [`MAX_BODY_BYTES`]; one the framework would
/// not read is refused with the services' JSON error ([`body_refused`]).
struct Limited(Bytes);

impl<S: Send + Sync> FromRequest<S> for Limited {
    type Rejection = ApiResponse;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiResponse> {
        Bytes::from_request(req, state)
            .await
            .map(Limited)
            .map_err(|e| body_refused(e.status().as_u16()))
    }
}

async fn ws(
    State(s): State<Shared>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // A request that is no WebSocket handshake gets the services' JSON
    // error, not axum's plain text.
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(e) => {
            return ApiResponse::json(
                e.status().as_u16(),
                serde_json::json!({"error": format!("not a WebSocket handshake: {}", e.body_text())}),
            )
            .into_response();
        }
    };
    let upgrade = upgrade
        .max_message_size(MAX_WS_MESSAGE_BYTES)
        .max_frame_size(MAX_WS_MESSAGE_BYTES);
    match s.gate.admit_session() {
        SessionAdmission::Open(guard) => {
            let slot = match s.ws_slot() {
                Ok(slot) => slot,
                Err(full) => return full.into_response(),
            };
            let closing = s.sessions_closing();
            let idle = s.ws_idle_timeout();
            upgrade.on_upgrade(move |socket| async move {
                echo(socket, closing, idle).await;
                drop((guard, slot));
            })
        }
        // Accept the upgrade FIRST, then close with 1001: a refusal before
        // the upgrade is a failed handshake, which clients count as an error.
        SessionAdmission::AcceptThenClose { close_code } => {
            upgrade.on_upgrade(move |socket| close_session(socket, close_code, "server draining"))
        }
    }
}

/// Echoes until the client closes, goes silent for `idle`, or the service
/// shuts down (those two with a 1001 close frame).
async fn echo(mut socket: WebSocket, closing: impl Future<Output = ()>, idle: std::time::Duration) {
    tokio::pin!(closing);
    loop {
        let msg = tokio::select! {
            msg = tokio::time::timeout(idle, socket.recv()) => match msg {
                Ok(msg) => msg,
                Err(_) => {
                    close_session(socket, ate_readiness::CLOSE_GOING_AWAY, WS_IDLE_REASON).await;
                    return;
                }
            },
            () = &mut closing => {
                close_session(socket, ate_readiness::CLOSE_GOING_AWAY, "server shutting down").await;
                return;
            }
        };
        let msg = match msg {
            Some(Ok(msg)) => msg,
            Some(Err(e)) => {
                if let Some(refusal) = refusal(&e) {
                    close_session(socket, refusal.code(), refusal.reason()).await;
                }
                return;
            }
            None => return,
        };
        let reply = match msg {
            Message::Text(t) => Message::Text(t),
            Message::Binary(b) => Message::Binary(b),
            // The client closes: the answer, echoing its code, is queued
            // and goes out on the next read, which then ends the stream
            // (RFC 6455 5.5.1). Returning now would cut the connection
            // without it, an abnormal closure (1006) for the client.
            _ => continue,
        };
        if socket.send(reply).await.is_err() {
            return;
        }
    }
}

/// Why to close after a read error that is the client's doing; `None`
/// where the connection itself failed (no close frame can go out).
fn refusal(e: &axum::Error) -> Option<WsRefusal> {
    use tungstenite::Error;
    let source = std::error::Error::source(e)?;
    match source.downcast_ref::<Error>() {
        Some(Error::Capacity(_)) => Some(WsRefusal::TooBig),
        Some(Error::Utf8(_)) => Some(WsRefusal::NotUtf8),
        Some(Error::Protocol(_)) => Some(WsRefusal::Protocol),
        Some(_) => None,
        // Not the WebSocket library's error (axum moved on to another
        // version of it): still a close frame, not a cut connection.
        None => Some(WsRefusal::Protocol),
    }
}

/// Closes a session from the server's side: sends the close frame, then
/// reads until the client's answer ends the stream, so the connection closes
/// after a complete closing handshake (RFC 6455 7.1.1: the server closes the
/// TCP connection, once the handshake is done). A client that never answers
/// holds the task for [`CLOSE_HANDSHAKE`] at most.
async fn close_session(mut socket: WebSocket, code: u16, reason: &'static str) {
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    if socket.send(Message::Close(Some(frame))).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(CLOSE_HANDSHAKE, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

/// Serves until SIGTERM/Ctrl-C, then drains: readiness 503, in-flight and
/// lame-duck requests keep being served, the in-flight wait is bounded by
/// `ATE_DRAIN_TIMEOUT_SECS`, then the listener closes, every connection
/// finishes its request in progress and closes, and this returns.
///
/// Each connection is served by hyper's HTTP/1 connection with a header
/// read timeout (`ATE_HTTP_IDLE_TIMEOUT_SECS`): a connection that sends no
/// complete request head within it, first or next, is closed. `axum::serve`
/// sets no timer, so there a client that never finishes its headers, or an
/// idle keep-alive connection, holds a socket and its buffers for good.
pub async fn serve(listener: tokio::net::TcpListener, state: Shared) -> std::io::Result<()> {
    let app = router(state.clone());
    let idle = state.config.http_idle_timeout;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(run_background(state.clone()));
    tokio::spawn(shutdown_sequence(state, stop_tx));
    // Connections watch `closing`; `open` closes once every one has ended.
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let (open_tx, open) = tokio::sync::watch::channel(());
    tokio::pin!(stop_rx);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop_rx => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: wait, don't spin.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = app
            .clone()
            .map_request(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req.map(Body::new)
            });
        let mut closing = closing.clone();
        let open = open.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(idle);
            let conn = builder
                .serve_connection(
                    hyper_util::rt::TokioIo::new(stream),
                    hyper_util::service::TowerToHyperService::new(service),
                )
                .with_upgrades();
            tokio::pin!(conn);
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!("connection from {peer} ended: {e}");
                        }
                        break;
                    }
                    _ = closing.changed() => conn.as_mut().graceful_shutdown(),
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    drop(open);
    open_tx.closed().await;
    Ok(())
}

/// Builds the runtime and serves on `listen`.
pub fn run(listen: SocketAddr, config: crate::Config) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let state = AppState::new(config.clone())
            .await
            .map_err(std::io::Error::other)?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| crate::cli::listen_error(listen, e))?;
        // Listening: /health answers 200 and /ready 503 (starting) until
        // the checks pass; the banner says so once they have.
        let addr = listener.local_addr()?;
        state.publish_drain_token(addr.port())?;
        let checks = state.clone();
        tokio::spawn(async move {
            checks.ready_after_checks().await;
            crate::cli::banner(addr, &config);
        });
        let served = state.clone();
        let stopped = serve(listener, state).await;
        served.withdraw_drain_token();
        stopped
    })
}
