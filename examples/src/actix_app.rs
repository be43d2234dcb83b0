//! The Actix adapter: the same API as the Axum service.

use std::net::SocketAddr;

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use std::num::NonZeroU32;

use actix_web::{FromRequest, Handler, HttpRequest, HttpResponse, Responder, web};
use ate_ratelimit::actix::{Caller, Checked, RateLimit};
use ate_readiness::actix::{Readiness, answer};
use ate_readiness::{Admitted, SessionAdmission};
use futures_util::StreamExt;

use crate::config::{CLIENT_NOTIFICATIONS, NOTIFICATIONS, PROMPT, PROMPT_BRIDGE};
use crate::service::{
    ApiResponse, AppState, MAX_BODY_BYTES, MAX_WS_MESSAGE_BYTES, Shared, WS_IDLE_REASON, WsRefusal,
    body_refused, caller_key, run_background, trusted_peer,
};
use actix_ws::{AggregatedMessage, ProtocolError};

fn respond(r: ApiResponse) -> HttpResponse {
    let mut builder = HttpResponse::build(
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    );
    builder.content_type(r.content_type);
    for (name, value) in r.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            builder.insert_header((n, v));
        }
    }
    builder.body(r.body)
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Every value of header `name`, as received (the service refuses two).
fn header_values<'a>(req: &'a HttpRequest, name: &str) -> Vec<&'a [u8]> {
    req.headers().get_all(name).map(|v| v.as_bytes()).collect()
}

fn peer(req: &HttpRequest) -> Option<std::net::IpAddr> {
    req.peer_addr().map(|a| a.ip())
}

/// A resource that answers GET and HEAD with `handler` (axum does the same
/// for its GET routes); any other method gets 405 with an `Allow` header.
fn get_and_head<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: Handler<Args> + Clone,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    web::resource(path)
        .route(web::get().to(handler.clone()))
        .route(web::head().to(handler))
}

/// The rate-limit middleware: `/notify` and `/prompt` against their limits
/// and the shared bucket, keyed by [`caller_key`], every decision recorded.
fn rate_limits(state: &Shared) -> RateLimit {
    let client = Caller::client_ip(state.config.client_ip.clone());
    let client_ip = state.config.client_ip.clone();
    let caller = Caller::custom(move |req: &HttpRequest| {
        let trusted = trusted_peer(&client_ip, peer(req));
        caller_key(&header_values(req, "x-caller"), trusted, || client.key(req))
    });
    let recorder = state.clone();
    let (limits, routes) = state.limits();
    let mut layer = RateLimit::new(limits)
        .caller(caller)
        .shadow(&state.shadowed())
        .on_decision(move |key, decision| recorder.record_decision(key, decision));
    for (path, ids) in routes {
        layer = layer.route(path, &ids, NonZeroU32::MIN);
    }
    layer
}

/// Registers every route (use with
/// `App::new().app_data(web::Data::new(state.clone())).configure(configure(&state))`;
/// [`run`] wraps them in the readiness and rate-limit middleware).
///
/// Each path is one `web::resource`, so a method it does not serve gets
/// 405 with `Allow` (as on the Axum service), not 404. `/prompt` and
/// `/notify` are bound to their capabilities (`state.capabilities`).
pub fn configure(state: &Shared) -> impl FnOnce(&mut web::ServiceConfig) + Clone + use<> {
    let caps = state.capabilities.clone();
    move |cfg| routes(cfg, &caps)
}

fn routes(cfg: &mut web::ServiceConfig, caps: &ate_readiness::Capabilities) {
    // The capabilities are the service's own: their names cannot fail.
    let needs = |name: &str| {
        ate_readiness::actix::RequireCapability::new(caps, name).expect("declared in AppState::new")
    };
    cfg.app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
        .service(get_and_head("/health", |s: web::Data<Shared>| async move {
            answer(s.gate.health_answer())
        }))
        .service(get_and_head("/ready", |s: web::Data<Shared>| async move {
            answer(s.gate.ready_answer())
        }))
        .service(get_and_head(
            "/metrics",
            |s: web::Data<Shared>| async move { respond(s.metrics()) },
        ))
        .service(get_and_head(
            "/ready/capabilities",
            |s: web::Data<Shared>| async move { respond(s.capabilities_answer()) },
        ))
        .service(web::resource("/__internal/drain").route(web::post().to(
            |s: web::Data<Shared>, req: HttpRequest| async move {
                answer(
                    s.gate.drain_answer(
                        peer(&req),
                        req.headers()
                            .iter()
                            .map(|(n, v)| (n.as_str(), v.as_bytes())),
                    ),
                )
            },
        )))
        .service(get_and_head(
            "/work",
            |s: web::Data<Shared>, q: web::Query<Vec<(String, String)>>| async move {
                respond(s.work(&crate::service::values(&q, "ms")).await)
            },
        ))
        .service(web::resource("/ws").route(web::get().to(ws)))
        // The body is read (and dropped) so a larger one gets 413, as on
        // every route.
        .service(
            web::resource("/notify")
                .wrap(needs(CLIENT_NOTIFICATIONS))
                .route(web::post().to(
                |s: web::Data<Shared>, checked: web::ReqData<Checked>, _body: Limited| async move {
                    respond(s.limited(NOTIFICATIONS, checked.remaining()))
                },
            )),
        )
        .service(
            web::resource("/prompt")
                .wrap(needs(PROMPT_BRIDGE))
                .route(web::post().to(
                |s: web::Data<Shared>, checked: web::ReqData<Checked>, _body: Limited| async move {
                    respond(s.limited(PROMPT, checked.remaining()))
                },
            )),
        )
        .service(get_and_head("/objects/{name}", get_object).route(web::put().to(put_object)))
        .service(web::resource("/objects/{name}/observed").route(web::post().to(observe)))
        .service(web::resource("/invoke").route(web::post().to(
            |s: web::Data<Shared>,
             admitted: Option<web::ReqData<Admitted>>,
             req: HttpRequest,
             body: Limited| async move {
                let s: Shared = s.get_ref().clone();
                let caller = s.caller_of(
                    &header_values(&req, "x-caller"),
                    peer(&req),
                    &header_values(&req, s.client_ip_header()),
                );
                respond(
                    s.invoke(
                        admitted.map(web::ReqData::into_inner),
                        caller,
                        &header_values(&req, "idempotency-key"),
                        &header_values(&req, "x-simulate"),
                        &header_values(&req, "x-simulate-delay-ms"),
                        &body,
                    )
                    .await,
                )
            },
        )));
}

/// A request body of at most [`MAX_BODY_BYTES`]; one the framework would
/// not read is refused with the services' JSON error ([`body_refused`]).
struct Limited(web::Bytes);

impl std::ops::Deref for Limited {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl FromRequest for Limited {
    type Error = actix_web::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut actix_web::dev::Payload) -> Self::Future {
        let bytes = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            bytes.await.map(Limited).map_err(|e| {
                let refused = respond(body_refused(e.as_response_error().status_code().as_u16()));
                actix_web::error::InternalError::from_response(e, refused).into()
            })
        })
    }
}

async fn get_object(s: web::Data<Shared>, name: web::Path<String>) -> HttpResponse {
    respond(s.get_object(&name))
}

async fn put_object(
    s: web::Data<Shared>,
    name: web::Path<String>,
    req: HttpRequest,
    body: Limited,
) -> HttpResponse {
    let caller = s.caller_of(
        &header_values(&req, "x-caller"),
        peer(&req),
        &header_values(&req, s.client_ip_header()),
    );
    respond(s.put_object(&name, caller, header(&req, "authorization"), &body))
}

async fn observe(
    s: web::Data<Shared>,
    name: web::Path<String>,
    req: HttpRequest,
    body: Limited,
) -> HttpResponse {
    respond(s.observe(&name, header(&req, "authorization"), &body))
}

async fn ws(
    s: web::Data<Shared>,
    req: HttpRequest,
    body: web::Payload,
) -> actix_web::Result<HttpResponse> {
    let admission = s.gate.admit_session();
    let slot = match admission {
        SessionAdmission::Open(_) => match s.ws_slot() {
            Ok(slot) => Some(slot),
            Err(full) => return Ok(respond(full)),
        },
        _ => None,
    };
    let idle = s.ws_idle_timeout();
    // Accept the upgrade in both cases; a draining gate closes right after.
    // A request that is no WebSocket handshake gets the services' JSON 400.
    let (response, mut session, stream) = match actix_ws::handle(&req, body) {
        Ok(upgraded) => upgraded,
        Err(e) => {
            return Ok(respond(ApiResponse::json(
                400,
                serde_json::json!({"error": format!("not a WebSocket handshake: {e}")}),
            )));
        }
    };
    // Whole messages, however many frames they came in, up to the bound.
    let mut stream = stream
        .max_frame_size(MAX_WS_MESSAGE_BYTES)
        .aggregate_continuations()
        .max_continuation_size(MAX_WS_MESSAGE_BYTES);
    match admission {
        SessionAdmission::Open(guard) => {
            let closing = s.sessions_closing();
            actix_web::rt::spawn(async move {
                tokio::pin!(closing);
                let mut reason = None;
                loop {
                    let msg = tokio::select! {
                        msg = tokio::time::timeout(idle, stream.next()) => match msg {
                            Ok(msg) => msg,
                            Err(_) => {
                                reason = Some(actix_ws::CloseReason {
                                    code: actix_ws::CloseCode::Away,
                                    description: Some(WS_IDLE_REASON.into()),
                                });
                                break;
                            }
                        },
                        () = &mut closing => {
                            // Shutting down: 1001, not a cut connection.
                            reason = Some(actix_ws::CloseReason {
                                code: actix_ws::CloseCode::Away,
                                description: Some("server shutting down".into()),
                            });
                            break;
                        }
                    };
                    let msg = match msg {
                        Some(Ok(msg)) => msg,
                        Some(Err(e)) => {
                            reason = refusal(&e);
                            if reason.is_none() {
                                // The connection failed: no frame goes out.
                                drop((guard, slot));
                                return;
                            }
                            break;
                        }
                        None => break,
                    };
                    let sent = match msg {
                        AggregatedMessage::Text(t) => session.text(t).await,
                        AggregatedMessage::Binary(b) => session.binary(b).await,
                        AggregatedMessage::Ping(p) => session.pong(&p).await,
                        // The client closes: answer with its own code
                        // (RFC 6455 5.5.1); a close frame without one is
                        // 1005, "no status received", to the client.
                        AggregatedMessage::Close(theirs) => {
                            reason = theirs;
                            break;
                        }
                        AggregatedMessage::Pong(_) => Ok(()),
                    };
                    if sent.is_err() {
                        break;
                    }
                }
                let _ = session.close(reason).await;
                drop((guard, slot));
            });
        }
        SessionAdmission::AcceptThenClose { close_code } => {
            actix_web::rt::spawn(async move {
                let reason = actix_ws::CloseReason {
                    code: actix_ws::CloseCode::Other(close_code),
                    description: Some("server draining".into()),
                };
                let _ = session.close(Some(reason)).await;
            });
        }
    }
    Ok(response)
}

/// The close frame for a read error that is the client's doing; `None`
/// where the connection itself failed (no close frame can go out).
fn refusal(e: &ProtocolError) -> Option<actix_ws::CloseReason> {
    let refusal = match e {
        // A frame over the bound.
        ProtocolError::Overflow => WsRefusal::TooBig,
        // Text that is not UTF-8, whole or reassembled.
        ProtocolError::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => WsRefusal::NotUtf8,
        // The connection's own failure, as actix-ws wraps it.
        ProtocolError::Io(io)
            if io
                .get_ref()
                .is_some_and(|inner| inner.is::<actix_web::error::PayloadError>()) =>
        {
            return None;
        }
        // The one other error actix-ws reads as I/O: fragments that
        // together go over the bound.
        ProtocolError::Io(_) => WsRefusal::TooBig,
        _ => WsRefusal::Protocol,
    };
    Some(actix_ws::CloseReason {
        code: actix_ws::CloseCode::Other(refusal.code()),
        description: Some(refusal.reason().into()),
    })
}

/// Builds the system and serves on `listen` until SIGTERM/Ctrl-C, then
/// drains like the Axum service.
pub fn run(listen: SocketAddr, config: crate::Config) -> std::io::Result<()> {
    actix_web::rt::System::new().block_on(async move {
        let state = AppState::new(config.clone())
            .await
            .map_err(std::io::Error::other)?;
        let data = web::Data::new(state.clone());
        let limits = rate_limits(&state);
        let idle = state.config.http_idle_timeout;
        // Every request but the probes, /metrics and /ws (whose sessions
        // the gate admits on their own); `wrap` runs the last one first.
        let readiness = Readiness::new(state.gate.clone())
            .exempt(ate_readiness::actix::PATHS)
            .exempt(["/metrics", "/ws", "/ready/capabilities"]);
        let routes = configure(&state);
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(data.clone())
                .wrap(limits.clone())
                .wrap(readiness.clone())
                .configure(routes.clone())
        })
        .disable_signals()
        // A connection waiting for a request head, first or next, is
        // closed after ATE_HTTP_IDLE_TIMEOUT_SECS (as on axum).
        .keep_alive(idle)
        .client_request_timeout(idle)
        .shutdown_timeout(2)
        .workers(2)
        .bind(listen)
        .map_err(|e| crate::cli::listen_error(listen, e))?;
        let addr = server
            .addrs()
            .first()
            .copied()
            .ok_or_else(|| std::io::Error::other("no address bound"))?;
        state.publish_drain_token(addr.port())?;
        // Listening for SIGTERM from here, before the server accepts work.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shutdown = crate::service::shutdown_sequence(state.clone(), tx);
        let server = server.run();
        let handle = server.handle();
        // Listening: /health answers 200 and /ready 503 (starting) until
        // the checks pass; the banner says so once they have.
        let checks = state.clone();
        actix_web::rt::spawn(async move {
            checks.ready_after_checks().await;
            crate::cli::banner(addr, &config);
        });
        let served = state.clone();
        actix_web::rt::spawn(run_background(state));
        actix_web::rt::spawn(shutdown);
        actix_web::rt::spawn(async move {
            let _ = rx.await;
            handle.stop(true).await;
        });
        let stopped = server.await;
        served.withdraw_drain_token();
        stopped
    })
}
