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
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::http::{KeyError, TrustedProxies, client_ip, policy_field, ratelimit_field};
use crate::{Combined, Decision, LimitId, Limits, MonotonicClock, Scope};

type PeerFn = Arc<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;
type KeyFn = Arc<dyn Fn(&Parts) -> Result<String, KeyError> + Send + Sync>;

/// Who a request is, for the limits: its key.
#[derive(Clone)]
pub struct Caller {
    kind: CallerKind,
    peer: PeerFn,
}

#[derive(Clone)]
enum CallerKind {
    Peer,
    ClientIp(TrustedProxies),
    Header(HeaderName),
    Custom(KeyFn),
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            CallerKind::Peer => "peer".to_owned(),
            CallerKind::ClientIp(t) => format!("client ip behind {t:?}"),
            CallerKind::Header(h) => format!("header {h}"),
            CallerKind::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("Caller").field("kind", &kind).finish()
    }
}

/// The peer from a `SocketAddr` request extension (hyper users insert it;
/// axum's is `ConnectInfo<SocketAddr>`: see [`Caller::peer_from`]).
fn socket_addr_peer(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<std::net::SocketAddr>()
        .map(std::net::SocketAddr::ip)
}

impl Default for Caller {
    fn default() -> Self {
        Self::peer()
    }
}

impl Caller {
    /// The peer's IP address (the default). Behind a proxy every client
    /// shares the proxy's address: use [`client_ip`](Self::client_ip).
    pub fn peer() -> Self {
        Self {
            kind: CallerKind::Peer,
            peer: Arc::new(socket_addr_peer),
        }
    }

    /// The client's IP behind `trusted` proxies
    /// ([`client_ip`](crate::http::client_ip())): the peer, unless it is a
    /// trusted proxy; then the rightmost `X-Forwarded-For` / `Forwarded`
    /// entry that is not one. Never the client-controlled leftmost entry
    /// on its own.
    pub fn client_ip(trusted: TrustedProxies) -> Self {
        Self {
            kind: CallerKind::ClientIp(trusted),
            peer: Arc::new(socket_addr_peer),
        }
    }

    /// A header's value (an API key): once, 1-256 visible ASCII
    /// characters, else 400.
    pub fn header(name: HeaderName) -> Self {
        Self {
            kind: CallerKind::Header(name),
            peer: Arc::new(socket_addr_peer),
        }
    }

    /// Your own rule (say, the authenticated account).
    pub fn custom(
        key: impl Fn(&Parts) -> Result<String, KeyError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind: CallerKind::Custom(Arc::new(key)),
            peer: Arc::new(socket_addr_peer),
        }
    }

    /// Where the peer address comes from (axum: its `ConnectInfo`).
    #[must_use]
    pub fn peer_from(
        self,
        peer: impl Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        Self {
            peer: Arc::new(peer),
            ..self
        }
    }

    /// The key of the request whose head is `parts`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the request does not say who it is as required.
    pub fn key(&self, parts: &Parts) -> Result<String, KeyError> {
        let peer = || (self.peer)(parts).ok_or(KeyError::NoPeer);
        match &self.kind {
            CallerKind::Peer => Ok(peer()?.to_string()),
            CallerKind::ClientIp(trusted) => {
                let values = |name: &str| {
                    parts
                        .headers
                        .get_all(name)
                        .iter()
                        .map(HeaderValue::as_bytes)
                        .collect::<Vec<_>>()
                };
                let ip = client_ip(
                    peer()?,
                    values("x-forwarded-for"),
                    values("forwarded"),
                    trusted,
                )?;
                Ok(ip.to_string())
            }
            CallerKind::Header(name) => {
                let mut all = parts.headers.get_all(name).iter();
                match (all.next(), all.next()) {
                    (Some(v), None)
                        if (1..=256).contains(&v.len())
                            && v.as_bytes().iter().all(|b| b.is_ascii_graphic()) =>
                    {
                        Ok(String::from_utf8_lossy(v.as_bytes()).into_owned())
                    }
                    _ => Err(KeyError::BadHeader {
                        header: name.to_string(),
                    }),
                }
            }
            CallerKind::Custom(key) => key(parts),
        }
    }
}

/// Which limits a route checks, and what one request costs.
#[derive(Debug, Clone)]
struct Route {
    path: Box<str>,
    ids: Box<[LimitId]>,
    cost: NonZeroU32,
    /// The `RateLimit-Policy` field for these limits.
    policy: HeaderValue,
}

/// Checks requests against named limits, per caller. A request to a route
/// with limits is allowed through (with the `RateLimit-Policy` and
/// `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11 added
/// to the response), or answered without calling the service: 429 with
/// `Retry-After` and `{"error":"rate_limited","denied_by":[...],
/// "retry_after_secs":N}`; 503 `too_many_callers` when a limit's key table
/// is full; 503 `rate_limit_store_unavailable` when a shared store cannot
/// answer and the service chose to refuse; 400 naming the problem when the
/// caller cannot be told. Paths with no route pass through unchecked.
#[derive(Clone)]
pub struct RateLimitLayer<C: crate::Clock + Clone = MonotonicClock> {
    limits: Arc<Limits<C>>,
    routes: Arc<[Route]>,
    caller: Caller,
}

impl<C: crate::Clock + Clone> std::fmt::Debug for RateLimitLayer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("routes", &self.routes)
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl<C: crate::Clock + Clone> RateLimitLayer<C> {
    /// A layer over `limits`, with no routes yet and the peer as caller.
    pub fn new(limits: Arc<Limits<C>>) -> Self {
        Self {
            limits,
            routes: Arc::from(Vec::new()),
            caller: Caller::peer(),
        }
    }

    /// Requests to `path` (an exact match) check the limits `ids`, each
    /// request weighing `cost` attempts (a heavier route weighs more).
    ///
    /// # Panics
    ///
    /// If an id is not one of the limits' set, or `cost` exceeds one of
    /// those limits (a route that could never be allowed): configuration
    /// errors, found when the layer is built.
    #[must_use]
    pub fn route(mut self, path: &str, ids: &[LimitId], cost: NonZeroU32) -> Self {
        let set = self.limits.set();
        for &id in ids {
            let limit = set.limiter(id).quota().limit();
            assert!(
                cost <= limit,
                "route {path}: a cost of {cost} can never fit limit {:?} of {limit}",
                set.name(id)
            );
        }
        let policy = policy_field(
            ids.iter()
                .map(|&id| (set.name(id), set.limiter(id).quota())),
        );
        let mut routes: Vec<Route> = self.routes.to_vec();
        routes.push(Route {
            path: path.into(),
            ids: ids.into(),
            cost,
            policy: HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("")),
        });
        self.routes = Arc::from(routes);
        self
    }

    /// How a request's caller is told (default: [`Caller::peer`]).
    #[must_use]
    pub fn caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }
}

impl<S, C: crate::Clock + Clone> Layer<S> for RateLimitLayer<C> {
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
pub struct RateLimit<S, C: crate::Clock + Clone = MonotonicClock> {
    inner: S,
    layer: RateLimitLayer<C>,
}

impl<S, C: crate::Clock + Clone> std::fmt::Debug for RateLimit<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

/// The response body: the service's, or the layer's own answer.
pub type RateLimitBody<B> = EitherBody<B>;

impl<S, C, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    C: crate::Clock + Clone + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes>,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready serves this request; a clone
        // takes its place for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let path = req.uri().path();
        let Some(route) = self.layer.routes.iter().find(|r| *r.path == *path).cloned() else {
            return Box::pin(async move { Ok(inner.call(req).await?.map(EitherBody::inner)) });
        };
        let layer = self.layer.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let caller = match layer.caller.key(&parts) {
                Ok(caller) => caller,
                Err(e) => return Ok(refusal(400, &json_error(&e.to_string()), None, None)),
            };
            let decision = layer.limits.check_n(&route.ids, &caller, route.cost).await;
            let decision = match decision {
                Ok(d) => d,
                // Not reached: `route` refuses such a cost when built.
                Err(e) => return Ok(refusal(500, &json_error(&e.to_string()), None, None)),
            };
            let fields = (route.policy.clone(), field(&ratelimit_field(&decision)));
            if decision.is_allowed() {
                let response = inner.call(Request::from_parts(parts, body)).await?;
                let mut response = response.map(EitherBody::inner);
                let headers = response.headers_mut();
                headers.insert(RATELIMIT_POLICY, fields.0);
                headers.insert(RATELIMIT, fields.1);
                return Ok(response);
            }
            Ok(denied(&decision, fields))
        })
    }
}

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

fn field(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static(""))
}

fn json_error(message: &str) -> String {
    let escaped: String = message
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect();
    format!(r#"{{"error":"{escaped}"}}"#)
}

/// The answer to a request a limit turned away.
fn denied<B>(
    decision: &Combined<'_>,
    fields: (HeaderValue, HeaderValue),
) -> Response<EitherBody<B>> {
    let secs = decision.retry_after_secs().unwrap_or(1);
    let table_full = decision
        .decisions()
        .iter()
        .any(|(_, d)| matches!(d, Decision::KeyTableFull { .. }));
    let (status, error) = if decision.scope() == Scope::Unavailable {
        (503, "rate_limit_store_unavailable")
    } else if table_full {
        (503, "too_many_callers")
    } else {
        (429, "rate_limited")
    };
    let denied_by: Vec<String> = decision
        .denied_by()
        .iter()
        .map(|n| format!("\"{}\"", n.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    let body = format!(
        r#"{{"error":"{error}","denied_by":[{}],"retry_after_secs":{secs}}}"#,
        denied_by.join(",")
    );
    refusal(status, &body, Some(secs), Some(fields))
}

fn refusal<B>(
    status: u16,
    body: &str,
    retry_after_secs: Option<u64>,
    fields: Option<(HeaderValue, HeaderValue)>,
) -> Response<EitherBody<B>> {
    let mut response = Response::new(EitherBody::full(Bytes::from(body.to_owned())));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secs) = retry_after_secs {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some((policy, ratelimit)) = fields {
        headers.insert(RATELIMIT_POLICY, policy);
        headers.insert(RATELIMIT, ratelimit);
    }
    response
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// A response body: the service's own, or one the layer wrote.
    pub struct EitherBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

impl<B> std::fmt::Debug for EitherBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("EitherBody::Inner"),
            Kind::Full { data } => f
                .debug_struct("EitherBody::Full")
                .field("data", data)
                .finish(),
        }
    }
}

impl<B> EitherBody<B> {
    fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full { data: Some(data) },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for EitherBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
