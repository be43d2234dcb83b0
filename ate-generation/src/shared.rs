//! A latch shared by several tasks: every update runs under one lock, so
//! two racing writers can never move observed backwards.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Error;
use crate::{Advance, ApplyTicket, Decision, Latch, Observe, Writer};

/// A [`Latch`] behind one lock. Clones share the same latch.
#[derive(Debug, Clone, Default)]
pub struct SharedLatch {
    inner: Arc<Mutex<Latch>>,
}

impl SharedLatch {
    /// Shares `latch`.
    pub fn new(latch: Latch) -> Self {
        Self {
            inner: Arc::new(Mutex::new(latch)),
        }
    }

    /// A copy of the current values.
    pub fn get(&self) -> Latch {
        *self.inner.lock()
    }

    /// See [`Latch::bump`].
    ///
    /// # Errors
    ///
    /// As for [`Latch::bump`].
    pub fn bump(&self) -> Result<u64, Error> {
        self.inner.lock().bump()
    }

    /// See [`Latch::update_spec_by`].
    ///
    /// # Errors
    ///
    /// As for [`Latch::update_spec_by`].
    pub fn update_spec_by<T: ?Sized, D: PartialEq>(
        &self,
        old: &T,
        new: &T,
        desired: impl Fn(&T) -> D,
    ) -> Result<Advance, Error> {
        self.inner.lock().update_spec_by(old, new, desired)
    }

    /// See [`Latch::observe`]; atomic with respect to other writers.
    ///
    /// # Errors
    ///
    /// As for [`Latch::observe`].
    pub fn observe(&self, writer: Writer, new: u64) -> Result<Observe, Error> {
        self.inner.lock().observe(writer, new)
    }

    /// See [`Latch::apply_update`].
    ///
    /// # Errors
    ///
    /// As for [`Latch::apply_update`].
    pub fn apply_update(&self, writer: Writer, observed: Option<u64>) -> Result<Observe, Error> {
        self.inner.lock().apply_update(writer, observed)
    }

    /// See [`Latch::gate`].
    pub fn gate(&self) -> Decision {
        self.inner.lock().gate()
    }

    /// See [`Latch::record`].
    ///
    /// # Errors
    ///
    /// As for [`Latch::record`].
    pub fn record(&self, ticket: ApplyTicket) -> Result<Observe, Error> {
        self.inner.lock().record(ticket)
    }

    /// Runs `f` on the latch under the lock, for compound updates.
    pub fn with<R>(&self, f: impl FnOnce(&mut Latch) -> R) -> R {
        f(&mut self.inner.lock())
    }
}
