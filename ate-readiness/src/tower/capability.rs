//! A route bound to a capability, as tower middleware: while the
//! capability is not ready the route answers 503 with `Retry-After` and a
//! JSON body naming it, and the inner service is not called; other routes
//! serve. One atomic load per request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::{Capabilities, CapabilityError, CapabilityId};

/// Binds the routes it wraps to one capability (axum: a route's own
/// `.layer(...)` or `route_layer`).
///
/// ```
/// use ate_readiness::Capabilities;
/// use ate_readiness::tower::CapabilityLayer;
/// use axum::{Router, routing::post};
///
/// # fn main() -> Result<(), ate_readiness::CapabilityError> {
/// let caps = Capabilities::builder().capability("prompt-bridge").build()?;
/// let app: Router = Router::new().route(
///     "/prompt",
///     post(|| async { "ok" }).layer(CapabilityLayer::new(&caps, "prompt-bridge")?),
/// );
/// # let _ = app; Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CapabilityLayer {
    caps: Capabilities,
    id: CapabilityId,
}

impl CapabilityLayer {
    /// A layer requiring the capability `name` of `caps`.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Unknown`] for a name `caps` does not declare:
    /// a wiring mistake found when the router is built, never at request
    /// time.
    pub fn new(caps: &Capabilities, name: &str) -> Result<Self, CapabilityError> {
        Ok(Self {
            id: caps.id(name)?,
            caps: caps.clone(),
        })
    }
}

impl<S> Layer<S> for CapabilityLayer {
    type Service = RequireCapability<S>;

    fn layer(&self, inner: S) -> RequireCapability<S> {
        RequireCapability {
            inner,
            caps: self.caps.clone(),
            id: self.id,
        }
    }
}

/// The service [`CapabilityLayer`] wraps around yours.
#[derive(Debug, Clone)]
pub struct RequireCapability<S> {
    inner: S,
    caps: Capabilities,
    id: CapabilityId,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequireCapability<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = CapabilityFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        if self.caps.is_ready(self.id) {
            return CapabilityFuture::Inner {
                call: self.inner.call(req),
            };
        }
        let (retry_after, body) = self.caps.refusal(self.id);
        let mut response = Response::new(ResBody::from(body));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
        CapabilityFuture::Refused {
            response: Some(response),
        }
    }
}

pin_project! {
    /// [`RequireCapability`]'s future: the inner call, or the refusal.
    #[project = Proj]
    #[allow(missing_docs)] // the variants say what each holds
    #[derive(Debug)]
    pub enum CapabilityFuture<F, B> {
        /// The capability is ready: the route's own answer.
        Inner { #[pin] call: F },
        /// Not ready: the 503.
        Refused { response: Option<Response<B>> },
    }
}

impl<F, B, E> Future for CapabilityFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Proj::Inner { call } => call.poll(cx),
            Proj::Refused { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                // Polled again after it answered: never (a future is not
                // polled past Ready); pending is the safe answer.
                None => Poll::Pending,
            },
        }
    }
}
