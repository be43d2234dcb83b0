//! The latch: `observed <= generation` always, both only move forward
//! (an overflow is an error, never a wrap), and it is converged iff they
//! are equal. Also the provisioning gate.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// Numbers latches, so a ticket knows which latch issued it.
static NEXT_LATCH: AtomicU64 = AtomicU64::new(1);

fn next_latch_id() -> u64 {
    NEXT_LATCH.fetch_add(1, Ordering::Relaxed)
}

/// Who is writing the observed generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Writer {
    /// The reconciler / control plane: the only legal writer.
    ControlPlane,
    /// An API client: its observed writes are refused.
    Client,
}

/// What an observed write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Observe {
    /// Observed moved forward.
    Advanced {
        /// The previous observed generation.
        from: u64,
        /// The new observed generation.
        to: u64,
    },
    /// The same value was written again: a no-op success.
    Unchanged,
    /// A recorded apply lost a race: another reconciler (a replica, a
    /// task) recorded a later apply first, so observed is already past this
    /// ticket's target and stays there. Nothing to retry: the later apply
    /// covers this one.
    Superseded {
        /// The observed generation the winner recorded.
        observed: u64,
        /// This apply's target.
        target: u64,
    },
}

/// What a spec update did to the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Advance {
    /// The desired spec changed: generation advanced to this value.
    Advanced(u64),
    /// Only identity / status / observed fields changed: no advance.
    Unchanged,
}

/// Which fields of a type are the DESIRED spec.
///
/// Implement it on your object type to compare only desired-spec fields;
/// identity, status and observed fields must be left out.
pub trait DesiredSpec {
    /// Whether `self` and `other` have the same desired spec.
    fn same_desired_spec(&self, other: &Self) -> bool;
}

/// The provisioning gate's decision.
#[derive(Debug)]
#[must_use]
pub enum Decision {
    /// Converged: nothing to apply.
    Skip,
    /// Not converged: apply, whatever the phase. On success pass the ticket
    /// to [`Latch::record`]; on failure drop it (observed stays unchanged, so
    /// the change is retried).
    Apply(ApplyTicket),
}

/// The generation captured BEFORE an apply. Recording it (not the generation
/// current after the apply) keeps a spec change that landed during the apply
/// unobserved, so it is applied next time.
///
/// Only [`Latch::gate`] (or [`crate::SharedLatch::gate`]) makes one, and
/// only that latch (or a copy of it) records it: [`Latch::record`] refuses
/// another latch's ticket with [`Error::ForeignTicket`]. To record an apply
/// into a row read again from a database, use [`cas`](Self::cas).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "record the ticket after a successful apply, or drop it on failure"]
pub struct ApplyTicket {
    target: u64,
    latch: u64,
}

impl ApplyTicket {
    /// The generation this apply brings the object to.
    pub fn target(&self) -> u64 {
        self.target
    }

    /// The observed write of this apply as a compare-and-swap on a stored
    /// row, for reconcilers that run as several replicas (see
    /// [`ObserveCas`]).
    pub fn cas(&self) -> ObserveCas {
        ObserveCas {
            target: self.target,
        }
    }
}

/// An apply's observed write as a database compare-and-swap, for
/// reconcilers that run as several replicas over one stored row:
///
/// ```sql
/// UPDATE objects SET observed_generation = $1
///  WHERE id = $2 AND observed_generation <= $1 AND generation >= $1
/// RETURNING generation, observed_generation
/// ```
///
/// with `$1` = [`target`](Self::target). The `WHERE` is exactly the
/// latch's rule (`current <= new <= generation`), checked by the database
/// atomically with the write, so two replicas racing never move observed
/// backwards. Hand the statement's result to [`settle`](Self::settle): a
/// replica whose apply a later one already recorded gets
/// [`Observe::Superseded`], not an error.
///
/// ```
/// use ate_generation::{CasOutcome, Decision, Latch};
///
/// // Two replicas read the same row and both apply generation 2.
/// let row = Latch::from_parts(2, 1)?;
/// let (Decision::Apply(a), Decision::Apply(b)) = (row.gate(), row.gate()) else { panic!() };
/// // The row moves on to 3 and a third replica records 3 first.
/// let row = Latch::from_parts(3, 3)?;
/// let cas = a.cas();
/// assert!(!cas.accepts(row)); // the UPDATE's WHERE matches no row
/// assert_eq!(cas.settle(false, row)?, CasOutcome::Superseded { observed: 3 });
/// # drop(b);
/// # Ok::<(), ate_generation::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObserveCas {
    target: u64,
}

impl ObserveCas {
    /// The observed generation to write (`$1` above).
    pub fn target(&self) -> u64 {
        self.target
    }

    /// Whether a row holding `row` takes the write: the statement's
    /// `WHERE`, `observed <= target <= generation`.
    pub fn accepts(&self, row: Latch) -> bool {
        row.observed <= self.target && self.target <= row.generation
    }

    /// What the compare-and-swap did, from whether it `updated` the row and
    /// the row's values after it (`RETURNING`, or read again when nothing
    /// was updated).
    ///
    /// # Errors
    ///
    /// [`Error::Overshoot`] when the row's generation is below the target
    /// (the row is not the one the ticket was taken from);
    /// [`Error::CasNotApplied`] when the result contradicts the rule: an
    /// update that left observed elsewhere than the target, or no update
    /// though the row accepts the write (the statement missed the row, say
    /// a wrong id).
    pub fn settle(&self, updated: bool, row: Latch) -> Result<CasOutcome, Error> {
        let not_applied = Error::CasNotApplied {
            target: self.target,
            generation: row.generation,
            observed: row.observed,
        };
        if updated {
            return if row.observed == self.target {
                Ok(CasOutcome::Recorded)
            } else {
                Err(not_applied)
            };
        }
        if row.observed > self.target {
            return Ok(CasOutcome::Superseded {
                observed: row.observed,
            });
        }
        if row.generation < self.target {
            return Err(Error::Overshoot {
                generation: row.generation,
                attempted: self.target,
            });
        }
        Err(not_applied)
    }
}

/// What an [`ObserveCas`] did to the stored row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum CasOutcome {
    /// Observed is the target now (moved forward, or already there).
    Recorded,
    /// Another replica recorded a later apply first: observed is past the
    /// target and stays there. Nothing to retry.
    Superseded {
        /// The observed generation the winner recorded.
        observed: u64,
    },
}

/// `generation` and `observed_generation`, with `observed <= generation`
/// always true.
///
/// Equality and hashing compare the two numbers only. Each latch made by
/// [`new`](Self::new), [`backfilled`](Self::backfilled),
/// [`from_parts`](Self::from_parts) or deserialized carries an identity of
/// its own, which its copies share, so that a ticket it issues is recorded
/// only into it.
#[derive(Debug, Clone, Copy)]
pub struct Latch {
    generation: u64,
    observed: u64,
    id: u64,
}

impl PartialEq for Latch {
    fn eq(&self, other: &Self) -> bool {
        (self.generation, self.observed) == (other.generation, other.observed)
    }
}

impl Eq for Latch {}

impl Hash for Latch {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.generation, self.observed).hash(state);
    }
}

impl Default for Latch {
    fn default() -> Self {
        Self::new()
    }
}

impl Latch {
    /// A new object: generation 1, observed 0. Never converged at birth.
    pub fn new() -> Self {
        Self {
            generation: 1,
            observed: 0,
            id: next_latch_id(),
        }
    }

    /// A row that existed before the latch: both at `generation`, converged.
    pub fn backfilled(generation: u64) -> Self {
        Self {
            generation,
            observed: generation,
            id: next_latch_id(),
        }
    }

    /// Rebuilds a latch from stored values, checking `observed <= generation`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming both numbers if `observed > generation`.
    pub fn from_parts(generation: u64, observed: u64) -> Result<Self, Error> {
        if observed > generation {
            return Err(Error::Invalid {
                generation,
                observed,
            });
        }
        Ok(Self {
            generation,
            observed,
            id: next_latch_id(),
        })
    }

    /// The desired-spec generation.
    pub const fn generation(&self) -> u64 {
        self.generation
    }

    /// The last generation the control plane applied.
    pub const fn observed_generation(&self) -> u64 {
        self.observed
    }

    /// Converged iff observed == generation.
    pub const fn is_converged(&self) -> bool {
        self.observed == self.generation
    }

    /// How many generations observed is behind.
    pub const fn lag(&self) -> u64 {
        self.generation - self.observed
    }

    /// Advances generation by one: call only when the desired spec changed.
    /// Prefer [`update_spec`](Self::update_spec), which decides that for you.
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] at `u64::MAX` (never a wrap); nothing changes.
    pub fn bump(&mut self) -> Result<u64, Error> {
        self.generation = self.generation.checked_add(1).ok_or(Error::Overflow {
            generation: self.generation,
        })?;
        Ok(self.generation)
    }

    /// Advances generation iff the desired spec differs between `old` and
    /// `new`, per [`DesiredSpec`].
    ///
    /// # Errors
    ///
    /// As for [`bump`](Self::bump).
    pub fn update_spec<T: DesiredSpec + ?Sized>(
        &mut self,
        old: &T,
        new: &T,
    ) -> Result<Advance, Error> {
        if old.same_desired_spec(new) {
            Ok(Advance::Unchanged)
        } else {
            self.bump().map(Advance::Advanced)
        }
    }

    /// Advances generation iff `desired(old) != desired(new)`, where
    /// `desired` picks the desired-spec fields.
    ///
    /// # Errors
    ///
    /// As for [`bump`](Self::bump).
    pub fn update_spec_by<T: ?Sized, D: PartialEq>(
        &mut self,
        old: &T,
        new: &T,
        desired: impl Fn(&T) -> D,
    ) -> Result<Advance, Error> {
        if desired(old) == desired(new) {
            Ok(Advance::Unchanged)
        } else {
            self.bump().map(Advance::Advanced)
        }
    }

    /// Writes observed: `current <= new <= generation`, control plane only.
    /// Writing the current value again is a no-op success.
    ///
    /// # Errors
    ///
    /// [`Error::ClientWrite`] for a [`Writer::Client`];
    /// [`Error::Regression`] below the current value and
    /// [`Error::Overshoot`] above generation, each naming both numbers.
    /// Nothing changes on an error.
    pub fn observe(&mut self, writer: Writer, new: u64) -> Result<Observe, Error> {
        if writer == Writer::Client {
            return Err(Error::ClientWrite { attempted: new });
        }
        let current = self.observed;
        if new < current {
            return Err(Error::Regression {
                current,
                attempted: new,
            });
        }
        if new > self.generation {
            return Err(Error::Overshoot {
                generation: self.generation,
                attempted: new,
            });
        }
        if new == current {
            return Ok(Observe::Unchanged);
        }
        self.observed = new;
        Ok(Observe::Advanced {
            from: current,
            to: new,
        })
    }

    /// An update that may or may not carry an observed generation. `None`
    /// (for example a health-only update) preserves the stored value.
    ///
    /// # Errors
    ///
    /// As for [`observe`](Self::observe), when `observed` is `Some`.
    pub fn apply_update(
        &mut self,
        writer: Writer,
        observed: Option<u64>,
    ) -> Result<Observe, Error> {
        match observed {
            None => Ok(Observe::Unchanged),
            Some(new) => self.observe(writer, new),
        }
    }

    /// The provisioning gate: skip only when converged; otherwise apply,
    /// whatever the phase, with the target captured now.
    pub fn gate(&self) -> Decision {
        if self.is_converged() {
            Decision::Skip
        } else {
            Decision::Apply(ApplyTicket {
                target: self.generation,
                latch: self.id,
            })
        }
    }

    /// Records a successful apply: observed becomes exactly the ticket's
    /// target, even if generation moved on during the apply. If observed
    /// has already moved past the target (another reconciler recorded a
    /// later apply first), it stays there and the answer is
    /// [`Observe::Superseded`].
    ///
    /// # Errors
    ///
    /// [`Error::ForeignTicket`] for a ticket another latch issued (a copy of
    /// this latch shares its identity; a latch read again from storage does
    /// not: record into a stored row with [`ApplyTicket::cas`]). Nothing
    /// changes.
    pub fn record(&mut self, ticket: ApplyTicket) -> Result<Observe, Error> {
        if ticket.latch != self.id {
            return Err(Error::ForeignTicket {
                target: ticket.target,
            });
        }
        if ticket.target < self.observed {
            return Ok(Observe::Superseded {
                observed: self.observed,
                target: ticket.target,
            });
        }
        self.observe(Writer::ControlPlane, ticket.target)
    }

    /// Whether a condition whose own observed generation is
    /// `condition_observed` is stale (below generation).
    pub const fn is_condition_stale(&self, condition_observed: u64) -> bool {
        is_condition_stale(condition_observed, self.generation)
    }
}

/// Whether a condition observed at `condition_observed` is stale for an
/// object at `generation`.
pub const fn is_condition_stale(condition_observed: u64, generation: u64) -> bool {
    condition_observed < generation
}

#[cfg(feature = "serde")]
mod serde_impl {
    use super::Latch;

    // Messages name what the caller asked for, not this private struct.
    // Unknown fields are refused: a stored row with a misspelled
    // `observedGeneration` must not load as never observed.
    #[derive(serde::Serialize, serde::Deserialize)]
    #[serde(
        rename_all = "camelCase",
        deny_unknown_fields,
        expecting = "a Latch: {\"generation\": N, \"observedGeneration\": M}"
    )]
    struct Raw {
        generation: u64,
        observed_generation: u64,
    }

    impl serde::Serialize for Latch {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            Raw {
                generation: self.generation,
                observed_generation: self.observed,
            }
            .serialize(s)
        }
    }

    impl<'de> serde::Deserialize<'de> for Latch {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let raw = Raw::deserialize(d)?;
            Latch::from_parts(raw.generation, raw.observed_generation)
                .map_err(serde::de::Error::custom)
        }
    }
}
