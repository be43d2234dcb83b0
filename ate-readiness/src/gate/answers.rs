//! What a gate answers: its [`State`], admission policy, the outcome of a
//! drain and of a wait, its [`Snapshot`], and a session's admission.

use chrono::{DateTime, Utc};

use super::guard::OwnedGuard;

/// The states of a gate, in the only order they come in: Starting ->
/// Serving -> Draining (a drain while starting goes straight to Draining).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum State {
    /// Not ready yet: the service is still getting its stores reachable
    /// and its caches warm ([`GateBuilder::starting`](crate::GateBuilder::starting)); `/ready` answers
    /// 503 until [`Gate::mark_ready`](crate::Gate::mark_ready). Work that arrives is served.
    Starting,
    /// Ready for new work.
    Serving,
    /// Draining: not ready, finishing admitted work. One-way.
    Draining,
}

/// What admission does with new work while draining.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdmissionPolicy {
    /// Serve it, and tell the handler to answer with `Connection: close`
    /// (load balancers keep routing for seconds after readiness fails).
    #[default]
    LameDuck,
    /// Refuse it with [`Error::Draining`](crate::Error::Draining) (answer 503 with `Retry-After`).
    Strict {
        /// The `Retry-After` to suggest, in whole seconds.
        retry_after_secs: u64,
    },
}

/// How a bounded wait for idle ended.
///
/// With `serde`: `{"outcome": "completed"}` or
/// `{"outcome": "timed_out", "in_flight": 3}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "outcome", rename_all = "snake_case"))]
#[must_use]
pub enum WaitOutcome {
    /// In-flight work reached zero.
    Completed,
    /// The timeout passed first.
    TimedOut {
        /// Work still in flight when the wait gave up.
        in_flight: u64,
    },
}

impl WaitOutcome {
    /// Whether the wait completed.
    pub fn is_completed(self) -> bool {
        matches!(self, Self::Completed)
    }
}

/// The answer of [`Gate::begin_drain`](crate::Gate::begin_drain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum BeginDrain {
    /// This call flipped the gate to draining (and ran the callbacks).
    Started {
        /// When the drain began.
        at: DateTime<Utc>,
    },
    /// A drain was already under way; nothing changed.
    AlreadyDraining {
        /// When the drain began (the first call's time).
        since: DateTime<Utc>,
    },
}

impl BeginDrain {
    /// Whether this call started the drain.
    pub fn started(self) -> bool {
        matches!(self, Self::Started { .. })
    }

    /// When the drain began.
    pub fn since(self) -> DateTime<Utc> {
        match self {
            Self::Started { at } | Self::AlreadyDraining { since: at } => at,
        }
    }
}

/// A cheap view of a gate for metrics. Each field is read atomically on
/// its own (the last wait's outcome and its count together); fields may
/// come from instants a few nanoseconds apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// Current state.
    pub state: State,
    /// When the drain began, if it has.
    pub drain_started_at: Option<DateTime<Utc>>,
    /// Admitted work not yet finished.
    pub in_flight: u64,
    /// How the last bounded wait ended, if any finished.
    pub last_wait: Option<WaitOutcome>,
    /// Requests admitted while draining (the lame-duck policy serves them
    /// with `Connection: close`): a counter, for a metric showing how long
    /// the load balancer kept routing to the pod.
    pub admitted_while_draining: u64,
    /// Work turned away while draining: requests refused under the strict
    /// policy, and sessions told to close at once (1001). A counter.
    pub refused_while_draining: u64,
}

impl Snapshot {
    /// `1` while serving, else `0` (a `ready` gauge).
    pub fn ready_gauge(&self) -> i64 {
        i64::from(self.state == State::Serving)
    }

    /// `1` while draining, else `0` (a `drain_in_progress` gauge).
    pub fn drain_in_progress_gauge(&self) -> i64 {
        i64::from(self.state == State::Draining)
    }
}

/// The answer of [`Gate::admit_session`](crate::Gate::admit_session) for long-lived sessions.
#[derive(Debug)]
#[must_use]
pub enum SessionAdmission {
    /// Serving: open the session; it stays counted until the guard drops.
    Open(OwnedGuard),
    /// Draining: ACCEPT the upgrade, then close with `close_code` (1001).
    /// Refusing before the upgrade is a failed HTTP upgrade, which client
    /// circuit breakers count as a server failure.
    AcceptThenClose {
        /// The WebSocket close code to send: 1001, going away.
        close_code: u16,
    },
}
