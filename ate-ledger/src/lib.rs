//! An attempt ledger: never execute one request twice at a provider, yet let
//! a caller retry when it is certain the provider never saw the request.
//!
//! - One idempotency [`Key`] = one LOGICAL attempt ([`Record`]) with one or
//!   more PHYSICAL attempts ([`Try`]).
//! - [`Ledger::begin`] → [`Begin::Started`] with a [`Lease`], or
//!   [`Begin::Replay`] of an ended attempt; a live duplicate is
//!   [`Error::Conflict`] (HTTP 409 + `Retry-After`), a different request
//!   under the same key [`Error::FingerprintMismatch`] (HTTP 422).
//! - [`Ledger::mark_dispatched`] is durably committed BEFORE the request is
//!   sent: that is what makes a crash classifiable.
//! - [`Ledger::close`] closes the try AND the logical attempt in one write.
//! - The [`Lease`] expires after [`Config::lease_ttl`] (30 s by default);
//!   a provider call that may take longer renews it with
//!   [`Ledger::renew`], typically from a task beside the call. A renewal
//!   and the caller's own dispatch or close may race freely: the loser of
//!   the store's version race reads again and still owns the attempt. Only
//!   a lease that expired and was taken over gets [`Error::StaleLease`].
//! - [`Ledger::revive`]: iff it failed before the provider and no try was
//!   ever dispatched.
//! - [`Ledger::recover`]: expired leases → not dispatched: pre-provider
//!   (revivable); dispatched: provider unavailable (never re-executed).
//!   [`Ledger::recover_all`] applies the same rule without waiting for
//!   leases, for a process that is the store's only worker (at its start);
//!   [`Ledger::recover_owner`] to one owner's attempts, for a worker that
//!   restarts under its name on a shared store.
//! - [`Store`](store::Store): [`MemoryStore`]; `RedbStore` (feature `redb`, default),
//!   which commits every transition in two fsynced phases, verifies every
//!   page's checksum when it opens a file (a file altered since is
//!   [`Error::Corrupt`], never read as another state), and locks its file:
//!   a second open, from any process, is [`Error::AlreadyOpen`]; and
//!   `PgStore` (feature
//!   `postgres`) for a ledger that many replicas share, each transition a
//!   conditional update on the record's version.
//!
//! # Example
//!
//! ```
//! use ate_ledger::{Begin, Close, Fingerprint, Key, Ledger, MemoryStore, State};
//!
//! # fn main() -> Result<(), ate_ledger::Error> {
//! let ledger = Ledger::new(MemoryStore::new());
//! let key = Key::new("tenant-a", "order-17");
//! let fp = Fingerprint("sha256:...".into());
//!
//! // Credentials were missing: closed before dispatch, so revivable.
//! let Begin::Started(lease) = ledger.begin(&key, &fp, "worker-1")? else { unreachable!() };
//! let failed = ledger.close(&lease, Close::PreProvider("no API key".into()))?;
//! assert!(failed.is_revivable());
//!
//! // The retry revives the same logical attempt with a new try.
//! let lease = ledger.revive(&key, &fp, "worker-1")?;
//! ledger.mark_dispatched(&lease)?;              // durable, then send
//! ledger.close(&lease, Close::Succeeded("{\"id\":1}".into()))?;
//!
//! // A repeat replays the recorded outcome instead of executing again.
//! match ledger.begin(&key, &fp, "worker-2")? {
//!     Begin::Replay(r) => assert!(matches!(r.state, State::Succeeded { .. })),
//!     Begin::Started(_) => unreachable!(),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Feature flags
//!
//! - `redb` (default): the durable `RedbStore` (group commit).
//! - `tokio`: `AsyncLedger` and `execute`, the whole protocol in one call,
//!   with `Dispatch` and its `Fence`.
//! - `postgres-async`: `AsyncPgStore` on a `deadpool-postgres` pool, one
//!   ledger for many replicas.
//! - `postgres`: `PgStore`, the same for blocking services.
//! - `test-util`: `ManualClock` and the `testing` module (reference model,
//!   proptest strategies with crashes mid-attempt, the store conformance
//!   suite `testing::conformance`).
//!
//! # Many replicas: `PgStore`
//!
//! Every replica connects its own `PgStore` to one database (with
//! `PgStore::connect_pooled`, over several connections for concurrent
//! callers). [`Store`](store::Store)
//! maps onto one table keyed by `(scope, id)` with a `version` column:
//! `put(.., None)` is `INSERT ... ON CONFLICT DO NOTHING` and `put(..,
//! Some(v))` is `UPDATE ... WHERE version = v`, each checking the affected
//! row count, so of two replicas racing on a key exactly one moves it;
//! `open()` is an indexed scan of the open rows. Each call is its own
//! transaction, durable when it returns. Recovery on a shared store is
//! [`Ledger::recover`] (expired leases only) or [`Ledger::recover_owner`]
//! (a restarted worker's own attempts too), never [`Ledger::recover_all`].
#![warn(missing_docs)]

#[cfg(feature = "tokio")]
mod async_ledger;
pub mod clock;
mod config;
mod core;
#[cfg(feature = "tokio")]
mod dispatch;
mod last_writes;
mod ledger;
mod model;
#[cfg(feature = "tokio")]
mod outcome;
pub mod store;
#[cfg(feature = "test-util")]
pub mod testing;

#[cfg(feature = "tokio")]
pub use async_ledger::AsyncLedger;
pub use config::{Begin, Close, Config};
#[cfg(feature = "tokio")]
pub use dispatch::Dispatch;
pub use ledger::Ledger;
pub use model::{Fence, Fingerprint, Key, Lease, Record, State, Try, TryOutcome};
#[cfg(feature = "tokio")]
pub use outcome::{Call, Executed, Response, Step};
#[cfg(feature = "postgres-async")]
pub use store::AsyncPgStore;
#[cfg(feature = "tokio")]
pub use store::Blocking;
pub use store::MemoryStore;
#[cfg(feature = "postgres")]
pub use store::PgStore;
#[cfg(feature = "redb")]
pub use store::RedbStore;

mod error;
pub use error::Error;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
