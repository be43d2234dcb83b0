//! What a check answers: allowed with what remains, or denied with when
//! the same check would be allowed again, never a denial without a wait.

use std::time::Duration;

use smallvec::SmallVec;

/// The answer for one attempt against one limit.
///
/// Non-exhaustive: a later version may tell more kinds of refusal apart, so
/// match with a wildcard arm, or use [`is_allowed`](Self::is_allowed) and
/// [`retry_after`](Self::retry_after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a rate-limit decision that is not looked at limits nothing"]
#[non_exhaustive]
pub enum Decision {
    /// Allowed.
    Allowed {
        /// Attempts left in the window after this one.
        remaining: u32,
    },
    /// Denied.
    Denied {
        /// How long until an attempt would be allowed, exact for the
        /// recorded history (if no further attempts are recorded).
        retry_after: Duration,
    },
    /// The limiter is at its maximum key count and every key in this key's
    /// shard still has attempts in its window: the new key was not admitted
    /// to the table (and nothing was recorded). Treat it as a denial.
    KeyTableFull {
        /// When a key slot may drain, at the earliest.
        retry_after: Duration,
    },
    /// The shared limit store could not answer (refused, timed out, or
    /// its script failed) and the service chose to refuse meanwhile
    /// (`Fallback::Refuse`, feature `redis`): nothing was
    /// decided or recorded. Answer 503 with `Retry-After`.
    Unavailable {
        /// The configured wait before trying again.
        retry_after: Duration,
    },
}

impl Decision {
    /// Whether the attempt was allowed.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed { .. })
    }

    /// Attempts left (0 when denied).
    pub fn remaining(&self) -> u32 {
        match *self {
            Self::Allowed { remaining } => remaining,
            _ => 0,
        }
    }

    /// How long to wait before retrying (`None` when allowed).
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Self::Allowed { .. } => None,
            Self::Denied { retry_after }
            | Self::KeyTableFull { retry_after }
            | Self::Unavailable { retry_after } => Some(retry_after),
        }
    }

    /// `retry_after` in whole seconds, rounded UP, for a `Retry-After`
    /// header (`None` when allowed).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after().map(ceil_secs)
    }
}

/// The answer for one attempt against several named limits.
///
/// It borrows the limit names from its [`LimitSet`](crate::LimitSet), so a
/// check allocates nothing for up to four limits; copy a name
/// (`name.to_owned()`) to keep it past the set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a rate-limit decision that is not looked at limits nothing"]
pub struct Combined<'a> {
    /// Each limit's own decision, in the order asked.
    pub(crate) decisions: SmallVec<[(&'a str, Decision); 4]>,
    /// Until every limit would allow again, given what was recorded.
    pub(crate) wait: Duration,
    /// Per decision: until the oldest attempt its window counts leaves.
    pub(crate) resets: SmallVec<[Duration; 4]>,
    /// Where the decision was made.
    pub(crate) scope: Scope,
    /// Why the shared store did not answer, when it did not.
    pub(crate) store_error: Option<String>,
}

/// Where a [`Combined`] decision was made: whose windows it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// This process's windows, the in-process backend: each replica
    /// counts only the attempts it served.
    Process,
    /// The shared store's windows: one limit for every replica.
    Shared,
    /// This process's windows, standing in while the shared store cannot
    /// answer (`Fallback::Local`, feature `redis`): until it
    /// answers again, each replica enforces the limit on its own traffic.
    Fallback,
    /// Nothing was decided: the shared store cannot answer and the service
    /// refuses meanwhile (`Fallback::Refuse`, feature `redis`);
    /// every decision is [`Decision::Unavailable`].
    Unavailable,
}

impl<'a> Combined<'a> {
    /// Each limit's name and own decision, in the order the check named
    /// them.
    pub fn decisions(&self) -> &[(&'a str, Decision)] {
        &self.decisions
    }

    /// The decision of the limit called `name`, if the check touched it.
    pub fn decision(&self, name: &str) -> Option<Decision> {
        self.decisions
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| *d)
    }

    /// Allowed iff every limit allowed.
    pub fn is_allowed(&self) -> bool {
        self.decisions.iter().all(|(_, d)| d.is_allowed())
    }

    /// The names of the limits that denied.
    pub fn denied_by(&self) -> Vec<&'a str> {
        self.decisions
            .iter()
            .filter(|(_, d)| !d.is_allowed())
            .map(|(n, _)| *n)
            .collect()
    }

    /// The smallest `remaining` across limits; `u32::MAX` for a check of no
    /// limits (allowed, and nothing limits the next one either).
    pub fn remaining(&self) -> u32 {
        self.decisions
            .iter()
            .map(|(_, d)| d.remaining())
            .min()
            .unwrap_or(u32::MAX)
    }

    /// How long until every limit would allow (`None` when allowed).
    pub fn retry_after(&self) -> Option<Duration> {
        if self.is_allowed() {
            return None;
        }
        Some(self.wait)
    }

    /// `retry_after` in whole seconds, rounded up.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after().map(ceil_secs)
    }

    /// Per decision (in the order of [`decisions`](Self::decisions)): how
    /// long until the oldest attempt its window counts leaves, so that its
    /// quota starts to come back (zero for an empty window). For the
    /// `t` parameter of the IETF `RateLimit` field on an allowed response.
    pub fn resets(&self) -> &[Duration] {
        &self.resets
    }

    /// Where the decision was made.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// Why the shared store did not answer (under [`Scope::Fallback`] and
    /// [`Scope::Unavailable`]), for a log line.
    pub fn store_error(&self) -> Option<&str> {
        self.store_error.as_deref()
    }
}

/// Whole seconds, rounded up (a `Retry-After` must not invite an early retry).
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}
