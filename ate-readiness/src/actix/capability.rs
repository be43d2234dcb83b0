//! A resource bound to a capability, as Actix Web middleware: while the
//! capability is not ready it answers 503 with `Retry-After` and a JSON
//! body naming it, and the handler is not called. One atomic load per
//! request.

use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use actix_web::HttpResponse;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use pin_project_lite::pin_project;

use crate::{Capabilities, CapabilityError, CapabilityId};

/// Binds the resource (or scope) it wraps to one capability.
///
/// ```
/// use actix_web::{App, web};
/// use ate_readiness::Capabilities;
/// use ate_readiness::actix::RequireCapability;
///
/// # fn main() -> Result<(), ate_readiness::CapabilityError> {
/// let caps = Capabilities::builder().capability("prompt-bridge").build()?;
/// let require = RequireCapability::new(&caps, "prompt-bridge")?;
/// let app = move || {
///     App::new().service(
///         web::resource("/prompt")
///             .wrap(require.clone())
///             .route(web::post().to(|| async { "ok" })),
///     )
/// };
/// # let _ = app; Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RequireCapability {
    caps: Capabilities,
    id: CapabilityId,
}

impl RequireCapability {
    /// Middleware requiring the capability `name` of `caps`.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Unknown`] for a name `caps` does not declare.
    pub fn new(caps: &Capabilities, name: &str) -> Result<Self, CapabilityError> {
        Ok(Self {
            id: caps.id(name)?,
            caps: caps.clone(),
        })
    }
}

impl<S, B> Transform<S, ServiceRequest> for RequireCapability
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = RequireCapabilityMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RequireCapabilityMiddleware {
            service: Rc::new(service),
            layer: self.clone(),
        }))
    }
}

/// The service [`RequireCapability`] wraps around yours.
#[derive(Debug)]
pub struct RequireCapabilityMiddleware<S> {
    service: Rc<S>,
    layer: RequireCapability,
}

impl<S, B> Service<ServiceRequest> for RequireCapabilityMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = RequireFuture<S::Future, B>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let RequireCapability { caps, id } = &self.layer;
        if caps.is_ready(*id) {
            return RequireFuture::Inner {
                call: self.service.call(req),
            };
        }
        let (retry_after, body) = caps.refusal(*id);
        let refused = HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
            .insert_header((RETRY_AFTER, HeaderValue::from(retry_after)))
            .insert_header((CONTENT_TYPE, HeaderValue::from_static("application/json")))
            .body(body);
        RequireFuture::Refused {
            response: Some(req.into_response(refused).map_into_right_body()),
        }
    }
}

pin_project! {
    /// [`RequireCapabilityMiddleware`]'s future: the handler's answer, or
    /// the refusal.
    #[project = Proj]
    #[allow(missing_docs)] // the variants say what each holds
    pub enum RequireFuture<F, B> {
        /// Ready: the handler's answer.
        Inner { #[pin] call: F },
        /// Not ready: the 503.
        Refused { response: Option<ServiceResponse<EitherBody<B>>> },
    }
}

impl<F, B> std::fmt::Debug for RequireFuture<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Inner { .. } => "RequireFuture::Inner",
            Self::Refused { .. } => "RequireFuture::Refused",
        })
    }
}

impl<F, B> Future for RequireFuture<F, B>
where
    F: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
{
    type Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Proj::Inner { call } => call.poll(cx).map_ok(ServiceResponse::map_into_left_body),
            Proj::Refused { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                None => Poll::Pending,
            },
        }
    }
}
