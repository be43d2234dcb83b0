//! The admissions a gate hands out: [`Guard`], [`OwnedGuard`] and the
//! request's [`Admitted`], each counted in flight until dropped.

use std::fmt;
use std::sync::atomic::Ordering;

use super::Gate;

/// Work in flight, borrowing the gate. Dropping it ends the work.
#[must_use = "work is counted in flight only while the guard lives"]
pub struct Guard<'a> {
    pub(super) gate: &'a Gate,
    pub(super) admitted_while_draining: bool,
}

/// Work in flight, owning a handle to the gate (`'static`: move it into a
/// spawned task). Dropping it ends the work.
#[must_use = "work is counted in flight only while the guard lives"]
pub struct OwnedGuard {
    gate: Gate,
    admitted_while_draining: bool,
}

impl<'a> Guard<'a> {
    /// Turns this guard into an [`OwnedGuard`]; the work stays counted.
    pub fn into_owned(self) -> OwnedGuard {
        let owned = OwnedGuard {
            gate: self.gate.clone(),
            admitted_while_draining: self.admitted_while_draining,
        };
        // The count moves to the owned guard: do not release it here.
        std::mem::forget(self);
        owned
    }

    /// The gate this guard belongs to.
    pub fn gate(&self) -> &'a Gate {
        self.gate
    }
}

impl OwnedGuard {
    /// The gate this guard belongs to.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Another guard for work this admitted request hands to a task of its
    /// own (a call that must finish even if the client hangs up): counted
    /// in flight until dropped, so the drain waits for it too. Never
    /// refused: the request it extends was admitted.
    pub fn extend(&self) -> OwnedGuard {
        Admitted::of(self).hold()
    }
}

/// The admission of the request being served, which the HTTP layers
/// (features `tower` and `actix`) put in the request's extensions: a
/// handler that hands work to a task of its own takes a guard for it with
/// [`hold`](Self::hold), so the drain waits for that work as well.
#[derive(Debug, Clone)]
pub struct Admitted {
    gate: Gate,
    admitted_while_draining: bool,
}

impl Admitted {
    pub(crate) fn of(guard: &OwnedGuard) -> Self {
        Self {
            gate: guard.gate.clone(),
            admitted_while_draining: guard.admitted_while_draining,
        }
    }

    /// A guard for work that outlives the request (see
    /// [`OwnedGuard::extend`]).
    pub fn hold(&self) -> OwnedGuard {
        self.gate.inner.word.fetch_add(1, Ordering::AcqRel);
        OwnedGuard {
            gate: self.gate.clone(),
            admitted_while_draining: self.admitted_while_draining,
        }
    }
}

/// What both guards share: the lame-duck question, `Debug`, and the
/// release on drop.
macro_rules! guard_common {
    ($ty:ty, $name:literal) => {
        impl $ty {
            /// Whether the gate was already draining when this work was
            /// admitted.
            pub fn admitted_while_draining(&self) -> bool {
                self.admitted_while_draining
            }

            /// Whether the response should carry `Connection: close`: the
            /// gate is draining now (one atomic load), so a keep-alive
            /// client should reconnect elsewhere.
            ///
            /// That header is HTTP/1.1's. HTTP/2 forbids it (hyper drops
            /// it from an HTTP/2 response): there, the server moves its
            /// clients by sending each connection a GOAWAY frame when the
            /// drain begins (hyper's `graceful_shutdown` on the
            /// connection), which lets the requests already on it finish.
            #[inline]
            pub fn should_close_connection(&self) -> bool {
                !self.gate.is_serving()
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct($name)
                    .field("admitted_while_draining", &self.admitted_while_draining)
                    .finish()
            }
        }

        impl Drop for $ty {
            #[inline]
            fn drop(&mut self) {
                self.gate.release();
            }
        }
    };
}

guard_common!(Guard<'_>, "Guard");
guard_common!(OwnedGuard, "OwnedGuard");
