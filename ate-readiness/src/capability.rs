//! Readiness per capability: named flags beside the gate, so one broken
//! dependency closes its own routes and not the pod.
//!
//! Invariant: a capability's state is one atomic word read on the hot
//! path; a route bound to it admits no request once a flip to not ready is
//! visible, and the pod's `/ready` depends only on the gate and on the
//! capabilities declared *required*.
//!
//! Why not fail `/ready` when a dependency fails: replicas usually share
//! their dependencies (a provider, its credentials), so every replica
//! fails `/ready` together, the load balancer is left with no backend,
//! and the routes that still work go down with the one that does not (the
//! cascade Kubernetes' probe docs and Spring Boot's health groups warn
//! of). A capability that is not ready answers its own routes 503 with
//! `Retry-After` and says why; the pod stays in the load balancer.
//!
//! ```
//! use ate_readiness::{Capabilities, Gate};
//!
//! # fn main() -> Result<(), ate_readiness::CapabilityError> {
//! let caps = Capabilities::builder()
//!     .capability("prompt-bridge")
//!     .capability("client-notifications")
//!     .build()?;
//! let prompt = caps.id("prompt-bridge")?;
//! // Not ready until the service has checked it once.
//! assert!(!caps.is_ready(prompt));
//! caps.set_ready(prompt);
//! assert!(caps.is_ready(prompt));
//! // The provider lost its credentials: its routes close, the pod stays.
//! caps.set_not_ready(prompt, "provider answered 401");
//! let gate = Gate::builder().capabilities(caps.clone()).build();
//! assert_eq!(gate.readiness_status(), 200);
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use crate::clock::{Clock, SystemClock};

/// The longest capability name (it appears in metrics labels and bodies).
const MAX_NAME: usize = 64;

/// Why a set of capabilities cannot be built or a name not found: a
/// mistake in the service's own wiring, reported when it starts, never
/// at request time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CapabilityError {
    /// A name that is empty, longer than 64 bytes, or not lowercase
    /// ASCII letters, digits, `-`, `_` and `.`.
    #[error(
        "capability name {name:?} is not 1-64 lowercase ASCII letters, digits, '-', '_' or '.'"
    )]
    BadName {
        /// The name as given.
        name: String,
    },
    /// The same name twice.
    #[error("capability {name:?} is declared twice")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A name no capability of the set has.
    #[error("no capability {name:?} (declared: {declared})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names declared, comma-separated.
        declared: String,
    },
}

/// A capability of one [`Capabilities`] set, by position: what routes
/// bind to and the hot path reads (no name lookup per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapabilityId(usize);

/// A capability's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "state", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum CapabilityState {
    /// Serving, since then.
    Ready {
        /// When it last became ready.
        since: DateTime<Utc>,
    },
    /// Not serving, and why.
    NotReady {
        /// Why (for the probe and the 503 body; never a secret).
        reason: String,
        /// Since when.
        since: DateTime<Utc>,
    },
}

impl CapabilityState {
    /// Whether it is [`Ready`](Self::Ready).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Ready { .. })
    }
}

/// One capability's entry in a [`CapabilitiesSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CapabilityReport {
    /// Its name.
    pub name: String,
    /// Whether the pod's `/ready` depends on it.
    pub required: bool,
    /// Its state.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub state: CapabilityState,
}

/// Every capability's state at one moment, for a read-only probe
/// (`GET /ready/capabilities`) and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CapabilitiesSnapshot {
    /// Whether every required capability is ready (the pod's `/ready`
    /// also needs the gate serving).
    pub required_ready: bool,
    /// Each capability, in the order declared.
    pub capabilities: Vec<CapabilityReport>,
}

type ChangeFn = dyn Fn(&str, &CapabilityState) + Send + Sync;

struct Entry {
    name: Box<str>,
    required: bool,
    ready: AtomicBool,
    /// The state with its reason and time; `ready` mirrors it for the hot
    /// path and is only written under this lock.
    state: Mutex<CapabilityState>,
}

struct Inner {
    entries: Vec<Entry>,
    by_name: HashMap<Box<str>, usize>,
    on_change: Mutex<Vec<Arc<ChangeFn>>>,
    clock: Box<dyn Clock>,
}

/// Named readiness flags, each [`Ready`](CapabilityState::Ready) or
/// [`NotReady`](CapabilityState::NotReady), movable both ways. Clones
/// share the same flags. `Send + Sync`.
#[derive(Clone)]
pub struct Capabilities {
    inner: Arc<Inner>,
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capabilities")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

/// Builds [`Capabilities`].
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct CapabilitiesBuilder {
    declared: Vec<(String, bool, bool)>,
    clock: Option<Box<dyn Clock>>,
}

impl CapabilitiesBuilder {
    /// Declares a capability that starts not ready ("not checked yet")
    /// until the service has checked it once ([`Capabilities::set_ready`]):
    /// a pod never invites traffic to a feature it cannot serve.
    pub fn capability(mut self, name: impl Into<String>) -> Self {
        self.declared.push((name.into(), false, false));
        self
    }

    /// Declares a capability that starts ready (nothing to check first).
    pub fn ready_capability(mut self, name: impl Into<String>) -> Self {
        self.declared.push((name.into(), true, false));
        self
    }

    /// Declares a capability the pod's `/ready` depends on: one this
    /// replica alone can lack (its local disk, a sidecar), never one every
    /// replica shares (a provider, a database): that would take every pod
    /// out of the load balancer together. Starts not ready.
    pub fn required(mut self, name: impl Into<String>) -> Self {
        self.declared.push((name.into(), false, true));
        self
    }

    /// The clock the states' times are read from (default: the system's).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// Builds the set.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::BadName`] or [`CapabilityError::Duplicate`].
    pub fn build(self) -> Result<Capabilities, CapabilityError> {
        let clock = self.clock.unwrap_or_else(|| Box::new(SystemClock));
        let mut entries = Vec::with_capacity(self.declared.len());
        let mut by_name = HashMap::with_capacity(self.declared.len());
        let at = clock.now();
        for (name, ready, required) in self.declared {
            let valid = !name.is_empty()
                && name.len() <= MAX_NAME
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
                });
            if !valid {
                return Err(CapabilityError::BadName { name });
            }
            if by_name.contains_key(name.as_str()) {
                return Err(CapabilityError::Duplicate { name });
            }
            by_name.insert(name.clone().into_boxed_str(), entries.len());
            let state = if ready {
                CapabilityState::Ready { since: at }
            } else {
                CapabilityState::NotReady {
                    reason: "not checked yet".into(),
                    since: at,
                }
            };
            entries.push(Entry {
                name: name.into_boxed_str(),
                required,
                ready: AtomicBool::new(ready),
                state: Mutex::new(state),
            });
        }
        Ok(Capabilities {
            inner: Arc::new(Inner {
                entries,
                by_name,
                on_change: Mutex::new(Vec::new()),
                clock,
            }),
        })
    }
}

impl Capabilities {
    /// A builder.
    pub fn builder() -> CapabilitiesBuilder {
        CapabilitiesBuilder::default()
    }

    /// The capability named `name`.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Unknown`], naming the declared ones.
    pub fn id(&self, name: &str) -> Result<CapabilityId, CapabilityError> {
        self.inner
            .by_name
            .get(name)
            .map(|&i| CapabilityId(i))
            .ok_or_else(|| CapabilityError::Unknown {
                name: name.to_owned(),
                declared: self
                    .inner
                    .entries
                    .iter()
                    .map(|e| &*e.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    fn entry(&self, id: CapabilityId) -> &Entry {
        // An id is only ever made by this set's `id`; one of another set
        // with more entries is a wiring mistake caught on first use.
        &self.inner.entries[id.0]
    }

    /// Its name.
    #[must_use]
    pub fn name(&self, id: CapabilityId) -> &str {
        &self.entry(id).name
    }

    /// Whether it is ready: one atomic load.
    #[inline]
    #[must_use]
    pub fn is_ready(&self, id: CapabilityId) -> bool {
        self.entry(id).ready.load(Ordering::Acquire)
    }

    /// Its state, with the reason and since when.
    #[must_use]
    pub fn state(&self, id: CapabilityId) -> CapabilityState {
        self.entry(id).state.lock().clone()
    }

    /// Marks it ready (its dependency answers again). Returns whether this
    /// changed it; the change callbacks run on this thread if so.
    pub fn set_ready(&self, id: CapabilityId) -> bool {
        let now = self.inner.clock.now();
        self.set(id, CapabilityState::Ready { since: now })
    }

    /// Marks it not ready, saying why (for the probe and the 503 body: say
    /// what failed, never a secret). Returns whether this changed whether
    /// it is ready; a new reason while not ready is kept, with its time
    /// unchanged, and runs no callback.
    pub fn set_not_ready(&self, id: CapabilityId, reason: impl Into<String>) -> bool {
        let now = self.inner.clock.now();
        self.set(
            id,
            CapabilityState::NotReady {
                reason: reason.into(),
                since: now,
            },
        )
    }

    fn set(&self, id: CapabilityId, to: CapabilityState) -> bool {
        let entry = self.entry(id);
        let mut state = entry.state.lock();
        let changed = state.is_ready() != to.is_ready();
        match (&mut *state, to) {
            // Still not ready, another reason: the reason, not the time.
            (
                CapabilityState::NotReady { reason, .. },
                CapabilityState::NotReady { reason: r, .. },
            ) if !changed => {
                *reason = r;
            }
            (_, to) if changed => *state = to,
            _ => {}
        }
        if !changed {
            return false;
        }
        entry.ready.store(state.is_ready(), Ordering::Release);
        let now = state.clone();
        drop(state);
        let callbacks = self.inner.on_change.lock().clone();
        for f in callbacks {
            f(&entry.name, &now);
        }
        true
    }

    /// Registers a callback run after every change of whether a
    /// capability is ready (a metric, a log line), with its name and new
    /// state, on the thread that changed it.
    pub fn on_change(&self, f: impl Fn(&str, &CapabilityState) + Send + Sync + 'static) {
        self.inner.on_change.lock().push(Arc::new(f));
    }

    /// Whether every required capability is ready.
    #[must_use]
    pub fn required_ready(&self) -> bool {
        self.inner
            .entries
            .iter()
            .all(|e| !e.required || e.ready.load(Ordering::Acquire))
    }

    /// The required capabilities that are not ready, by name.
    #[must_use]
    pub fn required_not_ready(&self) -> Vec<&str> {
        self.inner
            .entries
            .iter()
            .filter(|e| e.required && !e.ready.load(Ordering::Acquire))
            .map(|e| &*e.name)
            .collect()
    }

    /// Every capability's state now.
    #[must_use]
    pub fn snapshot(&self) -> CapabilitiesSnapshot {
        let capabilities: Vec<CapabilityReport> = self
            .inner
            .entries
            .iter()
            .map(|e| CapabilityReport {
                name: e.name.to_string(),
                required: e.required,
                state: e.state.lock().clone(),
            })
            .collect();
        CapabilitiesSnapshot {
            required_ready: capabilities
                .iter()
                .all(|c| !c.required || c.state.is_ready()),
            capabilities,
        }
    }

    /// The 503 a route bound to `id` answers while it is not ready: its
    /// `Retry-After` (seconds) and JSON body
    /// `{"error":"capability_unavailable","capability":NAME,"reason":WHY}`.
    #[must_use]
    pub fn refusal(&self, id: CapabilityId) -> (u64, String) {
        let reason = match self.state(id) {
            CapabilityState::NotReady { reason, .. } => reason,
            // It came back meanwhile: still the answer decided.
            CapabilityState::Ready { .. } => "not ready".to_owned(),
        };
        let body = format!(
            r#"{{"error":"capability_unavailable","capability":{},"reason":{}}}"#,
            json_string(self.name(id)),
            json_string(&reason)
        );
        (Self::RETRY_AFTER_SECS, body)
    }

    /// The `Retry-After` of a route whose capability is not ready.
    pub const RETRY_AFTER_SECS: u64 = 5;
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::{Capabilities, CapabilityError, CapabilityState};

    #[test]
    fn bad_and_duplicate_names_are_build_errors() {
        for bad in ["", "Prompt", "a b", "x\u{e9}", &"a".repeat(65)] {
            let e = Capabilities::builder().capability(bad).build().unwrap_err();
            assert!(matches!(e, CapabilityError::BadName { .. }), "{bad:?}");
        }
        let e = Capabilities::builder()
            .capability("a")
            .required("a")
            .build()
            .unwrap_err();
        assert_eq!(e, CapabilityError::Duplicate { name: "a".into() });
        let caps = Capabilities::builder().capability("a").build().unwrap();
        let e = caps.id("b").unwrap_err().to_string();
        assert!(e.contains("\"b\"") && e.contains("declared: a"), "{e}");
    }

    #[test]
    fn a_flip_runs_the_callbacks_once_and_a_new_reason_none() {
        let caps = Capabilities::builder().capability("p").build().unwrap();
        let p = caps.id("p").unwrap();
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let log = seen.clone();
        caps.on_change(move |name, s| log.lock().push((name.to_owned(), s.is_ready())));
        assert!(caps.set_ready(p));
        assert!(!caps.set_ready(p));
        assert!(caps.set_not_ready(p, "refused"));
        let since = match caps.state(p) {
            CapabilityState::NotReady { since, .. } => since,
            s => panic!("{s:?}"),
        };
        assert!(!caps.set_not_ready(p, "401"));
        match caps.state(p) {
            CapabilityState::NotReady { reason, since: s } => {
                assert_eq!(reason, "401");
                assert_eq!(s, since, "the time it stopped, not the latest reason");
            }
            s => panic!("{s:?}"),
        }
        assert_eq!(*seen.lock(), [("p".into(), true), ("p".into(), false)]);
    }

    #[test]
    fn the_refusal_names_the_capability_and_escapes_the_reason() {
        let caps = Capabilities::builder().capability("p").build().unwrap();
        let p = caps.id("p").unwrap();
        caps.set_not_ready(p, "said \"no\"\n");
        let (retry, body) = caps.refusal(p);
        assert_eq!(retry, Capabilities::RETRY_AFTER_SECS);
        assert_eq!(
            body,
            r#"{"error":"capability_unavailable","capability":"p","reason":"said \"no\"\u000a"}"#
        );
    }
}
