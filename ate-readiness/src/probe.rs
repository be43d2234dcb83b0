//! What `/health`, `/ready` and the drain endpoint answer, as plain status
//! codes and small JSON bodies any framework can send.

use std::net::IpAddr;

use crate::Gate;
use crate::gate::State;
use crate::peer::{is_forwarding_header, is_loopback_peer};
use crate::token::bearer;

/// A probe's or the drain endpoint's answer: a status and a small JSON
/// body ([`CONTENT_TYPE`](Self::CONTENT_TYPE)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: String,
}

impl Answer {
    /// The body's media type.
    pub const CONTENT_TYPE: &'static str = "application/json";

    fn new(status: u16, body: String) -> Self {
        Self { status, body }
    }
}

fn state_name(state: State) -> &'static str {
    match state {
        State::Starting => "starting",
        State::Serving => "serving",
        State::Draining => "draining",
    }
}

impl Gate {
    /// `GET /health` (liveness): 200 `{"status":"alive"}` in every state.
    /// Point the liveness probe and the load balancer's health check here,
    /// never at `/ready`: a draining pod is alive.
    pub fn health_answer(&self) -> Answer {
        Answer::new(self.liveness_status(), r#"{"status":"alive"}"#.to_owned())
    }

    /// `GET /ready` (readiness): 200 while serving, 503 while starting or
    /// draining, with the state: `{"ready":false,"state":"draining"}`.
    ///
    /// ```
    /// use ate_readiness::Gate;
    ///
    /// let gate = Gate::builder().starting().build();
    /// let answer = gate.ready_answer();
    /// assert_eq!(answer.status, 503);
    /// assert_eq!(answer.body, r#"{"ready":false,"state":"starting"}"#);
    /// ```
    ///
    /// With [capabilities](crate::GateBuilder::capabilities), a required
    /// one that is not ready makes it 503 too, and is named:
    /// `{"ready":false,"state":"serving","not_ready":["disk"]}`.
    pub fn ready_answer(&self) -> Answer {
        let status = self.readiness_status();
        let not_ready = self
            .capabilities()
            .map(crate::Capabilities::required_not_ready)
            .unwrap_or_default();
        let mut body = format!(
            r#"{{"ready":{},"state":"{}""#,
            status == 200,
            state_name(self.state())
        );
        if !not_ready.is_empty() {
            let names: Vec<String> = not_ready.iter().map(|n| format!("\"{n}\"")).collect();
            body.push_str(&format!(r#","not_ready":[{}]"#, names.join(",")));
        }
        body.push('}');
        Answer::new(status, body)
    }

    /// The drain endpoint (`POST /__internal/drain`, which the preStop
    /// hook's [`DrainRequest`](crate::prestop::DrainRequest) calls). It
    /// begins the drain and answers 200
    /// `{"started":true,"draining_since":"2026-...Z"}` (`started` is false
    /// for a drain already under way) only for a request that passes both
    /// fences:
    ///
    /// 1. it presents the gate's secret ([`GateBuilder::drain_token`](crate::GateBuilder::drain_token)) as
    ///    `Authorization: Bearer SECRET`, in exactly one such header;
    /// 2. it comes from a loopback peer that forwards no one else's request
    ///    ([`is_local_caller`](crate::peer::is_local_caller)).
    ///
    /// Anyone else gets 403 saying which fence refused it (never echoing
    /// what was sent), and nothing changes. A gate without a secret refuses
    /// every request: the drain then begins on SIGTERM only.
    ///
    /// The secret is the fence that holds: an edge on loopback (a sidecar,
    /// an ingress on the node, HAProxy or nginx proxying with no
    /// forwarding header) may pass an outsider's request with headers no
    /// list knows, and a pod that drains never comes back. Never map the
    /// drain path through a Service or an ingress all the same.
    ///
    /// `headers` are the request's (name, value) pairs.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use ate_readiness::{DrainToken, Gate};
    ///
    /// # fn main() -> Result<(), ate_readiness::TokenError> {
    /// let token = DrainToken::generate()?;
    /// let gate = Gate::builder().drain_token(token.clone()).build();
    /// let loopback = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    /// // No secret: refused, even from loopback.
    /// assert_eq!(gate.drain_answer(loopback, []).status, 403);
    /// let bearer = format!("Bearer {}", token.secret());
    /// let hook = gate.drain_answer(loopback, [("authorization", bearer.as_bytes())]);
    /// assert_eq!(hook.status, 200);
    /// assert!(gate.is_draining());
    /// # Ok(())
    /// # }
    /// ```
    pub fn drain_answer<'h>(
        &self,
        peer: Option<IpAddr>,
        headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    ) -> Answer {
        let refuse = |why: &str| Answer::new(403, format!(r#"{{"error":"{why}"}}"#));
        if !peer.is_some_and(is_loopback_peer) {
            return refuse("drain is allowed from loopback only");
        }
        let mut forwarded = false;
        let mut authorizations = 0usize;
        let mut presented: Option<&[u8]> = None;
        for (name, value) in headers {
            forwarded |= is_forwarding_header(name);
            if name.eq_ignore_ascii_case("authorization") {
                authorizations += 1;
                presented = bearer(value);
            }
        }
        if forwarded {
            return refuse(
                "drain is allowed from loopback only, not through a proxy (a forwarding header was present)",
            );
        }
        let Some(token) = self.drain_token() else {
            return refuse(
                "no drain token is set on this gate, so the drain endpoint refuses every request; SIGTERM still drains",
            );
        };
        match presented {
            Some(secret) if authorizations == 1 && token.matches(secret) => {
                let d = self.begin_drain();
                Answer::new(
                    200,
                    format!(
                        r#"{{"started":{},"draining_since":"{}"}}"#,
                        d.started(),
                        d.since().to_rfc3339()
                    ),
                )
            }
            _ => refuse(
                "drain needs this process's drain token as Authorization: Bearer (the preStop hook reads it from the file the service wrote at start)",
            ),
        }
    }
}
