//! Testing support (feature `test-util`): the reference model and proptest
//! strategies for reconciler histories.
//!
//! # Example: property-testing your own reconciler
//!
//! ```
//! use ate_generation::testing::{Model, Op, ops};
//! use ate_generation::{Decision, Latch};
//! use proptest::prelude::*;
//!
//! proptest!(|(seq in ops(30))| {
//!     let mut latch = Latch::new();
//!     let mut model = Model::new();
//!     for op in &seq {
//!         // Replace with calls into YOUR reconciler.
//!         let _ = Model::drive(&mut latch, op);
//!         model.apply(op);
//!         prop_assert_eq!(latch.generation(), model.generation);
//!         prop_assert_eq!(latch.observed_generation(), model.observed);
//!     }
//! });
//! ```

use proptest::prelude::*;

use crate::{Decision, Latch, Writer};

/// One step of a reconciler's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A desired-spec field changed.
    SpecChange,
    /// Only status / health changed (must not bump).
    StatusChange,
    /// Gate, then an apply that succeeds.
    ApplyOk,
    /// Gate, then an apply that fails.
    ApplyFails,
    /// Gate, a spec change lands DURING the apply, then the apply succeeds.
    ApplyOkWithSpecChangeDuring,
    /// A control-plane write of an arbitrary value (may be refused).
    ControlWrite(u64),
    /// A client write (always refused).
    ClientWrite(u64),
    /// An update that omits observed (health-only).
    HealthUpdate,
}

/// The reference model: two integers and the rules spelled out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// Desired-spec generation.
    pub generation: u64,
    /// Observed generation.
    pub observed: u64,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    /// A new object: (1, 0).
    pub fn new() -> Self {
        Self {
            generation: 1,
            observed: 0,
        }
    }

    /// Applies `op` to the model.
    pub fn apply(&mut self, op: &Op) {
        match *op {
            // At u64::MAX a spec change is refused (see `refuses`).
            Op::SpecChange => self.generation = self.generation.saturating_add(1),
            Op::StatusChange | Op::HealthUpdate | Op::ClientWrite(_) | Op::ApplyFails => {}
            Op::ApplyOk => self.observed = self.generation,
            Op::ApplyOkWithSpecChangeDuring => {
                let target = self.generation;
                self.generation = self.generation.saturating_add(1);
                self.observed = target;
            }
            Op::ControlWrite(v) => {
                if self.observed <= v && v <= self.generation {
                    self.observed = v;
                }
            }
        }
    }

    /// Whether converged.
    pub fn converged(&self) -> bool {
        self.observed == self.generation
    }

    /// Whether a correct latch in this state refuses the write that `op`
    /// makes through [`drive`](Self::drive): a client's observed write
    /// always, a control-plane write below observed or above generation,
    /// a spec change at `u64::MAX` (overflow is an error, never a wrap).
    /// Call it before [`apply`](Self::apply).
    pub fn refuses(&self, op: &Op) -> bool {
        match *op {
            Op::SpecChange | Op::ApplyOkWithSpecChangeDuring => self.generation == u64::MAX,
            Op::StatusChange | Op::ApplyOk | Op::ApplyFails | Op::HealthUpdate => false,
            Op::ControlWrite(v) => !(self.observed <= v && v <= self.generation),
            Op::ClientWrite(_) => true,
        }
    }

    /// Drives a real [`Latch`] through `op` the way a correct reconciler
    /// does; returns whether a write was refused.
    pub fn drive(latch: &mut Latch, op: &Op) -> bool {
        match *op {
            Op::SpecChange => latch.bump().is_err(),
            Op::StatusChange => {
                let _ = latch.update_spec_by(&(1, "Running"), &(1, "Degraded"), |s| s.0);
                false
            }
            Op::ApplyOk => match latch.gate() {
                Decision::Skip => false,
                Decision::Apply(t) => latch.record(t).is_err(),
            },
            Op::ApplyFails => {
                let _ = latch.gate();
                false
            }
            Op::ApplyOkWithSpecChangeDuring => match latch.gate() {
                Decision::Skip => latch.bump().is_err(),
                Decision::Apply(t) => {
                    // The apply succeeded, so its target is recorded
                    // whether or not the spec change during it could be.
                    let bumped = latch.bump();
                    let recorded = latch.record(t);
                    bumped.is_err() || recorded.is_err()
                }
            },
            Op::ControlWrite(v) => latch.observe(Writer::ControlPlane, v).is_err(),
            Op::ClientWrite(v) => latch.observe(Writer::Client, v).is_err(),
            Op::HealthUpdate => latch.apply_update(Writer::ControlPlane, None).is_err(),
        }
    }
}

/// One operation, weighted like a real reconciler's history.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::SpecChange),
        3 => Just(Op::StatusChange),
        4 => Just(Op::ApplyOk),
        2 => Just(Op::ApplyFails),
        2 => Just(Op::ApplyOkWithSpecChangeDuring),
        2 => (0u64..12).prop_map(Op::ControlWrite),
        1 => (0u64..12).prop_map(Op::ClientWrite),
        2 => Just(Op::HealthUpdate),
    ]
}

/// A history of up to `max_len` operations.
pub fn ops(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 0..=max_len)
}
