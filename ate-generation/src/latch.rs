//! The latch value type and the provisioning gate.

use crate::Error;

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
/// Only [`Latch::gate`] (or [`crate::SharedLatch::gate`]) makes one.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "record the ticket after a successful apply, or drop it on failure"]
pub struct ApplyTicket {
    target: u64,
}

impl ApplyTicket {
    /// The generation this apply brings the object to.
    pub fn target(&self) -> u64 {
        self.target
    }
}

/// `generation` and `observed_generation`, with `observed <= generation`
/// always true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Latch {
    generation: u64,
    observed: u64,
}

impl Default for Latch {
    fn default() -> Self {
        Self::new()
    }
}

impl Latch {
    /// A new object: generation 1, observed 0. Never converged at birth.
    pub const fn new() -> Self {
        Self {
            generation: 1,
            observed: 0,
        }
    }

    /// A row that existed before the latch: both at `generation`, converged.
    pub const fn backfilled(generation: u64) -> Self {
        Self {
            generation,
            observed: generation,
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
            })
        }
    }

    /// Records a successful apply: observed becomes exactly the ticket's
    /// target, even if generation moved on during the apply.
    ///
    /// # Errors
    ///
    /// [`Error::Regression`] if observed has already moved past the ticket
    /// (another reconciler recorded a later apply); observed is left as
    /// it is, never moved backwards.
    pub fn record(&mut self, ticket: ApplyTicket) -> Result<Observe, Error> {
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
    #[derive(serde::Serialize, serde::Deserialize)]
    #[serde(
        rename_all = "camelCase",
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
