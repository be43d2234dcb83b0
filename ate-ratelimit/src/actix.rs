//! An Actix Web middleware that checks each request against [`Limits`]
//! (feature `actix`): in process or in Redis, whichever the service set
//! up. The same rules and answers as [`tower`](https://docs.rs/ate-ratelimit)'s
//! `RateLimitLayer`.
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::sync::Arc;
//! use actix_web::{App, web};
//! use ate_ratelimit::actix::{Caller, RateLimit};
//! use ate_ratelimit::{LimitSet, Limits, MonotonicClock, Policy, Quota};
//!
//! let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
//! let notify = set.add("notify", Quota::per_minute(NonZeroU32::new(150).unwrap()));
//! let limits = Arc::new(Limits::local(set));
//! let app = move || {
//!     App::new()
//!         .wrap(RateLimit::new(limits.clone()).route("/notify", &[notify], NonZeroU32::MIN))
//!         .route("/notify", web::post().to(|| async { "sent" }))
//! };
//! # let _ = app;
//! ```

use std::future::{Future, Ready, ready};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};

use crate::http::Head;
use crate::http::rules::{Refusal, Rules, Verdict};
pub use crate::http::{Checked, KeyError};
use crate::http::{RATELIMIT, RATELIMIT_POLICY};
use crate::{Combined, LimitId, Limits, MonotonicClock};

/// Who a request is, for the limits, read from an Actix request.
pub type Caller = crate::http::Caller<HttpRequest>;

impl Head for HttpRequest {
    fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.headers()
            .get_all(name)
            .map(HeaderValue::as_bytes)
            .collect()
    }

    /// The connection's peer address.
    fn peer(&self) -> Option<IpAddr> {
        self.peer_addr().map(|a| a.ip())
    }
}

/// Checks requests against named limits, per caller: the Actix
/// counterpart of the tower `RateLimitLayer`, with the same answers (429
/// with `Retry-After` and a JSON body naming the limits that denied; the
/// `RateLimit-Policy` and `RateLimit` fields on every limited response;
/// 503 when a key table is full or a refusing store is away; 400 when the
/// caller cannot be told). [`Checked`] is in an allowed request's
/// extensions (`web::ReqData<Checked>`).
#[derive(Clone)]
pub struct RateLimit<C: crate::clock::Clock + Clone = MonotonicClock> {
    rules: Arc<Rules<C>>,
    caller: Caller,
    /// Whether an allowed request gets [`Checked`] in its extensions.
    checked: bool,
}

impl<C: crate::clock::Clock + Clone> std::fmt::Debug for RateLimit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("rules", &self.rules)
            .field("caller", &self.caller)
            .field("checked", &self.checked)
            .finish()
    }
}

impl<C: crate::clock::Clock + Clone> RateLimit<C> {
    /// A middleware over `limits`, with no routes yet and the peer as
    /// caller.
    pub fn new(limits: Arc<Limits<C>>) -> Self {
        Self {
            rules: Arc::new(Rules::new(limits)),
            caller: Caller::peer(),
            checked: true,
        }
    }

    /// Requests to `path` check the limits `ids`, each request weighing
    /// `cost` attempts. `path` is matched against the path Actix routes
    /// by (percent-decoded as its router decodes it: `/%6Eotify` is
    /// `/notify`), exactly; put `NormalizePath`, if used, outside this
    /// middleware. A limit bound to a resource with [`limit`](Self::limit)
    /// needs no path at all.
    ///
    /// # Panics
    ///
    /// If an id is not one of the limits' set, or `cost` exceeds one of
    /// those limits: configuration errors, found when the middleware is
    /// built.
    #[must_use]
    pub fn route(mut self, path: &str, ids: &[LimitId], cost: NonZeroU32) -> Self {
        Arc::make_mut(&mut self.rules).route(Some(path), ids, cost);
        self
    }

    /// Every request the middleware sees checks the limits `ids`, each
    /// weighing `cost`: for `.wrap()` on one resource or scope, so the
    /// limits bind to what Actix routed there, however the URL was
    /// spelled, with no path table of the middleware's own.
    ///
    /// # Panics
    ///
    /// As for [`route`](Self::route).
    #[must_use]
    pub fn limit(mut self, ids: &[LimitId], cost: NonZeroU32) -> Self {
        Arc::make_mut(&mut self.rules).route(None, ids, cost);
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
        Arc::make_mut(&mut self.rules).shadow(ids);
        self
    }

    /// Calls `hook` with the caller's key and the decision of every check
    /// (allowed or denied): for metrics, logs or an audit trail.
    #[must_use]
    pub fn on_decision(
        mut self,
        hook: impl Fn(&str, &Combined<'_>) + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.rules).on_decision(hook);
        self
    }

    /// How a request's caller is told (default: [`Caller::peer`]).
    #[must_use]
    pub fn caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// Allowed requests go through without [`Checked`] in their
    /// extensions: one allocation and one map insert less per request,
    /// for services whose handlers never read it (the response still
    /// carries the `RateLimit` fields; `on_decision` still sees every
    /// decision).
    #[must_use]
    pub fn without_checked(mut self) -> Self {
        self.checked = false;
        self
    }
}

impl<S, B, C> Transform<S, ServiceRequest> for RateLimit<C>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    C: crate::clock::Clock + Clone + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = RateLimitMiddleware<S, C>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service: Rc::new(service),
            layer: self.clone(),
        }))
    }
}

/// The service [`RateLimit`] wraps around yours.
pub struct RateLimitMiddleware<S, C: crate::clock::Clock + Clone = MonotonicClock> {
    service: Rc<S>,
    layer: RateLimit<C>,
}

impl<S, C: crate::clock::Clock + Clone> std::fmt::Debug for RateLimitMiddleware<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitMiddleware")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

type LocalFuture<T> = Pin<Box<dyn Future<Output = T>>>;

impl<S, B, C> Service<ServiceRequest> for RateLimitMiddleware<S, C>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    C: crate::clock::Clock + Clone + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalFuture<Result<Self::Response, Self::Error>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        // The path the router matches (requoted: percent-encoded
        // unreserved bytes decoded), not the raw one.
        let Some(at) = self.layer.rules.find(req.match_info().as_str()) else {
            let call = self.service.call(req);
            return Box::pin(async move { Ok(call.await?.map_into_left_body()) });
        };
        let key = self.layer.caller.key_text(req.request());
        let rules = self.layer.rules.clone();
        let service = self.service.clone();
        let with_checked = self.layer.checked;
        Box::pin(async move {
            let verdict = match rules.check_now(at, key) {
                Ok(verdict) => verdict,
                Err(key) => rules.check(at, key).await,
            };
            match verdict {
                Verdict::Allow {
                    checked,
                    policy,
                    ratelimit,
                } => {
                    if with_checked {
                        req.extensions_mut().insert(checked);
                    }
                    let mut response = service.call(req).await?;
                    let headers = response.headers_mut();
                    for (name, value) in [(RATELIMIT_POLICY, policy), (RATELIMIT, ratelimit)] {
                        // Empty: shadow limits alone, nothing to announce.
                        if value.is_empty() {
                            continue;
                        }
                        if let Ok(value) = HeaderValue::from_maybe_shared(value) {
                            headers.insert(HeaderName::from_static(name), value);
                        }
                    }
                    Ok(response.map_into_left_body())
                }
                Verdict::Refuse(refusal) => {
                    Ok(req.into_response(respond(refusal)).map_into_right_body())
                }
            }
        })
    }
}

fn respond(refusal: Refusal) -> HttpResponse {
    let mut builder = HttpResponse::build(
        StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
    );
    builder.insert_header((CONTENT_TYPE, "application/json"));
    for (name, value) in refusal.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            builder.insert_header((HeaderName::from_static(name), value));
        }
    }
    builder.body(refusal.body)
}
