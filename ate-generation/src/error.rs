//! The crate's error type, [`Error`](crate::Error).

/// Errors of this crate. Every refusal names the numbers involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An observed write below the current observed generation.
    #[error("observed generation regression: {attempted} is below the current {current}")]
    Regression {
        /// The current observed generation.
        current: u64,
        /// The refused value.
        attempted: u64,
    },
    /// An observed write above the generation.
    #[error("observed generation overshoot: {attempted} is above generation {generation}")]
    Overshoot {
        /// The current generation.
        generation: u64,
        /// The refused value.
        attempted: u64,
    },
    /// A client tried to write the observed generation.
    #[error("observed generation {attempted} written by a client: only the control plane may")]
    ClientWrite {
        /// The refused value.
        attempted: u64,
    },
    /// The generation cannot advance past `u64::MAX`.
    #[error("generation overflow: cannot advance past {generation}")]
    Overflow {
        /// The generation that could not advance.
        generation: u64,
    },
    /// Stored or received values break `observed <= generation`.
    #[error("invalid latch: observed generation {observed} is above generation {generation}")]
    Invalid {
        /// The given generation.
        generation: u64,
        /// The given observed generation.
        observed: u64,
    },
    /// An apply ticket recorded into a latch other than the one that
    /// issued it (whose generations it does not describe).
    #[error("apply ticket for generation {target} was issued by another latch")]
    ForeignTicket {
        /// The ticket's target.
        target: u64,
    },
    /// An [`ObserveCas`](crate::ObserveCas) result that contradicts the rule: an update that
    /// left observed elsewhere than the target, or no update although the
    /// row accepts the write (the statement missed the row).
    #[error(
        "compare-and-swap of observed generation {target} did not apply to a row at \
         generation {generation}, observed {observed}"
    )]
    CasNotApplied {
        /// The write's target.
        target: u64,
        /// The row's generation.
        generation: u64,
        /// The row's observed generation.
        observed: u64,
    },
    /// A Kubernetes object with a missing or negative generation, or a
    /// negative observed generation (its own or a condition's).
    #[error("invalid Kubernetes object {object}: {reason}")]
    InvalidObject {
        /// `kind/namespace/name`.
        object: String,
        /// What is wrong.
        reason: String,
    },
}
