//! A monotonic generation latch: `generation` / `observed_generation`,
//! converged iff equal.
//!
//! A reconciler that gates re-provisioning on "phase == Running" never
//! re-applies a spec change to a running object: drift hides behind a healthy
//! status. Gate on desired-state convergence instead, the way Kubernetes uses
//! `metadata.generation` and `status.observedGeneration`.
//!
//! - [`Latch`]: the value type. New objects start at `(1, 0)`, never
//!   spuriously converged; [`Latch::backfilled`] starts converged, explicitly.
//! - [`Latch::update_spec`] / [`Latch::update_spec_by`]: advance `generation`
//!   by one only when the DESIRED spec changed.
//! - [`Latch::observe`]: the monotonic latch `current <= new <= generation`,
//!   control plane only ([`Writer`]).
//! - [`Latch::gate`] → [`Decision`]: skip when converged, else an
//!   [`ApplyTicket`] that captured the target generation BEFORE the apply;
//!   [`Latch::record`] consumes it on success.
//! - [`SharedLatch`]: the same under one lock, for several tasks.
//! - [`Error`]: regression, overshoot, client write, overflow, bad input.
//!
//! # Example: a reconciler loop
//!
//! ```
//! use ate_generation::{Decision, Latch};
//!
//! #[derive(Clone, PartialEq)]
//! struct Gateway { replicas: u32, image: String, phase: &'static str }
//!
//! fn apply(_spec: &Gateway) -> Result<(), String> { Ok(()) }
//!
//! # fn main() -> Result<(), ate_generation::Error> {
//! let mut latch = Latch::new();
//! let mut gw = Gateway { replicas: 2, image: "v1".into(), phase: "Running" };
//!
//! // A spec change on a Running object advances generation...
//! let old = gw.clone();
//! gw.image = "v2".into();
//! latch.update_spec_by(&old, &gw, |g| (g.replicas, g.image.clone()))?;
//! // ...a status-only change does not.
//! let old = gw.clone();
//! gw.phase = "Degraded";
//! latch.update_spec_by(&old, &gw, |g| (g.replicas, g.image.clone()))?;
//! assert_eq!(latch.generation(), 2);
//!
//! // Reconcile: the gate ignores phase; it only asks "converged?".
//! match latch.gate() {
//!     Decision::Skip => {}
//!     Decision::Apply(ticket) => match apply(&gw) {
//!         Ok(()) => { latch.record(ticket)?; }     // observed = captured target
//!         Err(_) => drop(ticket),                 // observed unchanged: retried
//!     },
//! }
//! assert!(latch.is_converged());
//! assert!(matches!(latch.gate(), Decision::Skip));
//! # Ok(())
//! # }
//! ```
//!
//! # Feature flags
//!
//! - `serde`: (de)serialize a [`Latch`] as `{"generation", "observedGeneration"}`;
//!   input with `observedGeneration > generation` is an error.
//! - `k8s`: read `metadata.generation` and `status.observedGeneration` from
//!   k8s-openapi workloads (Deployment, StatefulSet, DaemonSet, ReplicaSet,
//!   ReplicationController, HorizontalPodAutoscaler, PodDisruptionBudget,
//!   Pod, or your own resource),
//!   and tell a stale `metav1.Condition` (`k8s` module).
//! - `test-util`: the `testing` module (reference model, proptest strategies).
//!
//! # Testing
//!
//! The latch has no notion of time, so no clock is needed. With `test-util`,
//! `testing::Model` is the reference the crate's property tests compare
//! against, and `testing::ops` generates spec changes, status changes,
//! applies that succeed or fail, spec changes that land mid-apply, and racing
//! writes.
#![warn(missing_docs)]

#[cfg(feature = "k8s")]
pub mod k8s;
mod latch;
mod shared;
#[cfg(feature = "test-util")]
pub mod testing;

pub use latch::{
    Advance, ApplyTicket, CasOutcome, Decision, DesiredSpec, Latch, Observe, ObserveCas, Writer,
    is_condition_stale,
};
pub use shared::SharedLatch;

mod error;
pub use error::Error;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
