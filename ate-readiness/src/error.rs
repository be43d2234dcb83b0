//! The crate's error type, [`Error`](crate::Error).

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The gate is draining and its policy is [`AdmissionPolicy::Strict`](crate::AdmissionPolicy::Strict).
    #[error("refused: the gate is draining (retry after {retry_after_secs} s)")]
    Draining {
        /// Suggested `Retry-After`, in whole seconds.
        retry_after_secs: u64,
    },
}
