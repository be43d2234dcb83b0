//! An Actix Web middleware that admits every request through a [`Gate`]
//! (feature `actix`), and the gate's endpoints as Actix handlers.
//!
//! ```
//! use actix_web::{App, web};
//! use ate_readiness::Gate;
//! use ate_readiness::actix::{Readiness, probes};
//!
//! let gate = Gate::builder().starting().build();
//! let g = gate.clone();
//! let app = move || {
//!     App::new()
//!         .wrap(Readiness::new(g.clone()).exempt(ate_readiness::actix::PATHS))
//!         .configure(probes(g.clone()))
//!         .route("/work", web::get().to(|| async { "done" }))
//! };
//! # let _ = app;
//! // actix_web::HttpServer::new(app).bind(("0.0.0.0", 8080))?.run().await
//! // ... once the stores answer:
//! gate.mark_ready();
//! ```

use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use actix_web::http::{ConnectionType, StatusCode};
use actix_web::web::{self, Bytes};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use pin_project_lite::pin_project;

mod capability;

pub use crate::Admitted;
use crate::error::Error;
use crate::probe::Answer;
use crate::{Gate, OwnedGuard};
pub use capability::{RequireCapability, RequireCapabilityMiddleware, RequireFuture};

/// The usual paths of the gate's endpoints, to exempt from admission:
/// `/health`, `/ready` and the drain endpoint.
pub const PATHS: [&str; 3] = [
    "/health",
    "/ready",
    crate::prestop::DrainRequest::DEFAULT_PATH,
];

/// Admits every request through the gate, as
/// [`tower::ReadinessLayer`](https://docs.rs/ate-readiness) does for tower
/// stacks: while draining, the lame-duck policy (the default) serves the
/// request and closes the connection after it; the strict policy answers
/// 503 with `Retry-After` without calling the handler. The request counts
/// as in flight until its response body is done (streaming bodies too).
/// The request's [`Admitted`] is in its extensions (`web::ReqData`).
/// Exempt paths pass through uncounted.
#[derive(Debug, Clone)]
pub struct Readiness {
    gate: Gate,
    exempt: Arc<[Box<str>]>,
    admitted: bool,
}

impl Readiness {
    /// A middleware admitting through `gate`, exempting nothing.
    pub fn new(gate: Gate) -> Self {
        Self {
            gate,
            exempt: Arc::from(Vec::new()),
            admitted: true,
        }
    }

    /// Admits without putting [`Admitted`] in the request's extensions
    /// (one allocation less per request), for a service none of whose
    /// handlers hands work to a task of its own or holds a session. The
    /// request still counts in flight until its body is done. A handler
    /// that asks for `web::ReqData<Admitted>` then gets none (a 500 for
    /// the extractor, `None` for an `Option` of it), so opt out only where
    /// no handler reads it.
    #[must_use]
    pub fn without_admitted(mut self) -> Self {
        self.admitted = false;
        self
    }

    /// Paths (exact matches of the request path) that pass through
    /// without admission: probes, metrics, the drain endpoint.
    #[must_use]
    pub fn exempt<P: Into<String>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        let mut all: Vec<Box<str>> = self.exempt.iter().cloned().collect();
        all.extend(paths.into_iter().map(|p| p.into().into_boxed_str()));
        self.exempt = Arc::from(all);
        self
    }
}

impl<S, B> Transform<S, ServiceRequest> for Readiness
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<GuardedBody<B>>>;
    type Error = actix_web::Error;
    type Transform = ReadinessMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(ReadinessMiddleware {
            service: Rc::new(service),
            layer: self.clone(),
        }))
    }
}

/// The service [`Readiness`] wraps around yours.
#[derive(Debug)]
pub struct ReadinessMiddleware<S> {
    service: Rc<S>,
    layer: Readiness,
}

type LocalFuture<T> = Pin<Box<dyn Future<Output = T>>>;

impl<S, B> Service<ServiceRequest> for ReadinessMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<GuardedBody<B>>>;
    type Error = actix_web::Error;
    type Future = LocalFuture<Result<Self::Response, Self::Error>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let path = req.path();
        if self.layer.exempt.iter().any(|p| **p == *path) {
            let call = self.service.call(req);
            return Box::pin(async move {
                Ok(call.await?.map_body(|_, body| {
                    EitherBody::left(GuardedBody {
                        inner: body,
                        guard: None,
                    })
                }))
            });
        }
        let guard = match self.layer.gate.admit_owned() {
            Ok(guard) => guard,
            Err(Error::Draining { retry_after_secs }) => {
                let refused = HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
                    .insert_header((RETRY_AFTER, HeaderValue::from(retry_after_secs)))
                    .force_close()
                    .finish();
                return Box::pin(ready(Ok(req.into_response(refused).map_into_right_body())));
            }
        };
        if self.layer.admitted {
            req.extensions_mut().insert(Admitted::of(&guard));
        }
        let call = self.service.call(req);
        Box::pin(async move {
            let mut response = call.await?;
            // A 101 keeps its upgrade (its body, the session's outgoing
            // stream under actix-ws, holds the guard until it closes).
            if response.status() != StatusCode::SWITCHING_PROTOCOLS
                && guard.should_close_connection()
            {
                response
                    .response_mut()
                    .head_mut()
                    .set_connection_type(ConnectionType::Close);
            }
            Ok(response.map_body(|_, body| {
                EitherBody::left(GuardedBody {
                    inner: body,
                    guard: Some(guard),
                })
            }))
        })
    }
}

pin_project! {
    /// A response body that keeps its request counted in flight until the
    /// body is done (its last chunk sent, or the body dropped: a client
    /// that hung up).
    pub struct GuardedBody<B> {
        #[pin]
        inner: B,
        guard: Option<OwnedGuard>,
    }
}

impl<B> std::fmt::Debug for GuardedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedBody")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl<B: MessageBody> MessageBody for GuardedBody<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.inner.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let chunk = std::task::ready!(this.inner.poll_next(cx));
        if chunk.is_none() {
            // Done: the request leaves the in-flight count now.
            *this.guard = None;
        }
        Poll::Ready(chunk)
    }
}

/// A probe [`Answer`] as an Actix response.
pub fn answer(answer: Answer) -> HttpResponse {
    HttpResponse::build(
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    )
    .insert_header((CONTENT_TYPE, Answer::CONTENT_TYPE))
    .body(answer.body)
}

/// Mounts the gate's endpoints: `GET`/`HEAD` `/health` and `/ready`, and
/// `POST` on the drain endpoint (loopback callers only, from the
/// connection's peer address). Other methods get 405 with `Allow`.
/// Use with `App::configure`.
pub fn probes(gate: Gate) -> impl FnOnce(&mut web::ServiceConfig) + Clone {
    move |cfg| {
        let health = gate.clone();
        let ready_gate = gate.clone();
        cfg.service(get_and_head("/health", move || health.health_answer()))
            .service(get_and_head("/ready", move || ready_gate.ready_answer()))
            .service(
                web::resource(crate::prestop::DrainRequest::DEFAULT_PATH).route(web::post().to(
                    move |req: HttpRequest| {
                        let peer = req.peer_addr().map(|a| a.ip());
                        let reply = gate.drain_answer(
                            peer,
                            req.headers()
                                .iter()
                                .map(|(n, v)| (n.as_str(), v.as_bytes())),
                        );
                        async move { answer(reply) }
                    },
                )),
            );
    }
}

/// A resource answering GET and HEAD with `probe`'s answer.
fn get_and_head(path: &str, probe: impl Fn() -> Answer + Clone + 'static) -> actix_web::Resource {
    let head = probe.clone();
    web::resource(path)
        .route(web::get().to(move || {
            let reply = probe();
            async move { answer(reply) }
        }))
        .route(web::head().to(move || {
            let reply = head();
            async move { answer(reply) }
        }))
}
