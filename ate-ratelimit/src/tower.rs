//! A tower [`Layer`] that checks each request against [`Limits`]
//! (feature `tower`): in process or in Redis, whichever the service set up.
//!
//! ```
//! use std::net::SocketAddr;
//! use std::num::NonZeroU32;
//! use std::sync::Arc;
//! use ate_ratelimit::tower::{Caller, RateLimitLayer};
//! use ate_ratelimit::{LimitSet, Limits, MonotonicClock, Policy, Quota};
//! use axum::{Router, extract::ConnectInfo, routing::post};
//!
//! let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
//! let notify = set.add("notify", Quota::per_minute(NonZeroU32::new(150).unwrap()));
//! let bucket = set.add("requests", Quota::per_minute(NonZeroU32::new(600).unwrap()));
//! let layer = RateLimitLayer::new(Arc::new(Limits::local(set)))
//!     .route("/notify", &[notify, bucket], NonZeroU32::MIN)
//!     .caller(Caller::peer().peer_from(|parts: &axum::http::request::Parts| {
//!         parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())
//!     }));
//! let app: Router = Router::new()
//!     .route("/notify", post(|| async { "sent" }))
//!     .layer(layer);
//! // serve with app.into_make_service_with_connect_info::<SocketAddr>()
//! ```

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName};
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::http::Head;
use crate::http::rules::{Refusal, Rules, Verdict};
pub use crate::http::{Checked, KeyError};
use crate::{Combined, LimitId, Limits, MonotonicClock};

/// Who a request is, for the limits, read from an `http` request head.
pub type Caller = crate::http::Caller<Parts>;

impl Head for Parts {
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .get_all(name)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect()
    }

    /// A `SocketAddr` request extension (hyper users insert it; axum's is
    /// `ConnectInfo<SocketAddr>`: see [`Caller::peer_from`]).
    fn peer(&self) -> Option<IpAddr> {
        self.extensions.get::<SocketAddr>().map(SocketAddr::ip)
    }
}

/// Checks requests against named limits, per caller. A request to a route
/// with limits is allowed through (with the `RateLimit-Policy` and
/// `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11 added
/// to the response, and [`Checked`] in the request's extensions), or
/// answered without calling the service: 429 with `Retry-After` and
/// `{"error":"rate_limited","denied_by":[...],"retry_after_secs":N}`; 503
/// `too_many_callers` when a limit's key table is full; 503
/// `rate_limit_store_unavailable` when a shared store cannot answer and
/// the service chose to refuse; 400 naming the problem when the caller
/// cannot be told. Paths with no route pass through unchecked.
#[derive(Clone)]
pub struct RateLimitLayer<C: crate::clock::Clock + Clone = MonotonicClock> {
    // One pointer: the service is cloned for every request in axum.
    config: Arc<Config<C>>,
}

/// A layer's configuration, shared by every clone of its service.
#[derive(Clone)]
struct Config<C: crate::clock::Clock + Clone> {
    rules: Rules<C>,
    caller: Caller,
    /// Whether an allowed request gets [`Checked`] in its extensions.
    checked: bool,
}

impl<C: crate::clock::Clock + Clone> std::fmt::Debug for RateLimitLayer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("rules", &self.config.rules)
            .field("caller", &self.config.caller)
            .field("checked", &self.config.checked)
            .finish()
    }
}

impl<C: crate::clock::Clock + Clone> RateLimitLayer<C> {
    /// A layer over `limits`, with no routes yet and the peer as caller.
    pub fn new(limits: Arc<Limits<C>>) -> Self {
        Self {
            config: Arc::new(Config {
                rules: Rules::new(limits),
                caller: Caller::peer(),
                checked: true,
            }),
        }
    }

    /// Requests to `path` check the limits `ids`, each request weighing
    /// `cost` attempts (a heavier route weighs more). `path` is matched
    /// exactly against the request's path as received, which is what
    /// axum's router matches too (it neither decodes nor folds the path:
    /// `/%6Eotify` or `/notify/` are a 404 there). Under another router
    /// that does, bind the limits to its routes with [`limit`](Self::limit)
    /// on each route instead.
    ///
    /// # Panics
    ///
    /// If an id is not one of the limits' set, or `cost` exceeds one of
    /// those limits (a route that could never be allowed): configuration
    /// errors, found when the layer is built.
    #[must_use]
    pub fn route(mut self, path: &str, ids: &[LimitId], cost: NonZeroU32) -> Self {
        Arc::make_mut(&mut self.config)
            .rules
            .route(Some(path), ids, cost);
        self
    }

    /// Every request the layer sees checks the limits `ids`, each weighing
    /// `cost`: for a layer on one route of the framework's router (axum:
    /// `post(handler).layer(layer)`), so the limits bind to what the
    /// router matched, however the URL was spelled, with no path table of
    /// the layer's own.
    ///
    /// # Panics
    ///
    /// As for [`route`](Self::route).
    #[must_use]
    pub fn limit(mut self, ids: &[LimitId], cost: NonZeroU32) -> Self {
        Arc::make_mut(&mut self.config).rules.route(None, ids, cost);
        self
    }

    /// The limits `ids` run in shadow mode: they decide, count and report
    /// (the `RateLimit` fields, `on_decision`, [`Checked::shadow_denied`])
    /// but never refuse, so a new limit can be rolled out and watched
    /// before it bites. A request another limit refuses is still refused.
    ///
    /// # Panics
    ///
    /// If an id is not one of the limits' set.
    #[must_use]
    pub fn shadow(mut self, ids: &[LimitId]) -> Self {
        Arc::make_mut(&mut self.config).rules.shadow(ids);
        self
    }

    /// Calls `hook` with the caller's key and the decision of every check
    /// (allowed or denied): for metrics, logs or an audit trail.
    #[must_use]
    pub fn on_decision(
        mut self,
        hook: impl Fn(&str, &Combined<'_>) + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.config).rules.on_decision(hook);
        self
    }

    /// How a request's caller is told (default: [`Caller::peer`]).
    #[must_use]
    pub fn caller(mut self, caller: Caller) -> Self {
        Arc::make_mut(&mut self.config).caller = caller;
        self
    }

    /// Allowed requests go through without [`Checked`] in their
    /// extensions: one allocation and one map insert less per request,
    /// for services whose handlers never read it (the response still
    /// carries the `RateLimit` fields; `on_decision` still sees every
    /// decision).
    #[must_use]
    pub fn without_checked(mut self) -> Self {
        Arc::make_mut(&mut self.config).checked = false;
        self
    }
}

impl<S, C: crate::clock::Clock + Clone> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimit<S, C>;

    fn layer(&self, inner: S) -> RateLimit<S, C> {
        RateLimit {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around yours.
#[derive(Clone)]
pub struct RateLimit<S, C: crate::clock::Clock + Clone = MonotonicClock> {
    inner: S,
    layer: RateLimitLayer<C>,
}

impl<S, C: crate::clock::Clock + Clone> std::fmt::Debug for RateLimit<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

/// The response keeps the service's body type (axum's `Body`, hyper's
/// `Full<Bytes>`, ...), so a framework that boxes every other body type
/// does not box it again; the layer's own answers are built with
/// `ResBody::from(Bytes)`.
impl<S, C, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    C: crate::clock::Clock + Clone + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: From<Bytes>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let config = &self.layer.config;
        let Some(at) = config.rules.find(req.uri().path()) else {
            return ResponseFuture::inner(self.inner.call(req), None);
        };
        let (mut parts, body) = req.into_parts();
        let key = config.caller.key_text(&parts);
        // In process, decided here: no boxed future on the hot path.
        let key = match config.rules.check_now(at, key) {
            Ok(Verdict::Allow {
                checked,
                policy,
                ratelimit,
            }) => {
                if config.checked {
                    parts.extensions.insert(checked);
                }
                let call = self.inner.call(Request::from_parts(parts, body));
                return ResponseFuture::inner(call, Some((policy, ratelimit)));
            }
            Ok(Verdict::Refuse(refusal)) => return ResponseFuture::ready(respond(refusal)),
            Err(key) => key,
        };
        // A shared store answers later. The service that was polled ready
        // serves this request; a clone takes its place for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = self.layer.config.clone();
        ResponseFuture::shared(Box::pin(async move {
            match config.rules.check(at, key).await {
                Verdict::Allow {
                    checked,
                    policy,
                    ratelimit,
                } => {
                    if config.checked {
                        parts.extensions.insert(checked);
                    }
                    let response = inner.call(Request::from_parts(parts, body)).await?;
                    Ok(with_fields(response, policy, ratelimit))
                }
                Verdict::Refuse(refusal) => Ok(respond(refusal)),
            }
        }))
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    #[project = FutureProj]
    enum FutureKind<F, B, E> {
        Inner { #[pin] call: F, fields: Option<(Bytes, Bytes)> },
        Ready { response: Option<Response<B>> },
        Shared { call: BoxFuture<Result<Response<B>, E>> },
    }
}

pin_project! {
    /// The response future of [`RateLimit`]: the service's call (in
    /// process, decided before it), the layer's own answer, or a shared
    /// store's check and then the call.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: FutureKind<F, B, E>,
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            FutureKind::Inner { .. } => "inner",
            FutureKind::Ready { .. } => "ready",
            FutureKind::Shared { .. } => "shared",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    fn inner(call: F, fields: Option<(Bytes, Bytes)>) -> Self {
        Self {
            kind: FutureKind::Inner { call, fields },
        }
    }

    fn ready(response: Response<B>) -> Self {
        Self {
            kind: FutureKind::Ready {
                response: Some(response),
            },
        }
    }

    fn shared(call: BoxFuture<Result<Response<B>, E>>) -> Self {
        Self {
            kind: FutureKind::Shared { call },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            FutureProj::Inner { call, fields } => {
                let response = std::task::ready!(call.poll(cx))?;
                Poll::Ready(Ok(match fields.take() {
                    Some((policy, ratelimit)) => with_fields(response, policy, ratelimit),
                    None => response,
                }))
            }
            // Polled after it completed: it has nothing more to give.
            FutureProj::Ready { response } => response
                .take()
                .map_or(Poll::Pending, |r| Poll::Ready(Ok(r))),
            FutureProj::Shared { call } => call.as_mut().poll(cx),
        }
    }
}

/// `response` with the `RateLimit-Policy` and `RateLimit` fields.
fn with_fields<B>(mut response: Response<B>, policy: Bytes, ratelimit: Bytes) -> Response<B> {
    let headers = response.headers_mut();
    for (name, value) in [(RATELIMIT_POLICY, policy), (RATELIMIT, ratelimit)] {
        // Empty: the route has shadow limits alone, nothing to announce.
        if value.is_empty() {
            continue;
        }
        // Both are written from visible ASCII: the check cannot fail.
        if let Ok(value) = HeaderValue::from_maybe_shared(value) {
            headers.insert(name, value);
        }
    }
    response
}

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static(crate::http::RATELIMIT_POLICY);
const RATELIMIT: HeaderName = HeaderName::from_static(crate::http::RATELIMIT);

fn header_value(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static(""))
}

fn respond<B: From<Bytes>>(refusal: Refusal) -> Response<B> {
    let mut response = Response::new(B::from(Bytes::from(refusal.body)));
    *response.status_mut() =
        StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in refusal.headers {
        headers.insert(HeaderName::from_static(name), header_value(&value));
    }
    response
}
