//! What a ledger is configured with ([`Config`]) and the terms of its
//! transitions ([`Begin`], [`Close`]): below the state machine
//! (`core`), its fronts (`ledger`, `async_ledger`) and what an owner
//! remembers (`written`), which all use them.

use std::time::Duration;

use crate::error::Error;
use crate::{Lease, Record, State, TryOutcome};

/// Ledger settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How long a lease lasts before recovery may take the attempt over.
    /// Default 30 s. `Duration::MAX` is a lease that never expires: its
    /// `expires_at` is the last time chrono holds (year 262,142).
    pub lease_ttl: Duration,
    /// How long ended records are kept (and so replayed) before
    /// [`Ledger::purge`](crate::Ledger::purge) may delete them: at least as long as a client may
    /// retry a request, or a late retry executes again. Default 24 h; at
    /// least [`MIN_RETENTION`](Self::MIN_RETENTION). `Duration::MAX` keeps
    /// them forever: `purge` then deletes nothing.
    pub retention: Duration,
}

impl Config {
    /// The shortest retention a ledger accepts: one hour. Clients retry
    /// for minutes to hours (Stripe keeps keys 24 h); a shorter retention
    /// is a configuration error, not a choice.
    pub const MIN_RETENTION: Duration = Duration::from_secs(3600);
}

impl Default for Config {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// The answer of [`Ledger::begin`](crate::Ledger::begin).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Begin {
    /// A new logical attempt and its first try: drive it with the lease.
    Started(Lease),
    /// The key already ended: replay this record instead of executing. If
    /// [`Record::is_revivable`], the caller may [`Ledger::revive`](crate::Ledger::revive) it.
    Replay(Record),
}

/// How the caller closes a try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Close {
    /// The provider succeeded; `outcome` is replayed to repeats.
    Succeeded(String),
    /// The provider definitively rejected it; replayed to repeats.
    FailedAtProvider(String),
    /// Failed before dispatch (credentials, configuration). Only legal
    /// before [`Ledger::mark_dispatched`](crate::Ledger::mark_dispatched).
    PreProvider(String),
    /// Dispatched, then no answer (timeout, reset). Not revivable.
    ProviderUnavailable(String),
}

impl Close {
    /// How the try and the attempt end with it.
    pub(crate) fn ended(&self) -> (TryOutcome, State) {
        match self.clone() {
            Self::Succeeded(outcome) => (TryOutcome::Succeeded, State::Succeeded { outcome }),
            Self::FailedAtProvider(outcome) => (
                TryOutcome::FailedAtProvider,
                State::FailedAtProvider { outcome },
            ),
            Self::PreProvider(reason) => (
                TryOutcome::PreProviderFailure,
                State::FailedPreProvider { reason },
            ),
            Self::ProviderUnavailable(reason) => (
                TryOutcome::ProviderUnavailable,
                State::ProviderUnavailable { reason },
            ),
        }
    }
}

/// [`Error::RetentionTooShort`] for a retention under the floor.
pub(crate) fn check_config(config: &Config) -> Result<(), Error> {
    if config.retention < Config::MIN_RETENTION {
        return Err(Error::RetentionTooShort {
            retention: config.retention,
            floor: Config::MIN_RETENTION,
        });
    }
    Ok(())
}
