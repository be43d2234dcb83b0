//! A tower [`Layer`] that admits every request through a [`Gate`]
//! (feature `tower`), for axum, tonic, hyper or any tower stack.
//!
//! ```
//! use std::net::SocketAddr;
//! use ate_readiness::Gate;
//! use ate_readiness::tower::{Probe, ReadinessLayer};
//! use axum::extract::ConnectInfo;
//! use axum::routing::{get, get_service, post_service};
//! use axum::Router;
//!
//! let gate = Gate::builder().starting().build();
//! let drain = Probe::drain(gate.clone()).peer_from(|parts| {
//!     parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())
//! });
//! let app: Router = Router::new()
//!     .route("/work", get(|| async { "done" }))
//!     .route("/health", get_service(Probe::health(gate.clone())))
//!     .route("/ready", get_service(Probe::ready(gate.clone())))
//!     .route("/__internal/drain", post_service(drain))
//!     .layer(ReadinessLayer::new(gate.clone()).exempt(Probe::PATHS));
//! // ... once the stores answer:
//! gate.mark_ready();
//! // serve with app.into_make_service_with_connect_info::<SocketAddr>()
//! ```

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

mod capability;

pub use crate::Admitted;
use crate::error::Error;
use crate::probe::Answer;
use crate::{Gate, OwnedGuard};
pub use capability::{CapabilityFuture, CapabilityLayer, RequireCapability};

/// Admits every request through the gate. A request admitted while
/// draining is served with `Connection: close` under the lame-duck policy
/// (the default), so the client's next request opens a connection the load
/// balancer routes elsewhere; under the strict policy it is refused with
/// 503 and `Retry-After`, and the inner service is not called. The request
/// counts as in flight until its response body is done (a streaming body
/// too), so the drain's bounded wait waits for it. Exempt paths (probes,
/// metrics, the drain endpoint) pass through uncounted.
///
/// An upgrade (`101 Switching Protocols`, a WebSocket) keeps its
/// `Connection: upgrade` while draining. Its empty body ends at once, so
/// the session that follows is the handler's to count: move
/// [`Admitted::hold`] (axum: `Extension<Admitted>`) into the session's
/// task, and the drain waits for it, as [`Gate::admit_session`] promises;
/// [`OwnedGuard::admitted_while_draining`] tells a session opened while
/// draining, which should then close with 1001 (going away).
#[derive(Debug, Clone)]
pub struct ReadinessLayer {
    // One pointer: the service is cloned for every request in axum.
    config: Arc<Config>,
}

/// The gate, the exempt paths, and whether [`Admitted`] goes into the
/// request's extensions.
#[derive(Debug, Clone)]
struct Config {
    gate: Gate,
    exempt: Vec<Box<str>>,
    admitted: bool,
}

impl ReadinessLayer {
    /// A layer admitting through `gate`, exempting nothing.
    pub fn new(gate: Gate) -> Self {
        Self {
            config: Arc::new(Config {
                gate,
                exempt: Vec::new(),
                admitted: true,
            }),
        }
    }

    /// Admits without putting [`Admitted`] in the request's extensions:
    /// one allocation less per request (its box in the extensions map),
    /// for a service none of whose handlers hands work to a task of its
    /// own or holds a session. The request still counts in flight until
    /// its body is done. A handler that asks for `Extension<Admitted>`
    /// then gets none (axum: a 500 for the extractor, `None` for an
    /// `Option` of it, and the work it would have held is not waited
    /// for), so opt out only where no handler reads it.
    #[must_use]
    pub fn without_admitted(mut self) -> Self {
        Arc::make_mut(&mut self.config).admitted = false;
        self
    }

    /// Paths (exact matches of the request path) that pass through without
    /// admission: `/health`, `/ready`, `/metrics`, the drain endpoint.
    #[must_use]
    pub fn exempt<P: Into<String>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        Arc::make_mut(&mut self.config)
            .exempt
            .extend(paths.into_iter().map(|p| p.into().into_boxed_str()));
        self
    }
}

impl<S> Layer<S> for ReadinessLayer {
    type Service = Readiness<S>;

    fn layer(&self, inner: S) -> Readiness<S> {
        Readiness {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service [`ReadinessLayer`] wraps around yours.
#[derive(Debug, Clone)]
pub struct Readiness<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Readiness<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body,
{
    type Response = Response<GuardedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let path = req.uri().path();
        if self.config.exempt.iter().any(|p| **p == *path) {
            return ResponseFuture::pass(self.inner.call(req), None);
        }
        match self.config.gate.admit_owned() {
            Ok(guard) => {
                if self.config.admitted {
                    req.extensions_mut().insert(Admitted::of(&guard));
                }
                ResponseFuture::pass(self.inner.call(req), Some(guard))
            }
            Err(Error::Draining { retry_after_secs }) => ResponseFuture::refuse(retry_after_secs),
        }
    }
}

pin_project! {
    /// The response future of [`Readiness`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        guard: Option<OwnedGuard>,
        retry_after_secs: u64,
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("refused", &self.inner.is_none())
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl<F> ResponseFuture<F> {
    fn pass(inner: F, guard: Option<OwnedGuard>) -> Self {
        Self {
            inner: Some(inner),
            guard,
            retry_after_secs: 0,
        }
    }

    fn refuse(retry_after_secs: u64) -> Self {
        Self {
            inner: None,
            guard: None,
            retry_after_secs,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
{
    type Output = Result<Response<GuardedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            let mut refused = Response::new(GuardedBody::empty());
            *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            refused
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(*this.retry_after_secs));
            refused
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return Poll::Ready(Ok(refused));
        };
        let response = std::task::ready!(inner.poll(cx))?;
        let guard = this.guard.take();
        let (mut parts, body) = response.into_parts();
        // A 101 keeps its `Connection: upgrade`: overwriting it with
        // `close` fails the handshake (a WebSocket opened while draining).
        if parts.status != StatusCode::SWITCHING_PROTOCOLS
            && guard
                .as_ref()
                .is_some_and(OwnedGuard::should_close_connection)
        {
            parts
                .headers
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        Poll::Ready(Ok(Response::from_parts(
            parts,
            GuardedBody {
                inner: Some(body),
                guard,
            },
        )))
    }
}

pin_project! {
    /// A response body that keeps its request counted in flight until the
    /// body is done (its last frame sent, or the body dropped: a client
    /// that hung up).
    pub struct GuardedBody<B> {
        #[pin]
        inner: Option<B>,
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

impl<B> GuardedBody<B> {
    /// An empty body (a refusal's).
    fn empty() -> Self {
        Self {
            inner: None,
            guard: None,
        }
    }
}

impl<B: Body> Body for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(None);
        };
        let frame = std::task::ready!(inner.poll_frame(cx));
        if frame.is_none() {
            // Done: the request leaves the in-flight count now, not when
            // the server gets round to dropping the body.
            *this.guard = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

/// A probe [`Answer`] as an `http` response (for a handler in any
/// framework built on `http`, such as axum).
pub fn answer(answer: Answer) -> Response<String> {
    let mut response = Response::new(answer.body);
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(Answer::CONTENT_TYPE));
    response
}

type PeerFn = Arc<dyn Fn(&http::request::Parts) -> Option<IpAddr> + Send + Sync>;

#[derive(Debug, Clone, Copy)]
enum ProbeKind {
    Health,
    Ready,
    Drain,
}

/// The gate's endpoints as tower services: `/health`, `/ready` and the
/// drain endpoint, for the hook's secret from loopback only (see [`Gate::health_answer`],
/// [`Gate::ready_answer`], [`Gate::drain_answer`]). Mount each on its
/// path with the method router of your framework (axum:
/// `get_service(Probe::ready(gate))`), which answers 405 with `Allow` to
/// other methods.
#[derive(Clone)]
pub struct Probe {
    gate: Gate,
    kind: ProbeKind,
    peer: PeerFn,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The peer from a `SocketAddr` request extension (what hyper-based
/// servers that record it insert; axum's is its `ConnectInfo`).
fn socket_addr_peer(parts: &http::request::Parts) -> Option<IpAddr> {
    parts.extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

impl Probe {
    /// The usual paths of the three endpoints, to exempt from admission:
    /// `/health`, `/ready` and [`DrainRequest::DEFAULT_PATH`](crate::prestop::DrainRequest::DEFAULT_PATH).
    pub const PATHS: [&'static str; 3] = [
        "/health",
        "/ready",
        crate::prestop::DrainRequest::DEFAULT_PATH,
    ];

    fn new(gate: Gate, kind: ProbeKind) -> Self {
        Self {
            gate,
            kind,
            peer: Arc::new(socket_addr_peer),
        }
    }

    /// `GET /health`: 200 in every state.
    pub fn health(gate: Gate) -> Self {
        Self::new(gate, ProbeKind::Health)
    }

    /// `GET /ready`: 200 while serving, 503 while starting or draining.
    pub fn ready(gate: Gate) -> Self {
        Self::new(gate, ProbeKind::Ready)
    }

    /// `POST /__internal/drain`: begins the drain for a loopback caller
    /// that forwards no one else's request; 403 for anyone else. It needs
    /// the peer address: by default a `SocketAddr` request extension, or
    /// where [`peer_from`](Self::peer_from) says (axum: `ConnectInfo`).
    /// Without one it refuses.
    pub fn drain(gate: Gate) -> Self {
        Self::new(gate, ProbeKind::Drain)
    }

    /// Where the peer address comes from.
    #[must_use]
    pub fn peer_from(
        self,
        peer: impl Fn(&http::request::Parts) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        Self {
            peer: Arc::new(peer),
            ..self
        }
    }
}

impl<B> Service<Request<B>> for Probe {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let reply = match self.kind {
            ProbeKind::Health => self.gate.health_answer(),
            ProbeKind::Ready => self.gate.ready_answer(),
            ProbeKind::Drain => {
                let (parts, _) = req.into_parts();
                let peer = (self.peer)(&parts);
                self.gate.drain_answer(
                    peer,
                    parts
                        .headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_bytes())),
                )
            }
        };
        std::future::ready(Ok(answer(reply)))
    }
}
