//! What `/health`, `/ready` and the drain endpoint answer, as plain status
//! codes and small JSON bodies any framework can send.

use std::net::IpAddr;

use crate::Gate;
use crate::gate::State;
use crate::peer::{is_local_caller, is_loopback_peer};

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
    pub fn ready_answer(&self) -> Answer {
        let status = self.readiness_status();
        Answer::new(
            status,
            format!(
                r#"{{"ready":{},"state":"{}"}}"#,
                status == 200,
                state_name(self.state())
            ),
        )
    }

    /// The drain endpoint (`POST /__internal/drain`, which the preStop
    /// hook's [`DrainRequest`](crate::prestop::DrainRequest) calls): from a loopback
    /// peer that forwards no one else's request ([`is_local_caller`]) it
    /// begins the drain and answers 200
    /// `{"started":true,"draining_since":"2026-...Z"}` (`started` is false
    /// for a drain already under way); from anyone else, 403 saying why,
    /// and nothing changes.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use ate_readiness::Gate;
    ///
    /// let gate = Gate::new();
    /// let outsider = gate.drain_answer(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))), []);
    /// assert_eq!(outsider.status, 403);
    /// let hook = gate.drain_answer(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), ["content-length"]);
    /// assert_eq!(hook.status, 200);
    /// assert!(gate.is_draining());
    /// ```
    pub fn drain_answer<'h>(
        &self,
        peer: Option<IpAddr>,
        header_names: impl IntoIterator<Item = &'h str>,
    ) -> Answer {
        match peer {
            Some(ip) if is_local_caller(ip, header_names) => {
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
            Some(ip) if is_loopback_peer(ip) => Answer::new(
                403,
                r#"{"error":"drain is allowed from loopback only, not through a proxy (a forwarding header was present)"}"#
                    .to_owned(),
            ),
            _ => Answer::new(
                403,
                r#"{"error":"drain is allowed from loopback only"}"#.to_owned(),
            ),
        }
    }
}
