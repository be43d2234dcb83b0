//! The real provider `/invoke` calls when `ATE_PROVIDER_URL` is set: the
//! request body POSTed unchanged, with the client's `Idempotency-Key` and
//! the ledger's fencing token (`Fencing-Token`), over plain HTTP/1.1.
//!
//! What the provider's answer means (`examples/README.md` has the table):
//!
//! - 2xx: a success, its status and body recorded and replayed.
//! - 429, 408, and a 503 with `Retry-After`: the provider says it did not
//!   process the request; a failure before the provider (revivable, 424),
//!   so a retry calls it again (`Call::NotProcessed`).
//! - Any other 4xx: a rejection, recorded and replayed.
//! - No connection (refused, unreachable, connect timeout): nothing was
//!   sent, a failure before the provider (revivable, 424). The connection
//!   is made *before* the try is marked dispatched, so this is known.
//! - Anything once the request may have been sent (a 1xx/3xx/5xx, a reset,
//!   a timeout, an answer over [`MAX_ANSWER_BYTES`]): ambiguous, never run
//!   again (504).
//!
//! Why the connections are kept here rather than in a pooled client
//! (reqwest, hyper-util's): the dispatch rule needs the connection in hand
//! before the dispatch mark, and the mark before the first byte is
//! written. A pooled client connects inside its request call, so a refused
//! connection would only show after the mark, as an ambiguous call never
//! to be run again. hyper's `client::conn` (already built for axum) gives
//! exactly those two steps; this keeps its idle connections, one list per
//! process.

use std::time::Duration;

use ate_ledger::{Call, Dispatch, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;

/// The header that carries the ledger's fencing token
/// ([`ate_ledger::Fence`], `{incarnation:016x}-{token}`).
pub const FENCING_TOKEN: &str = "fencing-token";

/// The largest provider answer recorded (and replayed); a larger one is
/// ambiguous: it was sent and answered, but the answer cannot be kept.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The most idle connections kept.
const MAX_IDLE: usize = 64;

/// Where the provider is: `http://host[:port]/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrl {
    /// `host:port`, to connect to.
    address: String,
    /// The `Host` header.
    authority: String,
    /// The request target (path and query).
    target: String,
}

impl ProviderUrl {
    /// Reads `ATE_PROVIDER_URL`'s value; the error says what is wrong.
    ///
    /// # Errors
    ///
    /// A text naming the problem: not a URL, not `http`, no host, a
    /// fragment or user info.
    pub fn parse(text: &str) -> Result<Self, String> {
        let uri: http::Uri = text
            .parse()
            .map_err(|e| format!("not a URL ({e}); expected http://host[:port]/path"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(
                    "https is not supported: put a TLS sidecar or egress proxy in \
                            front and give its http:// address"
                        .into(),
                );
            }
            _ => return Err("expected http://host[:port]/path".into()),
        }
        let authority = uri
            .authority()
            .ok_or("no host; expected http://host[:port]/path")?;
        if authority.as_str().contains('@') {
            return Err("user info in the URL is not supported".into());
        }
        let host = authority.host();
        if host.is_empty() {
            return Err("no host; expected http://host[:port]/path".into());
        }
        let port = authority.port_u16().unwrap_or(80);
        let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok(Self {
            address: format!("{host}:{port}"),
            authority: authority.as_str().to_owned(),
            target: if target.is_empty() {
                "/".into()
            } else {
                target
            },
        })
    }
}

impl std::fmt::Display for ProviderUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.target)
    }
}

/// The provider over HTTP, with its idle connections.
#[derive(Debug)]
pub struct HttpProvider {
    url: ProviderUrl,
    timeout: Duration,
    idle: Mutex<Vec<Idle>>,
    /// The capability a refused connection marks not ready
    /// (`prompt-bridge`), if wired.
    capability: Option<(ate_readiness::Capabilities, ate_readiness::CapabilityId)>,
}

/// An idle connection.
struct Idle(SendRequest<Full<Bytes>>);

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Idle")
    }
}

impl HttpProvider {
    /// A provider at `url`; each call bounded by `timeout` (to connect, and
    /// from the request to the whole answer).
    pub fn new(url: ProviderUrl, timeout: Duration) -> Self {
        Self {
            url,
            timeout,
            idle: Mutex::new(Vec::new()),
            capability: None,
        }
    }

    /// The provider with capability `id` of `caps` fed by its calls: a
    /// connection it cannot make (a failure before the provider: the
    /// provider is down, or the configuration wrong) marks it not ready.
    /// [`health`](Self::health) marks it ready again.
    #[must_use]
    pub fn feeding(
        mut self,
        caps: ate_readiness::Capabilities,
        id: ate_readiness::CapabilityId,
    ) -> Self {
        self.capability = Some((caps, id));
        self
    }

    /// Asks the provider's health endpoint (`GET path` on its host): `Ok`
    /// for any answer but 401 and 403 (its credentials are refused), the
    /// reason otherwise, a refused or timed-out connection included. For
    /// the service's `prompt-bridge` capability.
    ///
    /// # Errors
    ///
    /// Why the provider cannot be used now (for the capability's reason).
    pub async fn health(&self, path: &str) -> Result<(), String> {
        let mut sender = self.connection().await?;
        let request = http::Request::get(path)
            .header(http::header::HOST, self.url.authority.as_str())
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("bad health path: {e}"))?;
        let asked = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("the provider's health check failed: {e}"))?;
            let status = response.status();
            // Read it whole, so the connection can be kept.
            let _ = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await;
            Ok::<_, String>(status)
        };
        let status = tokio::time::timeout(self.timeout, asked)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer to the provider's health check within {:?}",
                    self.timeout
                ))
            })?;
        self.keep(sender);
        if matches!(status.as_u16(), 401 | 403) {
            return Err(format!(
                "the provider refuses this service's credentials (its health check answered {status})"
            ));
        }
        Ok(())
    }

    /// Where it is.
    pub fn url(&self) -> &ProviderUrl {
        &self.url
    }

    /// An idle connection that can still send, or a new one.
    async fn connection(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        loop {
            let Some(Idle(mut sender)) = self.idle.lock().pop() else {
                break;
            };
            // One the provider closed while idle is dropped here, before
            // anything is marked or sent.
            if !sender.is_closed() && sender.ready().await.is_ok() {
                return Ok(sender);
            }
        }
        self.connect().await
    }

    /// A new connection, within the timeout.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let connect = async {
            let stream = tokio::net::TcpStream::connect(&self.url.address)
                .await
                .map_err(|e| format!("cannot connect to the provider at {}: {e}", self.url))?;
            let _ = stream.set_nodelay(true);
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("cannot open HTTP to the provider at {}: {e}", self.url))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(sender)
        };
        tokio::time::timeout(self.timeout, connect)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no connection to the provider at {} within {:?}",
                    self.url, self.timeout
                ))
            })
    }

    /// The provider call `AsyncLedger::execute` runs: connect, mark the
    /// try dispatched, POST `body` with `idempotency_key` and the fencing
    /// token, and say what the answer means.
    pub async fn call(&self, mut dispatch: Dispatch, idempotency_key: &str, body: Bytes) -> Call {
        let mut sender = match self.connection().await {
            Ok(sender) => sender,
            // Nothing was sent: a retry may run it. The provider's routes
            // close until its health check answers again.
            Err(reason) => {
                if let Some((caps, id)) = &self.capability {
                    caps.set_not_ready(*id, reason.clone());
                }
                return Call::PreProvider(reason);
            }
        };
        let fence = match dispatch.send().await {
            Ok(fence) => fence,
            Err(e) => return Call::PreProvider(format!("not sent: {e}")),
        };
        let request = http::Request::post(self.url.target.as_str())
            .header(http::header::HOST, self.url.authority.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", idempotency_key)
            .header(FENCING_TOKEN, fence.to_string())
            .body(Full::new(body));
        let request = match request {
            Ok(r) => r,
            // The key was checked as visible ASCII; nothing was sent.
            Err(e) => return Call::Ambiguous(format!("cannot build the request: {e}")),
        };
        let exchange = async {
            let response = match sender.try_send_request(request).await {
                Ok(response) => response,
                // A kept connection the provider closed just before the
                // write: hyper hands back the request it never sent, and it
                // goes on a new connection instead.
                Err(mut failed) => {
                    let Some(request) = failed.take_message() else {
                        return Err(format!(
                            "the provider connection failed mid-request: {}",
                            failed.into_error()
                        ));
                    };
                    sender = self.connect().await?;
                    sender
                        .send_request(request)
                        .await
                        .map_err(|e| format!("the provider connection failed mid-request: {e}"))?
                }
            };
            let retry_after = response.headers().contains_key(http::header::RETRY_AFTER);
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| format!("the provider's answer could not be read whole: {e}"))?
                .to_bytes();
            Ok::<_, String>((parts.status, body, retry_after))
        };
        let (status, answer, retry_after) = match tokio::time::timeout(self.timeout, exchange).await
        {
            Ok(Ok(answered)) => answered,
            Ok(Err(reason)) => return Call::Ambiguous(reason),
            Err(_) => {
                return Call::Ambiguous(format!(
                    "no answer from the provider within {:?}",
                    self.timeout
                ));
            }
        };
        self.keep(sender);
        let response = Response::new(status.as_u16(), answer.to_vec());
        let not_processed = matches!(status.as_u16(), 408 | 429)
            || (status == http::StatusCode::SERVICE_UNAVAILABLE && retry_after);
        if not_processed {
            Call::NotProcessed(format!("the provider answered {status}: not processed"))
        } else if status.is_success() {
            Call::Succeeded(response)
        } else if status.is_client_error() {
            Call::Rejected(response)
        } else {
            Call::Ambiguous(format!("the provider answered {status}"))
        }
    }

    /// Keeps a connection that can send again for the next call.
    fn keep(&self, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(Idle(sender));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_url_is_plain_http_with_a_host() {
        let url = ProviderUrl::parse("http://127.0.0.1:9000/charge?x=1").unwrap();
        assert_eq!(url.address, "127.0.0.1:9000");
        assert_eq!(url.authority, "127.0.0.1:9000");
        assert_eq!(url.target, "/charge?x=1");
        assert_eq!(url.to_string(), "http://127.0.0.1:9000/charge?x=1");
        let bare = ProviderUrl::parse("http://provider.internal").unwrap();
        assert_eq!(
            (bare.address.as_str(), bare.target.as_str()),
            ("provider.internal:80", "/")
        );
        for (bad, says) in [
            ("127.0.0.1:9000/charge", "expected http://"),
            ("https://p/charge", "https is not supported"),
            ("ftp://p/x", "expected http://"),
            ("http://user:pw@p/x", "user info"),
            ("not a url at all", "not a URL"),
        ] {
            let e = ProviderUrl::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
