//! The crate's error type, [`Error`](crate::Error).

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key's attempt is in flight under a live lease.
    #[error("attempt {key} is in flight; retry after {retry_after:?}")]
    Conflict {
        /// The key.
        key: String,
        /// Until the current lease expires.
        retry_after: std::time::Duration,
    },
    /// The key was used with a different request.
    #[error("idempotency key {key} was used with a different request")]
    FingerprintMismatch {
        /// The key.
        key: String,
    },
    /// Revive refused.
    #[error("attempt {key} is not revivable: {reason}")]
    NotRevivable {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The lease no longer owns the attempt (expired and taken over, or
    /// the attempt was closed).
    #[error("lease token {token} no longer owns attempt {key}")]
    StaleLease {
        /// The key.
        key: String,
        /// The presented token.
        token: u64,
    },
    /// A write made under a lease reached the store after the lease had
    /// ended by the store's clock ([`Store::put_until`](crate::store::Store::put_until)):
    /// nothing was written. The ledger answers it for a dispatch mark
    /// that came too late, so its try is never sent.
    #[error("the lease on {key} ended at {until} by the store's clock; the write was refused")]
    LeaseExpired {
        /// The key.
        key: String,
        /// When the lease ended.
        until: chrono::DateTime<chrono::Utc>,
    },
    /// A transition the state machine forbids.
    #[error("illegal transition on {key}: {detail}")]
    IllegalTransition {
        /// The key.
        key: String,
        /// What was attempted.
        detail: String,
    },
    /// No record for the key.
    #[error("no attempt for key {key}")]
    NotFound {
        /// The key.
        key: String,
    },
    /// A bad key or fingerprint.
    #[error("invalid key {0}")]
    InvalidKey(String),
    /// A [`Config::retention`](crate::Config::retention) under [`Config::MIN_RETENTION`](crate::Config::MIN_RETENTION): a success
    /// would be purged before its client stops retrying, and the retry
    /// would execute again.
    #[error(
        "ledger retention {retention:?} is under the floor of {floor:?}: keep records at least as long as a client may retry (default 24 h)"
    )]
    RetentionTooShort {
        /// The retention given.
        retention: std::time::Duration,
        /// [`Config::MIN_RETENTION`](crate::Config::MIN_RETENTION).
        floor: std::time::Duration,
    },
    /// A store compare-and-swap lost.
    #[error("version conflict on {key}: expected {expected:?}, found {found:?}")]
    VersionConflict {
        /// The key.
        key: String,
        /// The version the writer read.
        expected: Option<u64>,
        /// The version stored.
        found: Option<u64>,
    },
    /// Lost the version race too many times in a row (eight): other
    /// writers kept moving the record between this call's read and its
    /// write, such as a renewal loop with no pause beside a transition.
    /// Nothing was written; the call may be retried.
    #[error("attempt {key} is too contended")]
    Contended {
        /// The key.
        key: String,
    },
    /// The store holds something it cannot read: never reinterpreted.
    #[error("corrupt ledger data in {what}: {detail}")]
    Corrupt {
        /// Where.
        what: String,
        /// What is wrong.
        detail: String,
    },
    /// The file was written by a newer schema.
    #[error("ledger schema version {found} is newer than supported {supported}")]
    UnknownSchema {
        /// Found in the file.
        found: u64,
        /// This build's.
        supported: u64,
    },
    /// The storage engine failed.
    #[error("ledger storage error: {0}")]
    Storage(String),
    /// The store's file is already open, by another process or another
    /// store in this one: a durable ledger file has one owner at a time.
    #[error("ledger {path} is already open by another process or store (one owner at a time)")]
    AlreadyOpen {
        /// The file.
        path: String,
    },
}

impl Error {
    /// For a [`Conflict`](Error::Conflict), the wait until its lease
    /// expires in whole seconds, rounded UP and at least 1, for a
    /// `Retry-After` header (a client told 0 or a rounded-down wait would
    /// come back while the attempt is still in flight). `None` for any
    /// other error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ate_ledger::Error;
    ///
    /// let e = Error::Conflict { key: "k1".into(), retry_after: Duration::from_millis(1_200) };
    /// assert_eq!(e.retry_after_secs(), Some(2));
    /// ```
    #[must_use]
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::Conflict { retry_after, .. } => Some(
                retry_after
                    .as_secs()
                    .saturating_add(u64::from(retry_after.subsec_nanos() > 0))
                    .max(1),
            ),
            _ => None,
        }
    }
}
