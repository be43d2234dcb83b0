//! [`GateBuilder`]: a gate's policy, clock, start state and ready grace.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::{Condvar, Mutex};

use super::answers::AdmissionPolicy;
use super::{DrainInfo, Gate, Inner, STARTING};
use crate::DrainToken;
use crate::clock::{Clock, SystemClock};

/// Builds a [`Gate`] with a policy and a clock.
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct GateBuilder {
    policy: AdmissionPolicy,
    clock: Option<Box<dyn Clock>>,
    starting: bool,
    ready_while_draining: std::time::Duration,
    drain_token: Option<DrainToken>,
    capabilities: Option<crate::Capabilities>,
}

impl GateBuilder {
    /// Sets the admission policy while draining (default: lame duck).
    pub fn policy(mut self, policy: AdmissionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the clock the drain start time is read from.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// Starts the gate in [`State::Starting`](crate::State::Starting): not ready until
    /// [`Gate::mark_ready`], so a pod joins the load balancer only once
    /// its stores answer (default: serving at once).
    pub fn starting(mut self) -> Self {
        self.starting = true;
        self
    }

    /// Keeps readiness (`/ready`) at 200 for `grace` after the drain
    /// begins (default: none, 503 at once), while every response carries
    /// `Connection: close` (lame duck) so keep-alive clients move away.
    ///
    /// Which to choose depends on what follows `/ready`:
    ///
    /// - A load balancer that health-checks pods itself (AWS ALB or NLB
    ///   target groups, GCP NEGs, HAProxy): keep the default. `/ready`
    ///   failing at once takes the pod out before its process stops.
    /// - kube-proxy alone (a `Service` without such a balancer, or an
    ///   ingress controller that routes to `EndpointSlices`): since
    ///   Kubernetes 1.26 (KEP-1669), when a Service has no ready endpoint
    ///   left, traffic goes to endpoints that are terminating but still
    ///   `serving`, which is the pod's readiness. A `/ready` that fails at
    ///   the first SIGTERM marks such a pod not serving, and during a
    ///   rollout that terminates every old pod before new ones are ready
    ///   (or a scale to zero) traffic is dropped (kubernetes/ingress-nginx
    ///   #13689). A grace of a few seconds less than the drain's bounded
    ///   wait keeps the pod serving as that fallback while the endpoint
    ///   controller removes it from the ready set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ate_readiness::{Gate, clock::ManualClock};
    ///
    /// let clock = ManualClock::default();
    /// let gate = Gate::builder()
    ///     .clock(clock.clone())
    ///     .ready_while_draining(Duration::from_secs(10))
    ///     .build();
    /// let _ = gate.begin_drain();
    /// assert_eq!(gate.readiness_status(), 200);
    /// clock.advance(chrono::TimeDelta::seconds(9));
    /// assert_eq!(gate.readiness_status(), 200);
    /// clock.advance(chrono::TimeDelta::seconds(1));
    /// assert_eq!(gate.readiness_status(), 503);
    /// ```
    pub fn ready_while_draining(mut self, grace: std::time::Duration) -> Self {
        self.ready_while_draining = grace;
        self
    }

    /// The secret the drain endpoint ([`Gate::drain_answer`]) asks of a
    /// caller, as `Authorization: Bearer SECRET` (default: none, and the
    /// endpoint refuses every request). Publish it where the preStop hook
    /// reads it ([`DrainToken::publish`]); a `drain` subcommand built on
    /// [`DrainRequest`](crate::prestop::DrainRequest) presents it.
    ///
    /// ```
    /// use ate_readiness::{DrainToken, Gate};
    ///
    /// # fn main() -> Result<(), ate_readiness::TokenError> {
    /// let token = DrainToken::generate()?;
    /// let gate = Gate::builder().drain_token(token.clone()).build();
    /// assert!(gate.drain_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn drain_token(mut self, token: DrainToken) -> Self {
        self.drain_token = Some(token);
        self
    }

    /// The capabilities beside the gate: `/ready` then also needs every
    /// one declared [`required`](crate::CapabilitiesBuilder::required)
    /// ready; the others close only the routes bound to them. The drain
    /// still overrides everything.
    pub fn capabilities(mut self, capabilities: crate::Capabilities) -> Self {
        self.capabilities = Some(capabilities);
        self
    }

    /// Builds the gate: `Serving`, or `Starting` if asked.
    pub fn build(self) -> Gate {
        Gate {
            inner: Arc::new(Inner {
                word: AtomicU64::new(if self.starting { STARTING } else { 0 }),
                last_wait: AtomicU64::new(0),
                admitted_while_draining: AtomicU64::new(0),
                refused_while_draining: AtomicU64::new(0),
                ready_while_draining: self.ready_while_draining,
                drain_token: self.drain_token,
                capabilities: self.capabilities,
                policy: self.policy,
                clock: self.clock.unwrap_or_else(|| Box::new(SystemClock)),
                drain: Mutex::new(DrainInfo {
                    started_at: None,
                    started_mono: std::time::Duration::ZERO,
                    was_serving: false,
                    callbacks: Vec::new(),
                }),
                waiters: Mutex::new(0),
                idle: Condvar::new(),
                #[cfg(feature = "tokio")]
                notify: tokio::sync::Notify::new(),
                #[cfg(feature = "tokio")]
                drain_begun: tokio::sync::Notify::new(),
            }),
        }
    }
}
