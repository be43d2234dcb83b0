//! A readiness gate with an idempotent, one-way drain.
//!
//! During a rolling update a pod must stop receiving NEW work before it
//! stops, while work it already admitted finishes. This crate holds that one
//! primitive:
//!
//! - [`Gate`]: `Serving` → `Draining`, never back. Cheap to clone and share.
//! - [`Gate::begin_drain`]: idempotent, reports whether THIS call started it.
//! - [`Gate::admit`] → [`Guard`] (or [`Gate::admit_owned`] →
//!   [`OwnedGuard`] for spawned tasks): counts work in flight until dropped.
//! - [`Gate::admit_session`] → [`SessionAdmission`]: for WebSockets, which
//!   while draining must be accepted and then closed with code 1001.
//! - [`Gate::wait_idle`] (blocking) and, with the `tokio` feature,
//!   `Gate::wait_idle_async`: bounded waits that report a [`WaitOutcome`].
//! - [`Gate::snapshot`] → [`Snapshot`]: state, drain start, in-flight count
//!   and last wait outcome, for metrics.
//! - [`DrainToken`]: the drain endpoint's per-process secret, written to a
//!   file only the service's user reads; [`is_local_caller`](peer::is_local_caller),
//!   the second fence (a loopback peer, [`is_loopback_peer`](peer::is_loopback_peer),
//!   that is not a proxy forwarding a request).
//! - [`Capabilities`]: readiness per capability, so one broken dependency
//!   closes its own routes and not the pod.
//! - [`DrainRequest`](prestop::DrainRequest): the other end, for the service binary's own `drain`
//!   subcommand that the `exec` preStop hook runs (POST on loopback, then
//!   sleep), with std networking only.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use ate_readiness::{Gate, State, WaitOutcome};
//!
//! # fn main() -> Result<(), ate_readiness::Error> {
//! let gate = Gate::new();
//! assert_eq!(gate.readiness_status(), 200);
//!
//! let guard = gate.admit()?; // a request is in flight
//! assert!(gate.begin_drain().started());      // preStop hook
//! assert!(!gate.begin_drain().started());     // idempotent
//! assert_eq!(gate.state(), State::Draining);
//! assert_eq!(gate.readiness_status(), 503);   // load balancer de-routes
//! assert_eq!(gate.liveness_status(), 200);    // but the pod is not killed
//!
//! // A request that still arrives is served ("lame duck"), with a hint to
//! // close the keep-alive connection.
//! let late = gate.admit()?;
//! assert!(late.should_close_connection());
//! drop((guard, late));
//!
//! assert_eq!(gate.wait_idle(Duration::from_secs(1)), WaitOutcome::Completed);
//! # Ok(())
//! # }
//! ```
//!
//! # Kubernetes sequence
//!
//! 1. The kubelet runs the pod's `preStop` hook. Use an `exec` hook that runs
//!    the service binary's own `drain` subcommand: an `httpGet` hook can only
//!    send GET and comes from the node, not loopback, and distroless images
//!    have no `curl`. The subcommand ([`DrainRequest::run_hook`](prestop::DrainRequest::run_hook)) POSTs to
//!    the drain endpoint on loopback with the secret the service wrote at
//!    start ([`DrainToken`]), which calls [`Gate::begin_drain`], then
//!    sleeps.
//! 2. `/ready` now answers 503; the readiness probe fails and the load
//!    balancer stops routing new connections, which takes seconds. Requests
//!    that still arrive are served and answered with `Connection: close`.
//! 3. After the hook's sleep, the kubelet sends SIGTERM. The service stops
//!    accepting, waits for in-flight work with a bound ([`Gate::wait_idle`]),
//!    and exits.
//!
//! `/health` (liveness) must stay 200 throughout: pointing the liveness probe
//! or the load balancer's health check at `/ready` would restart or de-route
//! pods that are draining correctly.
//!
//! Size `terminationGracePeriodSeconds` to exceed
//! `preStop sleep + in-flight wait bound + a margin`; for example a 15 s
//! sleep and a 20 s wait need at least 35 s, so use 45 s. When the grace
//! period runs out the kubelet sends SIGKILL, whatever the pod is doing.
//!
//! Which preStop hook: on Kubernetes 1.34+ the kubelet can sleep itself
//! (`preStop: {sleep: {seconds: 15}}`, no binary in the image): the pod
//! leaves the Service's endpoints during the sleep, and `/ready` turns 503 at
//! SIGTERM, after it. Pick the `exec` `drain` hook instead when a load
//! balancer polls `/ready` itself rather than following the endpoints (an
//! external one that health-checks each pod): only the hook flips `/ready`
//! before SIGTERM, so only it tells such a balancer for the whole sleep.
//! `ate-configguard rollout` accepts both, and checks the grace budget and
//! the probes around either (the example ships both: `examples/k8s/` and
//! `examples/k8s-1.34/`).
//!
//! # Feature flags
//!
//! - `tokio`: `Gate::wait_idle_async`, `Gate::drain_begun` (for work that
//!   is not a request to stop taking more), `drain_on_signal` (SIGTERM / Ctrl-C)
//!   and `next_signal` (a second one, to cut the in-flight wait short).
//! - `test-util`: `ManualClock`, `Gate::reset_for_tests`, and the
//!   `testing` module (reference model and proptest strategies).
//!
//! # Testing
//!
//! Time is injected through [`Clock`](clock::Clock); the drain start time comes from it.
//! With `test-util`, the `testing` module holds the reference model this
//! crate's own property tests compare the gate against, so a service can
//! property-test its own integration the same way.
#![warn(missing_docs)]

#[cfg(feature = "actix")]
pub mod actix;
mod capability;
pub mod clock;
mod gate;
pub mod peer;
pub mod prestop;
mod probe;
#[cfg(feature = "test-util")]
pub mod testing;
mod token;
#[cfg(feature = "tower")]
pub mod tower;

pub use capability::{
    Capabilities, CapabilitiesBuilder, CapabilitiesSnapshot, CapabilityError, CapabilityId,
    CapabilityReport, CapabilityState,
};
pub use gate::{
    AdmissionPolicy, Admitted, BeginDrain, Gate, GateBuilder, Guard, OwnedGuard, SessionAdmission,
    Snapshot, State, WaitOutcome,
};
#[cfg(feature = "tokio")]
pub use gate::{drain_on_signal, next_signal};
pub use probe::Answer;
pub use token::{DrainToken, PublishedToken, TokenError};

/// WebSocket close code "going away" (RFC 6455 §7.4.1), sent to sessions
/// opened while draining.
pub const CLOSE_GOING_AWAY: u16 = 1001;

mod error;
pub use error::Error;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
