//! Testing support (feature `test-util`): the reference model the gate is
//! checked against and proptest strategies for realistic operation
//! sequences (bursts of requests, drains mid-request, clock jumps).
//!
//! # Example: property-testing your own integration
//!
//! ```
//! use ate_readiness::testing::{Model, Op, ops};
//! use ate_readiness::{Gate, clock::ManualClock};
//! use proptest::prelude::*;
//!
//! proptest!(|(seq in ops(40))| {
//!     let clock = ManualClock::default();
//!     let gate = Gate::with_clock(clock.clone());
//!     let mut model = Model::default();
//!     let mut guards = Vec::new();
//!     for op in seq {
//!         // Drive YOUR handler here instead; this drives the gate directly.
//!         model.apply(&op, clock.now_for_model());
//!         match op {
//!             Op::Admit => guards.push(gate.admit_owned().unwrap()),
//!             Op::AdmitSession => {
//!                 if let ate_readiness::SessionAdmission::Open(g) = gate.admit_session() {
//!                     guards.push(g);
//!                 }
//!             }
//!             Op::WaitNow => { let _ = gate.wait_idle(std::time::Duration::ZERO); }
//!             Op::Release(i) => { if !guards.is_empty() { guards.remove(i % guards.len()); } }
//!             Op::Drain => { let _ = gate.begin_drain(); }
//!             Op::AdvanceSecs(s) => clock.advance(chrono::TimeDelta::seconds(s.into())),
//!             _ => {}
//!         }
//!         prop_assert_eq!(gate.in_flight(), model.in_flight);
//!     }
//! });
//! ```

use chrono::{DateTime, Utc};
use proptest::prelude::*;

use crate::{
    AdmissionPolicy, State,
    clock::{Clock, ManualClock},
};

/// One operation on a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `admit()`: admitted, or refused while draining under the strict
    /// policy.
    Admit,
    /// `admit_session()`.
    AdmitSession,
    /// Drop the i-th live guard (modulo the number alive; no-op if none).
    Release(usize),
    /// `begin_drain()`.
    Drain,
    /// `wait_idle(0)`: an immediate bounded wait.
    WaitNow,
    /// Move the clock forward.
    AdvanceSecs(u16),
    /// Compare `snapshot()` with the model.
    Snapshot,
    /// `mark_ready()`: a starting gate serves.
    MarkReady,
}

/// The reference model: a plain struct with the rules written out longhand.
/// [`Model::default`] is a gate with the lame-duck policy;
/// [`Model::new`] takes the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    /// The gate's admission policy.
    pub policy: AdmissionPolicy,
    /// Still starting (not ready until [`Op::MarkReady`]).
    pub starting: bool,
    /// Serving or draining.
    pub draining: bool,
    /// When the drain began.
    pub drain_started_at: Option<DateTime<Utc>>,
    /// Live guards.
    pub in_flight: u64,
    /// How many times drain callbacks ran (must end at 0 or 1).
    pub callbacks_run: u32,
    /// Outcome of the last wait: `Some(None)` completed, `Some(Some(n))`
    /// timed out with `n` in flight.
    pub last_wait: Option<Option<u64>>,
    /// Requests admitted while draining.
    pub admitted_while_draining: u64,
    /// Requests refused (strict) and sessions closed at once while
    /// draining.
    pub refused_while_draining: u64,
}

/// What the model expects an operation to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expect {
    /// Nothing to compare.
    Nothing,
    /// `admit()` succeeded; `true` if it was admitted while draining.
    Admitted(bool),
    /// `admit()` refused with `Error::Draining` and this `Retry-After`
    /// (the strict policy, while draining).
    Refused {
        /// The policy's `retry_after_secs`.
        retry_after_secs: u64,
    },
    /// `admit_session()`: `true` = open, `false` = accept then close 1001.
    Session(bool),
    /// `begin_drain()`: `true` if this call started it.
    Drain(bool),
    /// `mark_ready()`: `true` if this call ended the start.
    Ready(bool),
    /// `wait_idle(0)`: `None` completed, `Some(n)` timed out with `n`.
    Wait(Option<u64>),
}

impl Model {
    /// A gate with `policy`, serving, nothing in flight.
    pub fn new(policy: AdmissionPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// A gate built with [`GateBuilder::starting`](crate::GateBuilder::starting).
    pub fn starting(policy: AdmissionPolicy) -> Self {
        Self {
            policy,
            starting: true,
            ..Self::default()
        }
    }

    /// The state the model is in.
    pub fn state(&self) -> State {
        if self.draining {
            State::Draining
        } else if self.starting {
            State::Starting
        } else {
            State::Serving
        }
    }

    /// Applies `op` at wall time `now` and returns what the gate must
    /// answer. [`Op::Release`] assumes the caller dropped a guard if it held
    /// any (the model's count never goes below zero).
    pub fn apply(&mut self, op: &Op, now: DateTime<Utc>) -> Expect {
        match *op {
            Op::Admit => match self.policy {
                AdmissionPolicy::Strict { retry_after_secs } if self.draining => {
                    self.refused_while_draining += 1;
                    Expect::Refused { retry_after_secs }
                }
                _ => {
                    self.in_flight += 1;
                    self.admitted_while_draining += u64::from(self.draining);
                    Expect::Admitted(self.draining)
                }
            },
            Op::AdmitSession => {
                if self.draining {
                    self.refused_while_draining += 1;
                    Expect::Session(false)
                } else {
                    self.in_flight += 1;
                    Expect::Session(true)
                }
            }
            Op::Release(_) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                Expect::Nothing
            }
            Op::Drain => {
                if self.draining {
                    Expect::Drain(false)
                } else {
                    self.draining = true;
                    self.drain_started_at = Some(now);
                    self.callbacks_run += 1;
                    Expect::Drain(true)
                }
            }
            Op::WaitNow => {
                let result = (self.in_flight != 0).then_some(self.in_flight);
                self.last_wait = Some(result);
                Expect::Wait(result)
            }
            Op::MarkReady => {
                let moved = self.starting && !self.draining;
                self.starting = false;
                Expect::Ready(moved)
            }
            Op::AdvanceSecs(_) | Op::Snapshot => Expect::Nothing,
        }
    }
}

/// A strategy for one operation, weighted like real traffic: mostly admits
/// and releases, occasional drains, clock jumps and snapshots.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Admit),
        2 => Just(Op::AdmitSession),
        6 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::Drain),
        1 => Just(Op::WaitNow),
        1 => (0u16..3600).prop_map(Op::AdvanceSecs),
        2 => Just(Op::Snapshot),
        1 => Just(Op::MarkReady),
    ]
}

/// A sequence of up to `max_len` operations.
pub fn ops(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 0..=max_len)
}

impl ManualClock {
    /// The clock's time, for feeding a [`Model`].
    pub fn now_for_model(&self) -> DateTime<Utc> {
        Clock::now(self)
    }
}

/// A loopback TCP port nothing listens on, on 127.0.0.1 or on ::1, for a
/// test of a preStop drain request: one that finds nothing listening, or a
/// service on one loopback only. Each address is bound for an instant and
/// released. The port is taken from `from..from + 5000`, below the
/// ephemeral range every `:0` bind draws from (32768-60999 on Linux,
/// 49152-65535 elsewhere), so no other test's `:0` bind can take the same
/// number meanwhile: with an ephemeral port, one on the other loopback
/// could, and [`DrainRequest`](crate::prestop::DrainRequest), which tries 127.0.0.1
/// first, would reach it instead. Tests that must not meet each other take
/// apart ranges.
///
/// ```
/// use ate_readiness::testing::unused_loopback_port;
/// use ate_readiness::{prestop::{DrainRequest, PreStopError}, DrainToken};
///
/// let port = unused_loopback_port(25_000);
/// let token = DrainToken::generate().unwrap();
/// let err = DrainRequest::new(port).token(token).send().unwrap_err();
/// assert!(matches!(err, PreStopError::NotListening { .. }), "{err}");
/// ```
///
/// # Panics
///
/// If every port of the range is taken on either loopback.
pub fn unused_loopback_port(from: u16) -> u16 {
    let end = from.saturating_add(5_000);
    let span = u32::from(end - from).max(1);
    let start = from + (std::process::id() % span) as u16;
    let taken = |addr: (&str, u16)| match std::net::TcpListener::bind(addr) {
        Ok(_) => false,
        // No IPv6 on this machine: nothing can listen there.
        Err(e) => e.kind() == std::io::ErrorKind::AddrInUse,
    };
    (start..end)
        .chain(from..start)
        .find(|&port| !taken(("127.0.0.1", port)) && !taken(("::1", port)))
        .unwrap_or_else(|| panic!("every loopback port from {from} to {end} is taken"))
}
