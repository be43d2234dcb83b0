//! Testing support (feature `test-util`): the reference model of the
//! ledger's state machine, a driver that runs the same operations against a
//! real [`Ledger`], and proptest strategies (bursts of begins, crashes
//! mid-attempt as lease expiries, recoveries, clock jumps). With the
//! `postgres` feature too, `fresh_database` gives each test its own
//! database on a throwaway PostgreSQL server, for testing `PgStore` and
//! the services built on it, and `TestDatabase` one that is dropped with it.
//! [`conformance`] checks a store (yours too) against every rule a ledger
//! relies on.
//!
//! # Example: property-testing against the model
//!
//! ```
//! use ate_ledger::testing::{Driver, Model, ops};
//! use ate_ledger::{Config, Ledger, MemoryStore, clock::ManualClock};
//! use proptest::prelude::*;
//!
//! proptest!(|(seq in ops(40))| {
//!     let clock = ManualClock::default();
//!     let ledger = Ledger::with_clock(MemoryStore::new(), Config::default(), clock.clone()).expect("a valid config");
//!     let mut driver = Driver::new(clock);
//!     let mut model = Model::new(Config::default());
//!     for op in &seq {
//!         prop_assert_eq!(driver.apply(&ledger, op), model.apply(op), "{:?}", op);
//!     }
//! });
//! ```

use std::collections::HashMap;
use std::time::Duration;

pub mod conformance;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use postgres::{Frozen, TestDatabase, TestPostgres, fresh_database};

use proptest::prelude::*;

use crate::{
    Begin, Close, Config, Error, Fingerprint, Key, Lease, Ledger, Record, State,
    clock::{Clock, ManualClock},
    store::{Store, run_ready},
};

/// How an operation closes a try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseKind {
    /// [`Close::Succeeded`].
    Succeeded,
    /// [`Close::FailedAtProvider`].
    FailedAtProvider,
    /// [`Close::PreProvider`].
    PreProvider,
    /// [`Close::ProviderUnavailable`].
    ProviderUnavailable,
}

/// One operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `begin` on key `key` with request `fp`.
    Begin {
        /// Key index.
        key: u8,
        /// Fingerprint index.
        fp: u8,
    },
    /// `begin` as [`Op::Begin`], whose answer is lost: the store has the
    /// try, the driver does not get its lease.
    BeginLost {
        /// Key index.
        key: u8,
        /// Fingerprint index.
        fp: u8,
    },
    /// `adopt` of `key` with its original request, under the owner name
    /// every lease so far was taken under (`mine`), or another.
    Adopt {
        /// Key index.
        key: u8,
        /// Whether the name is the one the driver's leases carry.
        mine: bool,
    },
    /// `mark_dispatched` with the last lease obtained for `key`.
    Dispatch {
        /// Key index.
        key: u8,
    },
    /// `close` with the last lease obtained for `key`.
    Close {
        /// Key index.
        key: u8,
        /// How.
        kind: CloseKind,
    },
    /// `renew` with the last lease obtained for `key` (a long provider
    /// call keeping its lease).
    Renew {
        /// Key index.
        key: u8,
    },
    /// `revive` of `key` with its original request.
    Revive {
        /// Key index.
        key: u8,
    },
    /// The worker crashes: time jumps past every lease.
    CrashWorker,
    /// `recover()`.
    Recover,
    /// The process restarts on a store only it uses: `recover_all()`.
    RecoverAll,
    /// A worker restarts under an owner name: `recover_owner()` with the
    /// name every lease so far was taken under (`mine`), or another.
    RecoverOwner {
        /// Whether the name is the one the driver's leases carry.
        mine: bool,
    },
    /// Time passes (seconds).
    Advance(u16),
}

/// What an operation did, as both the model and the driver report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new logical attempt began.
    Started,
    /// An ended attempt was replayed, in this state.
    Replay(&'static str),
    /// The transition succeeded; the state is now this.
    Ok(&'static str),
    /// In flight under a live lease.
    Conflict,
    /// Different request under the same key.
    Mismatch,
    /// The lease no longer owns the attempt.
    Stale,
    /// Forbidden by the state machine.
    Illegal,
    /// Revive refused.
    NotRevivable,
    /// No record.
    NotFound,
    /// `recover()`, `recover_all()` or `recover_owner()` resolved this many
    /// attempts.
    Recovered(usize),
    /// Nothing to do (no lease held for the key).
    Skipped,
    /// `adopt` found nothing to take over.
    NotAdoptable,
}

#[derive(Debug, Clone)]
struct KeyModel {
    fp: u8,
    state: &'static str,
    tries: u32,
    ever_dispatched: bool,
    open_dispatched: bool,
    lease_expires: u64,
    holder_valid: bool,
    /// How the driver's lease closed the attempt, while that close is
    /// what ended it (a close again the same way answers the same).
    closed_by: Option<CloseKind>,
}

/// The reference model: plain fields and the rules written out longhand.
#[derive(Debug, Clone)]
pub struct Model {
    config: Config,
    now: u64,
    keys: HashMap<u8, KeyModel>,
}

impl Model {
    /// An empty model with `config` (whole-second lease TTL).
    pub fn new(config: Config) -> Self {
        Self {
            config,
            now: 0,
            keys: HashMap::new(),
        }
    }

    fn ttl(&self) -> u64 {
        self.config.lease_ttl.as_secs()
    }

    /// Recovers every in-flight key that `also` accepts; how many.
    fn recover_where(&mut self, also: impl Fn(&KeyModel) -> bool) -> usize {
        let mut n = 0;
        for k in self.keys.values_mut() {
            if k.state == "in_flight" && also(k) {
                Self::recover_one(k);
                n += 1;
            }
        }
        n
    }

    fn recover_one(k: &mut KeyModel) {
        k.state = if k.open_dispatched {
            "provider_unavailable"
        } else {
            "failed_pre_provider"
        };
        k.open_dispatched = false;
        k.holder_valid = false;
        k.closed_by = None;
    }

    /// The state name of `key` (`None`: no record).
    pub fn state(&self, key: u8) -> Option<&'static str> {
        self.keys.get(&key).map(|k| k.state)
    }

    /// How many tries `key` has.
    pub fn tries(&self, key: u8) -> u32 {
        self.keys.get(&key).map_or(0, |k| k.tries)
    }

    /// Applies `op`; returns what the ledger must report.
    pub fn apply(&mut self, op: &Op) -> Outcome {
        let now = self.now;
        let ttl = self.ttl();
        match *op {
            Op::BeginLost { key, fp } => {
                let outcome = self.apply(&Op::Begin { key, fp });
                if outcome == Outcome::Started
                    && let Some(k) = self.keys.get_mut(&key)
                {
                    k.holder_valid = false;
                }
                outcome
            }
            Op::Adopt { key, mine } => match self.keys.get_mut(&key) {
                None => Outcome::NotFound,
                Some(k) if k.state != "in_flight" || !mine || k.open_dispatched => {
                    Outcome::NotAdoptable
                }
                Some(k) => {
                    k.lease_expires = now + ttl;
                    k.holder_valid = true;
                    Outcome::Ok("in_flight")
                }
            },
            Op::Begin { key, fp } => match self.keys.get_mut(&key) {
                None => {
                    self.keys.insert(
                        key,
                        KeyModel {
                            fp,
                            state: "in_flight",
                            tries: 1,
                            ever_dispatched: false,
                            open_dispatched: false,
                            lease_expires: now + ttl,
                            holder_valid: true,
                            closed_by: None,
                        },
                    );
                    Outcome::Started
                }
                Some(k) if k.fp != fp => Outcome::Mismatch,
                Some(k) if k.state == "in_flight" && k.lease_expires > now => Outcome::Conflict,
                Some(k) => {
                    if k.state == "in_flight" {
                        Self::recover_one(k);
                    }
                    Outcome::Replay(k.state)
                }
            },
            Op::Dispatch { key } => match self.keys.get_mut(&key) {
                None => Outcome::Skipped,
                Some(k) if !k.holder_valid || k.state != "in_flight" => Outcome::Stale,
                Some(k) => {
                    k.open_dispatched = true;
                    k.ever_dispatched = true;
                    Outcome::Ok("in_flight")
                }
            },
            Op::Close { key, kind } => match self.keys.get_mut(&key) {
                None => Outcome::Skipped,
                // The close again, after it landed: the same answer.
                Some(k) if k.state != "in_flight" && k.closed_by == Some(kind) => {
                    Outcome::Ok(k.state)
                }
                Some(k) if !k.holder_valid || k.state != "in_flight" => Outcome::Stale,
                Some(k) => {
                    let state = match kind {
                        CloseKind::PreProvider if k.open_dispatched => return Outcome::Illegal,
                        CloseKind::PreProvider => "failed_pre_provider",
                        _ if !k.open_dispatched => return Outcome::Illegal,
                        CloseKind::Succeeded => "succeeded",
                        CloseKind::FailedAtProvider => "failed_at_provider",
                        CloseKind::ProviderUnavailable => "provider_unavailable",
                    };
                    k.state = state;
                    k.open_dispatched = false;
                    k.holder_valid = false;
                    k.closed_by = Some(kind);
                    Outcome::Ok(state)
                }
            },
            // A lease that expired still owns the attempt until someone
            // takes it over (recovery); renewing it then extends it.
            Op::Renew { key } => match self.keys.get_mut(&key) {
                None => Outcome::Skipped,
                Some(k) if !k.holder_valid || k.state != "in_flight" => Outcome::Stale,
                Some(k) => {
                    k.lease_expires = now + ttl;
                    Outcome::Ok("in_flight")
                }
            },
            Op::Revive { key } => match self.keys.get_mut(&key) {
                None => Outcome::NotFound,
                Some(k) if k.state != "failed_pre_provider" || k.ever_dispatched => {
                    Outcome::NotRevivable
                }
                Some(k) => {
                    k.state = "in_flight";
                    k.tries += 1;
                    k.lease_expires = now + ttl;
                    k.holder_valid = true;
                    k.closed_by = None;
                    Outcome::Ok("in_flight")
                }
            },
            Op::CrashWorker => {
                self.now += ttl;
                Outcome::Skipped
            }
            Op::Recover => Outcome::Recovered(self.recover_where(|k| k.lease_expires <= now)),
            Op::RecoverAll => Outcome::Recovered(self.recover_where(|_| true)),
            // Every lease is the driver's: its own name takes them all,
            // another name only the expired ones.
            Op::RecoverOwner { mine } => {
                Outcome::Recovered(self.recover_where(|k| mine || k.lease_expires <= now))
            }
            Op::Advance(s) => {
                self.now += u64::from(s);
                Outcome::Skipped
            }
        }
    }
}

impl CloseKind {
    /// The close the driver makes for this kind.
    fn close(self) -> Close {
        match self {
            Self::Succeeded => Close::Succeeded("ok".into()),
            Self::FailedAtProvider => Close::FailedAtProvider("rejected".into()),
            Self::PreProvider => Close::PreProvider("no credentials".into()),
            Self::ProviderUnavailable => Close::ProviderUnavailable("timeout".into()),
        }
    }
}

/// The owner name the driver takes every lease under.
const OWNER: &str = "driver";

/// Runs [`Op`]s against a real ledger, holding the last lease per key.
#[derive(Debug)]
pub struct Driver {
    clock: ManualClock,
    leases: HashMap<u8, Lease>,
}

/// The key for index `k`.
pub fn key(k: u8) -> Key {
    Key::new("test", format!("key-{k}"))
}

/// The fingerprint for index `f`.
pub fn fingerprint(f: u8) -> Fingerprint {
    Fingerprint(format!("fp-{f}"))
}

fn classify(e: &Error) -> Outcome {
    match e {
        Error::Conflict { .. } => Outcome::Conflict,
        Error::FingerprintMismatch { .. } => Outcome::Mismatch,
        Error::StaleLease { .. } => Outcome::Stale,
        Error::IllegalTransition { .. } => Outcome::Illegal,
        Error::NotRevivable { .. } => Outcome::NotRevivable,
        Error::NotFound { .. } => Outcome::NotFound,
        other => panic!("unexpected ledger error in a model run: {other}"),
    }
}

impl Driver {
    /// A driver moving `clock` (shared with the ledger).
    pub fn new(clock: ManualClock) -> Self {
        Self {
            clock,
            leases: HashMap::new(),
        }
    }

    /// Applies `op` to `ledger`.
    pub fn apply<S: Store, C: Clock>(&mut self, ledger: &Ledger<S, C>, op: &Op) -> Outcome {
        run_ready(self.drive(ledger, op))
    }

    /// [`apply`](Self::apply) on the async front (feature `tokio`): the
    /// same operations and outcomes, awaited.
    #[cfg(feature = "tokio")]
    pub async fn apply_async<S: crate::store::AsyncStore, C: Clock>(
        &mut self,
        ledger: &crate::AsyncLedger<S, C>,
        op: &Op,
    ) -> Outcome {
        self.drive(ledger, op).await
    }

    /// Applies `op` through `front`: one driver for both fronts.
    async fn drive<F: Front>(&mut self, front: &F, op: &Op) -> Outcome {
        let state_of = async |k: u8| -> &'static str {
            front
                .get(&key(k))
                .await
                .ok()
                .flatten()
                .map_or("none", |r| r.state.name())
        };
        let result = match *op {
            Op::Begin { key: k, fp } => match front.begin(&key(k), &fingerprint(fp), OWNER).await {
                Ok(Begin::Started(lease)) => {
                    self.leases.insert(k, lease);
                    Ok(Outcome::Started)
                }
                Ok(Begin::Replay(r)) => Ok(Outcome::Replay(r.state.name())),
                Err(e) => Err(e),
            },
            Op::BeginLost { key: k, fp } => {
                match front.begin(&key(k), &fingerprint(fp), OWNER).await {
                    // The driver never learns the try's lease: what it holds
                    // for the key is one the store never gave (token 0), which
                    // moves nothing, as the model's lost holder.
                    Ok(Begin::Started(lost)) => {
                        self.leases.insert(k, Lease { token: 0, ..lost });
                        Ok(Outcome::Started)
                    }
                    Ok(Begin::Replay(r)) => Ok(Outcome::Replay(r.state.name())),
                    Err(e) => Err(e),
                }
            }
            Op::Adopt { key: k, mine } => {
                let fp = front
                    .get(&key(k))
                    .await
                    .ok()
                    .flatten()
                    .map(|r| r.fingerprint);
                let owner = if mine { OWNER } else { "another-worker" };
                match fp {
                    None => Ok(Outcome::NotFound),
                    Some(fp) => front
                        .adopt(&key(k), &fp, owner)
                        .await
                        .map(|lease| match lease {
                            Some(lease) => {
                                self.leases.insert(k, lease);
                                Outcome::Ok("in_flight")
                            }
                            None => Outcome::NotAdoptable,
                        }),
                }
            }
            Op::Dispatch { key: k } => match self.leases.get(&k) {
                None => Ok(Outcome::Skipped),
                Some(l) => match front.mark_dispatched(l).await {
                    Ok(()) => Ok(Outcome::Ok(state_of(k).await)),
                    Err(e) => Err(e),
                },
            },
            Op::Close { key: k, kind } => match self.leases.get(&k) {
                None => Ok(Outcome::Skipped),
                Some(l) => front
                    .close(l, kind.close())
                    .await
                    .map(|r| Outcome::Ok(r.state.name())),
            },
            Op::Renew { key: k } => match self.leases.get(&k) {
                None => Ok(Outcome::Skipped),
                Some(l) => match front.renew(l).await {
                    Ok(renewed) => {
                        self.leases.insert(k, renewed);
                        Ok(Outcome::Ok(state_of(k).await))
                    }
                    Err(e) => Err(e),
                },
            },
            Op::Revive { key: k } => {
                let fp = front
                    .get(&key(k))
                    .await
                    .ok()
                    .flatten()
                    .map(|r| r.fingerprint);
                match fp {
                    None => Ok(Outcome::NotFound),
                    Some(fp) => front.revive(&key(k), &fp, OWNER).await.map(|lease| {
                        self.leases.insert(k, lease);
                        Outcome::Ok("in_flight")
                    }),
                }
            }
            Op::CrashWorker => {
                self.clock.advance(front.config().lease_ttl);
                Ok(Outcome::Skipped)
            }
            Op::Recover => front
                .recover(None)
                .await
                .map(|r| Outcome::Recovered(r.len())),
            Op::RecoverAll => front
                .recover(Some(None))
                .await
                .map(|r| Outcome::Recovered(r.len())),
            Op::RecoverOwner { mine } => front
                .recover(Some(Some(if mine { OWNER } else { "another-worker" })))
                .await
                .map(|r| Outcome::Recovered(r.len())),
            Op::Advance(s) => {
                self.clock.advance(Duration::from_secs(u64::from(s)));
                Ok(Outcome::Skipped)
            }
        };
        result.unwrap_or_else(|e| classify(&e))
    }
}

/// The ledger operations the [`Driver`] makes, on either front: the
/// blocking [`Ledger`]'s answer at once, the [`AsyncLedger`](crate::AsyncLedger)'s
/// are awaited.
trait Front {
    fn config(&self) -> Config;
    async fn get(&self, key: &Key) -> Result<Option<Record>, Error>;
    async fn begin(&self, key: &Key, fp: &Fingerprint, owner: &str) -> Result<Begin, Error>;
    async fn adopt(&self, key: &Key, fp: &Fingerprint, owner: &str)
    -> Result<Option<Lease>, Error>;
    async fn mark_dispatched(&self, lease: &Lease) -> Result<(), Error>;
    async fn close(&self, lease: &Lease, close: Close) -> Result<Record, Error>;
    async fn renew(&self, lease: &Lease) -> Result<Lease, Error>;
    async fn revive(&self, key: &Key, fp: &Fingerprint, owner: &str) -> Result<Lease, Error>;
    /// `None`: the expired leases' attempts; `Some(None)`: all of them;
    /// `Some(Some(owner))`: the expired ones and `owner`'s.
    async fn recover(&self, which: Option<Option<&str>>) -> Result<Vec<Record>, Error>;
}

/// [`Front`] for both ledgers: each method forwards to the front's own
/// (`.await` on the async one).
macro_rules! front {
    ($ledger:ty, $store:path, [$($cfg:meta)?], $($await:tt)*) => {
        $(#[$cfg])?
        impl<S: $store, C: Clock> Front for $ledger {
            fn config(&self) -> Config {
                <$ledger>::config(self)
            }
            async fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
                <$ledger>::get(self, key)$($await)*
            }
            async fn begin(&self, key: &Key, fp: &Fingerprint, owner: &str) -> Result<Begin, Error> {
                <$ledger>::begin(self, key, fp, owner)$($await)*
            }
            async fn adopt(
                &self,
                key: &Key,
                fp: &Fingerprint,
                owner: &str,
            ) -> Result<Option<Lease>, Error> {
                <$ledger>::adopt(self, key, fp, owner)$($await)*
            }
            async fn mark_dispatched(&self, lease: &Lease) -> Result<(), Error> {
                <$ledger>::mark_dispatched(self, lease)$($await)*
            }
            async fn close(&self, lease: &Lease, close: Close) -> Result<Record, Error> {
                <$ledger>::close(self, lease, close)$($await)*
            }
            async fn renew(&self, lease: &Lease) -> Result<Lease, Error> {
                <$ledger>::renew(self, lease)$($await)*
            }
            async fn revive(&self, key: &Key, fp: &Fingerprint, owner: &str) -> Result<Lease, Error> {
                <$ledger>::revive(self, key, fp, owner)$($await)*
            }
            async fn recover(&self, which: Option<Option<&str>>) -> Result<Vec<Record>, Error> {
                match which {
                    None => <$ledger>::recover(self)$($await)*,
                    Some(None) => <$ledger>::recover_all(self)$($await)*,
                    Some(Some(owner)) => <$ledger>::recover_owner(self, owner)$($await)*,
                }
            }
        }
    };
}

front!(Ledger<S, C>, Store, [],);
front!(crate::AsyncLedger<S, C>, crate::store::AsyncStore, [cfg(feature = "tokio")], .await);

/// One operation over `keys` keys and two request bodies, weighted toward
/// realistic flows (begin, dispatch, close) with crashes and recoveries.
pub fn op(keys: u8) -> impl Strategy<Value = Op> {
    let k = 0..keys.max(1);
    let kind = prop_oneof![
        Just(CloseKind::Succeeded),
        Just(CloseKind::FailedAtProvider),
        Just(CloseKind::PreProvider),
        Just(CloseKind::ProviderUnavailable),
    ];
    prop_oneof![
        5 => (k.clone(), prop_oneof![4 => Just(0u8), 1 => Just(1u8)]).prop_map(|(key, fp)| Op::Begin { key, fp }),
        1 => (k.clone(), prop_oneof![4 => Just(0u8), 1 => Just(1u8)]).prop_map(|(key, fp)| Op::BeginLost { key, fp }),
        2 => (k.clone(), prop_oneof![3 => Just(true), 1 => Just(false)]).prop_map(|(key, mine)| Op::Adopt { key, mine }),
        4 => k.clone().prop_map(|key| Op::Dispatch { key }),
        5 => (k.clone(), kind).prop_map(|(key, kind)| Op::Close { key, kind }),
        2 => k.clone().prop_map(|key| Op::Renew { key }),
        3 => k.prop_map(|key| Op::Revive { key }),
        1 => Just(Op::CrashWorker),
        2 => Just(Op::Recover),
        1 => Just(Op::RecoverAll),
        1 => any::<bool>().prop_map(|mine| Op::RecoverOwner { mine }),
        2 => (0u16..20).prop_map(Op::Advance),
    ]
}

/// A sequence of up to `max_len` operations over 3 keys.
pub fn ops(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(3), 0..=max_len)
}

/// Whether a state is final (succeeded is final forever).
pub fn is_final(state: &State) -> bool {
    matches!(
        state,
        State::Succeeded { .. }
            | State::FailedAtProvider { .. }
            | State::ProviderUnavailable { .. }
    )
}

/// The fencing rule across a purge, on any store: a worker that stalled
/// past the retention while its key was purged and begun again holds a
/// lease whose token and try repeat the new attempt's; it must still be
/// refused ([`Error::StaleLease`]) by every transition, and a retried
/// close of it must not be taken for the new attempt's. Panics naming the
/// first step that broke the rule.
///
/// ```
/// ate_ledger::testing::purged_key_fences_old_leases(ate_ledger::MemoryStore::new());
/// ```
pub fn purged_key_fences_old_leases<S: Store>(store: S) {
    let clock = ManualClock::default();
    let ledger =
        Ledger::with_clock(store, Config::default(), clock.clone()).expect("a valid config");
    let key = Key::new("fencing", "reused");
    let fp = Fingerprint("same-body".into());
    let started = |owner: &str| match ledger.begin(&key, &fp, owner) {
        Ok(Begin::Started(lease)) => lease,
        other => panic!("begin by {owner}: expected a new attempt, got {other:?}"),
    };
    let old = started("stalled");
    ledger.mark_dispatched(&old).expect("old: dispatch");
    ledger
        .close(&old, Close::Succeeded("answer".into()))
        .expect("old: close");
    clock.advance(Config::default().retention + Duration::from_secs(1));
    assert_eq!(
        ledger.purge().expect("purge"),
        1,
        "the ended record is purged"
    );
    let new = started("fresh");
    assert_eq!(
        (new.token, new.try_id),
        (old.token, old.try_id),
        "the scenario: the old lease's token and try repeat"
    );
    let stale = |what: &str, r: Result<(), Error>| {
        assert!(
            matches!(r, Err(Error::StaleLease { .. })),
            "the old lease {what} the new attempt: {r:?}"
        );
    };
    stale("dispatched", ledger.mark_dispatched(&old));
    stale("renewed", ledger.renew(&old).map(|_| ()));
    ledger.mark_dispatched(&new).expect("new: dispatch");
    stale(
        "closed",
        ledger
            .close(&old, Close::Succeeded("answer".into()))
            .map(|_| ()),
    );
    let closed = ledger
        .close(&new, Close::Succeeded("answer".into()))
        .expect("new: close");
    // The same outcome now stands on the new record: a retried close of the
    // old lease must still not be taken for it.
    stale(
        "re-closed",
        ledger
            .close(&old, Close::Succeeded("answer".into()))
            .map(|_| ()),
    );
    assert_eq!(
        ledger.get(&key).expect("get"),
        Some(closed),
        "the new attempt is as its own worker left it"
    );
}
