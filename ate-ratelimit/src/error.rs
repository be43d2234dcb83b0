//! The crate's error type, [`Error`](crate::Error).

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A limit's environment variable holds something other than a positive
    /// integer.
    #[error("invalid value {value:?} for {var}: {reason}")]
    InvalidEnv {
        /// The variable.
        var: String,
        /// The bad value, as given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A limit name appears twice in a table.
    #[error("duplicate limit name {0:?}")]
    DuplicateLimit(String),
    /// A quota's window is longer than [`Quota::MAX_WINDOW`](crate::Quota::MAX_WINDOW).
    #[error("window of {window:?} is longer than the longest a limiter keeps exactly ({max:?})")]
    WindowTooLong {
        /// The window asked for.
        window: std::time::Duration,
        /// [`Quota::MAX_WINDOW`](crate::Quota::MAX_WINDOW).
        max: std::time::Duration,
    },
    /// A shared store's URL the client cannot read.
    #[error("invalid Redis URL {url:?}: {reason}")]
    RedisUrl {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What the client said.
        reason: String,
    },
    /// A shared store's handle was made outside a tokio runtime, which its
    /// connection needs.
    #[error("RedisConfig::connect must be called inside a tokio runtime")]
    NoRuntime,
    /// A check of `cost` attempts can never be allowed by a limit of
    /// `limit` attempts a window.
    #[error("a cost of {cost} attempts can never fit {name:?}, a limit of {limit} a window")]
    CostOverLimit {
        /// The limit's name (empty for a [`Limiter`](crate::Limiter) or [`KeyedLimiter`](crate::KeyedLimiter)).
        name: String,
        /// The attempts asked for at once.
        cost: u32,
        /// The limit's attempts a window.
        limit: u32,
    },
}
