//! The records: one logical attempt per key, with its physical tries. A
//! record read or written keeps its invariants (at most one open try, open
//! iff in flight under a lease, no pre-provider close of a dispatched try:
//! `Record::check_invariants`).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// An idempotency key, scoped by a tenant / namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    /// The tenant or namespace the key belongs to.
    pub scope: String,
    /// The caller's idempotency key.
    pub id: String,
}

impl Key {
    /// The most bytes (UTF-8) `scope` and `id` may hold together: what every
    /// store can index, so a key means the same on each. (PostgreSQL's
    /// B-tree entries hold at most 2,704 bytes; an incompressible key over
    /// that failed there as a storage error, a fault a caller would retry,
    /// while the other stores took it.) A longer key is
    /// [`Error::InvalidKey`](crate::Error::InvalidKey).
    pub const MAX_BYTES: usize = 2048;

    /// A key in `scope`.
    pub fn new(scope: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            scope: scope.into(),
            id: id.into(),
        }
    }

    /// The store encoding: `scope`, a NUL, then `id` (NUL cannot appear in
    /// a valid scope, so two keys never collide).
    pub fn encode(&self) -> String {
        format!("{}\0{}", self.scope, self.id)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.scope, self.id)
    }
}

/// A fingerprint of the request (for example a hex digest of its canonical
/// body). The same key with a different fingerprint is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint(pub String);

/// How a physical attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TryOutcome {
    /// The provider succeeded.
    Succeeded,
    /// The provider definitively rejected the request.
    FailedAtProvider,
    /// Failed before dispatch (credentials, configuration): the provider
    /// never saw it.
    PreProviderFailure,
    /// Dispatched, then no answer (timeout, reset, crash): ambiguous.
    ProviderUnavailable,
}

/// One physical attempt (a try).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Try {
    /// 1-based number of the try within its logical attempt.
    pub id: u32,
    /// When it began.
    pub started_at: DateTime<Utc>,
    /// When it was durably marked dispatched, if it was.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// When it closed, and how.
    pub closed: Option<(DateTime<Utc>, TryOutcome)>,
}

impl Try {
    /// Whether it is still open.
    pub fn is_open(&self) -> bool {
        self.closed.is_none()
    }
}

/// The state of a logical attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum State {
    /// A try is open.
    InFlight,
    /// Succeeded; the outcome is replayed to repeats. Final.
    Succeeded {
        /// The recorded outcome payload.
        outcome: String,
    },
    /// The provider definitively rejected it; replayed. Final.
    FailedAtProvider {
        /// The recorded outcome payload.
        outcome: String,
    },
    /// Failed before the provider: revivable if no try was ever dispatched.
    FailedPreProvider {
        /// Why.
        reason: String,
    },
    /// Dispatched, then no answer: NOT revivable, never re-executed.
    ProviderUnavailable {
        /// Why.
        reason: String,
    },
}

impl State {
    /// A short name (`in_flight`, `succeeded`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Succeeded { .. } => "succeeded",
            Self::FailedAtProvider { .. } => "failed_at_provider",
            Self::FailedPreProvider { .. } => "failed_pre_provider",
            Self::ProviderUnavailable { .. } => "provider_unavailable",
        }
    }

    /// Whether the attempt has ended.
    pub fn is_closed(&self) -> bool {
        !matches!(self, Self::InFlight)
    }
}

/// The owner of an open attempt: a lease with an expiry and a fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The key.
    pub key: Key,
    /// Who holds it.
    pub owner: String,
    /// When it expires (then recovery may take the attempt over).
    pub expires_at: DateTime<Utc>,
    /// Increases on every grant; a transition must present the current one.
    pub token: u64,
    /// The try this lease drives.
    pub try_id: u32,
    /// The record incarnation it was granted for ([`Record::incarnation`]):
    /// a key purged and begun again is another incarnation, so a lease of
    /// the old one (a worker that stalled past the retention) never matches
    /// the new one, whatever its token and try.
    #[serde(default)]
    pub incarnation: u64,
}

impl Lease {
    /// The fencing token of this lease, for a provider that can refuse a
    /// stale writer ([`Fence`]).
    pub fn fence(&self) -> Fence {
        Fence {
            incarnation: self.incarnation,
            token: self.token,
        }
    }
}

/// A fencing token: what a provider that can fence (a conditional write,
/// an `If-Match`, a "highest token seen" column) needs to refuse a worker
/// that lost its lease but still runs (a process that was stopped, a VM
/// that paused).
///
/// For one key, a lease granted later has a greater `token` within the
/// same `incarnation`, and a key purged and begun again gets another
/// `incarnation` (a random 64-bit value), so one pair never repeats for a
/// key. A provider keeps, per key, the greatest token it accepted for the
/// incarnation it saw and refuses a lower one.
///
/// Its text form (`Display`, [`FromStr`](std::str::FromStr)) is
/// `{incarnation:016x}-{token}`, fit for an HTTP header:
///
/// ```
/// use ate_ledger::Fence;
///
/// let fence = Fence { incarnation: 0xbeef, token: 7 };
/// assert_eq!(fence.to_string(), "000000000000beef-7");
/// assert_eq!("000000000000beef-7".parse::<Fence>(), Ok(fence));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// The record incarnation ([`Record::incarnation`]).
    pub incarnation: u64,
    /// The lease token ([`Lease::token`]): greater for a later lease of the
    /// same incarnation.
    pub token: u64,
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.incarnation, self.token)
    }
}

impl std::str::FromStr for Fence {
    type Err = crate::Error;

    /// Reads [`Display`](fmt::Display)'s form back; anything else is
    /// [`Error::InvalidKey`](crate::Error::InvalidKey) naming the text.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            crate::Error::InvalidKey(format!(
                "fencing token {s:?}: expected 16 hex digits, '-', a decimal token"
            ))
        };
        let (incarnation, token) = s.split_once('-').ok_or_else(bad)?;
        if incarnation.len() != 16 || !incarnation.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        Ok(Self {
            incarnation: u64::from_str_radix(incarnation, 16).map_err(|_| bad())?,
            token: token.parse().map_err(|_| bad())?,
        })
    }
}

/// One logical attempt, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The key.
    pub key: Key,
    /// The request fingerprint.
    pub fingerprint: Fingerprint,
    /// The logical state.
    pub state: State,
    /// Bumped on every transition (compare-and-swap in the store).
    pub version: u64,
    /// The current lease, while in flight.
    pub lease: Option<Lease>,
    /// The tries, oldest first.
    pub tries: Vec<Try>,
    /// When the logical attempt was created.
    pub created_at: DateTime<Utc>,
    /// When it last ended (retention counts from here).
    pub ended_at: Option<DateTime<Utc>>,
    /// Drawn at random when the record is created (a `begin` of a key with
    /// no record): tells this record from an earlier one of the same key
    /// that was purged. Every lease carries it. (0 in records written
    /// before it existed.)
    #[serde(default)]
    pub incarnation: u64,
}

impl Record {
    /// Whether any try was ever dispatched (then the provider may have seen
    /// the request, and the key is never revivable).
    pub fn ever_dispatched(&self) -> bool {
        self.tries.iter().any(|t| t.dispatched_at.is_some())
    }

    /// Revivable iff it failed before the provider and no try of it may
    /// have reached the provider.
    pub fn is_revivable(&self) -> bool {
        matches!(self.state, State::FailedPreProvider { .. }) && !self.ever_dispatched()
    }

    /// Whether a purge with `cutoff` deletes it: ended before `cutoff`
    /// (open records never are).
    pub(crate) fn ended_before(&self, cutoff: DateTime<Utc>) -> bool {
        self.state.is_closed() && self.ended_at.is_some_and(|e| e < cutoff)
    }

    /// The open try, if any.
    pub fn open_try(&self) -> Option<&Try> {
        self.tries.iter().find(|t| t.is_open())
    }

    /// Checks the structural invariants: at most one open try; an open try
    /// iff the logical attempt is in flight (with a lease of this
    /// incarnation); a pre-provider close never on a dispatched try.
    ///
    /// # Errors
    ///
    /// A message naming the first invariant the record breaks.
    pub fn check_invariants(&self) -> Result<(), String> {
        let open = self.tries.iter().filter(|t| t.is_open()).count();
        if open > 1 {
            return Err(format!("{} open tries", open));
        }
        match (&self.state, open) {
            (State::InFlight, 0) => return Err("in flight with no open try".into()),
            (State::InFlight, _) if self.lease.is_none() => {
                return Err("in flight with no lease".into());
            }
            (s, 1) if s.is_closed() => return Err(format!("{} with an open try", s.name())),
            _ => {}
        }
        if self.tries.is_empty() {
            return Err("no tries".into());
        }
        if let Some(lease) = &self.lease
            && lease.incarnation != self.incarnation
        {
            return Err(format!(
                "a lease of incarnation {} on incarnation {}",
                lease.incarnation, self.incarnation
            ));
        }
        for t in &self.tries {
            if let Some((_, TryOutcome::PreProviderFailure)) = t.closed
                && t.dispatched_at.is_some()
            {
                return Err(format!("try {} dispatched but closed pre-provider", t.id));
            }
        }
        Ok(())
    }
}

/// Whether `lease` still owns `record`: the record is open, of the
/// lease's incarnation, and holds that very lease (token and try).
pub(crate) fn owns(record: &Record, lease: &Lease) -> bool {
    let current = record
        .lease
        .as_ref()
        .map(|l| (l.incarnation, l.token, l.try_id));
    !record.state.is_closed()
        && record.incarnation == lease.incarnation
        && current == Some((lease.incarnation, lease.token, lease.try_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes a valid record into one that breaks an invariant.
    type Break = fn(&mut Record);

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    /// A valid in-flight record: one open try, under a lease.
    fn in_flight() -> Record {
        let key = Key::new("s", "k");
        Record {
            key: key.clone(),
            fingerprint: Fingerprint("f".into()),
            state: State::InFlight,
            version: 1,
            lease: Some(Lease {
                key,
                owner: "w".into(),
                expires_at: at(30),
                token: 1,
                try_id: 1,
                incarnation: 7,
            }),
            tries: vec![Try {
                id: 1,
                started_at: at(0),
                dispatched_at: None,
                closed: None,
            }],
            created_at: at(0),
            ended_at: None,
            incarnation: 7,
        }
    }

    /// Every broken invariant is named: a store that reads such a record
    /// reports it corrupt instead of acting on it.
    #[test]
    fn each_broken_invariant_is_an_error_naming_it() {
        assert_eq!(in_flight().check_invariants(), Ok(()));
        let cases: [(&str, Break); 6] = [
            ("2 open tries", |r| {
                let mut second = r.tries[0].clone();
                second.id = 2;
                r.tries.push(second);
            }),
            ("in flight with no open try", |r| {
                r.tries[0].closed = Some((at(1), TryOutcome::Succeeded));
            }),
            ("in flight with no lease", |r| r.lease = None),
            ("succeeded with an open try", |r| {
                r.state = State::Succeeded {
                    outcome: "ok".into(),
                };
                r.lease = None;
            }),
            ("no tries", |r| {
                r.state = State::FailedPreProvider { reason: "x".into() };
                r.lease = None;
                r.tries.clear();
            }),
            ("try 1 dispatched but closed pre-provider", |r| {
                r.state = State::FailedPreProvider { reason: "x".into() };
                r.lease = None;
                r.tries[0].dispatched_at = Some(at(0));
                r.tries[0].closed = Some((at(1), TryOutcome::PreProviderFailure));
            }),
        ];
        for (expected, break_it) in cases {
            let mut r = in_flight();
            break_it(&mut r);
            assert_eq!(r.check_invariants(), Err(expected.to_owned()));
        }
    }

    /// Purging keeps a record that ended exactly at the cutoff: "before"
    /// is strict.
    #[test]
    fn ended_before_is_strict_and_only_for_closed_records() {
        let mut r = in_flight();
        r.ended_at = Some(at(100));
        assert!(!r.ended_before(at(200)), "an open record never ended");
        r.state = State::Succeeded {
            outcome: "ok".into(),
        };
        assert!(!r.ended_before(at(100)));
        assert!(r.ended_before(at(100) + chrono::TimeDelta::nanoseconds(1)));
    }
}
