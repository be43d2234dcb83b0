//! The rules every [`Store`] and [`AsyncStore`] keeps, as one suite to run
//! against a store you build: the crate runs it on `MemoryStore`,
//! `RedbStore`, `PgStore` and `AsyncPgStore`, and a store on another
//! engine (DynamoDB conditional writes, say) passes it before a ledger
//! trusts it.
//!
//! Each rule is checked on records the suite writes itself, under keys of
//! one scope of its own (`ate-conformance-…`), so the store must be empty
//! of nothing but may not be shared while the suite runs: the purge rules
//! delete every record that ended before their cutoffs. Give it a store of
//! its own (a fresh file, a fresh database).
//!
//! ```
//! use ate_ledger::MemoryStore;
//! use ate_ledger::testing::conformance;
//!
//! conformance::check(MemoryStore::new()).unwrap();
//! ```
//!
//! An async store is checked from any runtime:
//!
//! ```no_run
//! # async fn run() {
//! use ate_ledger::MemoryStore;
//! use ate_ledger::testing::conformance;
//!
//! // Your store here: say, one on DynamoDB's conditional writes.
//! conformance::check_async(MemoryStore::new()).await.unwrap();
//! # }
//! ```
//!
//! The rules ([`Broken::rule`] names the first that broke):
//!
//! - `insert-once`: a write expecting no record lands once; a second is
//!   [`Error::VersionConflict`] and changes nothing.
//! - `update-on-version`: a write expecting version `v` lands iff the
//!   stored version is `v`; a stale one conflicts and changes nothing, and
//!   so does one for a key with no record.
//! - `update-on-incarnation`: a write whose record is of another
//!   incarnation than the stored one (a key purged and begun again while
//!   the writer stalled) conflicts even at the expected version.
//! - `recovery-after-failed-write`: after a conflict, the right write
//!   lands: nothing is left locked or half-written.
//! - `exact-round-trip`: every state, every text (quotes, newlines,
//!   non-ASCII, the longest key) reads back exactly as written: never
//!   reinterpreted.
//! - `open-lists-in-flight`: `open` lists exactly the records in flight.
//! - `purge-ended-only`: a purge deletes exactly the ended records past
//!   its cutoff and answers how many; an open record is never deleted,
//!   not even one revived after it ended long ago.
//! - `purge-by-the-stamping-clock`: a store that tells its own time
//!   ([`Store::read`]) judges [`Cutoff::Age`] by it (a replica whose clock
//!   runs hours fast purges nothing early); one that does not, by the
//!   ledger's `now`.
//! - `time-moves-forward`: a store's own time, where it tells one, never
//!   goes back between two reads.
//! - `fenced-write`: [`Store::put_until`] writes like `put` before its
//!   `until`; a store that tells its own time refuses it after, by that
//!   time, with [`Error::LeaseExpired`], and writes nothing (a dispatch
//!   mark that sat in a stalled connection past its lease never lands).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::error::Error;
use crate::store::{AsAsync, run_ready};
use crate::store::{AsyncStore, Cutoff, Store};
use crate::{Fingerprint, Key, Lease, Record, State, Try, TryOutcome};

/// A rule a store broke: which, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store conformance: rule {rule} broken: {detail}")]
pub struct Broken {
    /// The rule's name (see the module's list).
    pub rule: &'static str,
    /// What the store did instead.
    pub detail: String,
}

fn broken(rule: &'static str, detail: impl Into<String>) -> Broken {
    Broken {
        rule,
        detail: detail.into(),
    }
}

/// Runs every rule on a blocking [`Store`].
///
/// # Errors
///
/// The first rule the store broke.
pub fn check<S: Store>(store: S) -> Result<(), Broken> {
    run_ready(check_async(AsAsync(&store)))
}

/// Runs every rule on an [`AsyncStore`].
///
/// # Errors
///
/// The first rule the store broke.
pub async fn check_async<S: AsyncStore>(store: S) -> Result<(), Broken> {
    let suite = Suite {
        store: &store,
        scope: scope(),
    };
    suite.insert_once().await?;
    suite.update_on_version().await?;
    suite.update_on_incarnation().await?;
    suite.recovery_after_failed_write().await?;
    suite.exact_round_trip().await?;
    suite.open_lists_in_flight().await?;
    suite.purge_ended_only().await?;
    suite.purge_by_the_stamping_clock().await?;
    suite.time_moves_forward().await?;
    suite.fenced_write().await?;
    Ok(())
}

/// A scope no other run of the suite uses.
fn scope() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(Utc::now().timestamp_nanos_opt().unwrap_or_default() as u128);
    format!("ate-conformance-{:016x}", h.finish())
}

/// A time with whole microseconds (what every store keeps exactly).
fn at(micros: i64) -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::microseconds(micros)
}

/// 2026-01-01, in microseconds.
const T0: i64 = 1_767_225_600_000_000;
const HOUR: i64 = 3_600_000_000;

struct Suite<'s, S> {
    store: &'s S,
    scope: String,
}

impl<S: AsyncStore> Suite<'_, S> {
    fn key(&self, id: &str) -> Key {
        Key::new(self.scope.clone(), id)
    }

    /// A valid in-flight record of `key`: one open try under a lease.
    fn in_flight(&self, id: &str, version: u64, incarnation: u64, now: DateTime<Utc>) -> Record {
        let key = self.key(id);
        Record {
            key: key.clone(),
            fingerprint: Fingerprint("sha256:conformance".into()),
            state: State::InFlight,
            version,
            lease: Some(Lease {
                key,
                owner: "conformance".into(),
                expires_at: now + TimeDelta::seconds(30),
                token: version,
                try_id: 1,
                incarnation,
            }),
            tries: vec![Try {
                id: 1,
                started_at: now,
                dispatched_at: None,
                closed: None,
            }],
            created_at: now,
            ended_at: None,
            incarnation,
        }
    }

    /// `record` closed at `ended` in `state` (dispatched first unless it
    /// failed before the provider), one version on.
    fn closed(mut record: Record, state: State, ended: DateTime<Utc>) -> Record {
        let outcome = match &state {
            State::Succeeded { .. } => TryOutcome::Succeeded,
            State::FailedAtProvider { .. } => TryOutcome::FailedAtProvider,
            State::ProviderUnavailable { .. } => TryOutcome::ProviderUnavailable,
            _ => TryOutcome::PreProviderFailure,
        };
        let t = record.tries.last_mut().expect("a try");
        if outcome != TryOutcome::PreProviderFailure {
            t.dispatched_at = Some(t.started_at);
        }
        t.closed = Some((ended, outcome));
        record.state = state;
        record.lease = None;
        record.ended_at = Some(ended);
        record.version += 1;
        record
    }

    async fn get(&self, rule: &'static str, key: &Key) -> Result<Option<Record>, Broken> {
        self.store
            .get(key)
            .await
            .map(|read| read.record)
            .map_err(|e| broken(rule, format!("reading {key}: {e}")))
    }

    async fn put(
        &self,
        rule: &'static str,
        record: &Record,
        expected: Option<u64>,
    ) -> Result<(), Broken> {
        self.store.put(record, expected).await.map_err(|e| {
            broken(
                rule,
                format!(
                    "writing {} version {} over {expected:?}: {e}",
                    record.key, record.version
                ),
            )
        })
    }

    /// Expects `put` to be refused as a conflict, and the record to be
    /// `kept` (or none) after it.
    async fn refused(
        &self,
        rule: &'static str,
        record: &Record,
        expected: Option<u64>,
        kept: Option<&Record>,
    ) -> Result<(), Broken> {
        match self.store.put(record, expected).await {
            Err(Error::VersionConflict { .. }) => {}
            other => {
                return Err(broken(
                    rule,
                    format!(
                        "a write of {} version {} over {expected:?} answered {other:?}, \
                         not a version conflict",
                        record.key, record.version
                    ),
                ));
            }
        }
        let now = self.get(rule, &record.key).await?;
        if now.as_ref() != kept {
            return Err(broken(
                rule,
                format!(
                    "a refused write changed {}: {now:?}, expected {kept:?}",
                    record.key
                ),
            ));
        }
        Ok(())
    }

    async fn expect_stored(&self, rule: &'static str, record: &Record) -> Result<(), Broken> {
        let got = self.get(rule, &record.key).await?;
        if got.as_ref() != Some(record) {
            return Err(broken(
                rule,
                format!(
                    "{} reads back as {got:?}, written as {record:?}",
                    record.key
                ),
            ));
        }
        Ok(())
    }

    async fn insert_once(&self) -> Result<(), Broken> {
        const RULE: &str = "insert-once";
        let first = self.in_flight("insert", 1, 11, at(T0));
        self.put(RULE, &first, None).await?;
        self.expect_stored(RULE, &first).await?;
        let mut second = self.in_flight("insert", 1, 12, at(T0 + 1));
        second.fingerprint = Fingerprint("sha256:another".into());
        self.refused(RULE, &second, None, Some(&first)).await
    }

    async fn update_on_version(&self) -> Result<(), Broken> {
        const RULE: &str = "update-on-version";
        let v1 = self.in_flight("update", 1, 21, at(T0));
        self.put(RULE, &v1, None).await?;
        let mut v2 = v1.clone();
        v2.version = 2;
        v2.tries[0].dispatched_at = Some(at(T0 + 5));
        self.put(RULE, &v2, Some(1)).await?;
        self.expect_stored(RULE, &v2).await?;
        // A writer that read version 1 and lost the race.
        let mut stale = v1.clone();
        stale.version = 2;
        stale.lease.as_mut().expect("a lease").owner = "stale".into();
        self.refused(RULE, &stale, Some(1), Some(&v2)).await?;
        let mut ahead = v2.clone();
        ahead.version = 4;
        self.refused(RULE, &ahead, Some(3), Some(&v2)).await?;
        // An update of a key with no record.
        let ghost = self.in_flight("update-ghost", 2, 22, at(T0));
        self.refused(RULE, &ghost, Some(1), None).await
    }

    async fn update_on_incarnation(&self) -> Result<(), Broken> {
        const RULE: &str = "update-on-incarnation";
        // The key as it is now: a new incarnation at version 5.
        let mut current = self.in_flight("reborn", 1, 31, at(T0 + HOUR));
        self.put(RULE, &current, None).await?;
        for v in 2..=5 {
            let mut next = current.clone();
            next.version = v;
            self.put(RULE, &next, Some(v - 1)).await?;
            current = next;
        }
        // A worker of the purged incarnation, stalled since it read its own
        // record at version 5, writes the close it had computed.
        // (`closed` moves it to version 6.)
        let zombie = Self::closed(
            self.in_flight("reborn", 5, 30, at(T0)),
            State::Succeeded {
                outcome: "the old request's answer".into(),
            },
            at(T0 + 1),
        );
        self.refused(RULE, &zombie, Some(5), Some(&current)).await
    }

    async fn recovery_after_failed_write(&self) -> Result<(), Broken> {
        const RULE: &str = "recovery-after-failed-write";
        let v1 = self.in_flight("recover", 1, 41, at(T0));
        self.put(RULE, &v1, None).await?;
        let mut wrong = v1.clone();
        wrong.version = 3;
        self.refused(RULE, &wrong, Some(2), Some(&v1)).await?;
        let closed = Self::closed(
            v1.clone(),
            State::FailedPreProvider {
                reason: "no credentials".into(),
            },
            at(T0 + 1),
        );
        self.put(RULE, &closed, Some(1)).await?;
        self.expect_stored(RULE, &closed).await
    }

    async fn exact_round_trip(&self) -> Result<(), Broken> {
        const RULE: &str = "exact-round-trip";
        let text = "quote \" backslash \\ newline \n tab \t emoji \u{1f980} nul-free 'sql' -- ;";
        let states = [
            State::Succeeded {
                outcome: format!("{{\"status\":200,\"body\":\"{text}\"}}"),
            },
            State::FailedAtProvider {
                outcome: text.into(),
            },
            State::FailedPreProvider {
                reason: text.into(),
            },
            State::ProviderUnavailable {
                reason: String::new(),
            },
        ];
        for (i, state) in states.into_iter().enumerate() {
            let id = format!("round-trip-{i}-ключ-{text}");
            let open = self.in_flight(&id, 1, u64::MAX - i as u64, at(T0 + 7));
            self.put(RULE, &open, None).await?;
            self.expect_stored(RULE, &open).await?;
            let closed = Self::closed(open, state, at(T0 + 9));
            self.put(RULE, &closed, Some(1)).await?;
            self.expect_stored(RULE, &closed).await?;
        }
        // The longest key a store must hold.
        let long = "x".repeat(Key::MAX_BYTES - self.scope.len());
        let record = self.in_flight(&long, 1, 42, at(T0));
        self.put(RULE, &record, None).await?;
        self.expect_stored(RULE, &record).await
    }

    /// The suite's records among `open`'s.
    async fn open_ids(&self, rule: &'static str) -> Result<Vec<String>, Broken> {
        let (open, _) = self
            .store
            .open()
            .await
            .map_err(|e| broken(rule, format!("listing open records: {e}")))?;
        let mut ids: Vec<String> = open
            .into_iter()
            .filter(|r| r.key.scope == self.scope)
            .map(|r| r.key.id)
            .collect();
        ids.sort();
        Ok(ids)
    }

    async fn open_lists_in_flight(&self) -> Result<(), Broken> {
        const RULE: &str = "open-lists-in-flight";
        let mut expected = self.open_ids(RULE).await?;
        let a = self.in_flight("open-a", 1, 51, at(T0));
        let b = self.in_flight("open-b", 1, 52, at(T0));
        self.put(RULE, &a, None).await?;
        self.put(RULE, &b, None).await?;
        let b_closed = Self::closed(
            b,
            State::ProviderUnavailable {
                reason: "timeout".into(),
            },
            at(T0 + 1),
        );
        self.put(RULE, &b_closed, Some(1)).await?;
        expected.push("open-a".into());
        expected.sort();
        let got = self.open_ids(RULE).await?;
        if got != expected {
            return Err(broken(
                RULE,
                format!("open lists {got:?}, expected {expected:?}"),
            ));
        }
        Ok(())
    }

    async fn purge(&self, rule: &'static str, cutoff: Cutoff) -> Result<usize, Broken> {
        self.store
            .purge(cutoff)
            .await
            .map_err(|e| broken(rule, format!("purge {cutoff:?}: {e}")))
    }

    async fn purge_ended_only(&self) -> Result<(), Broken> {
        const RULE: &str = "purge-ended-only";
        // Everything the earlier rules left that ended before 2030.
        self.purge(RULE, Cutoff::Before(at(T0 + 4 * 8_766 * HOUR)))
            .await?;
        let ended = |id: &str, hour: i64| {
            Self::closed(
                self.in_flight(id, 1, 61, at(T0 + hour * HOUR)),
                State::Succeeded {
                    outcome: "ok".into(),
                },
                at(T0 + hour * HOUR),
            )
        };
        let old = [ended("purge-old-1", 1), ended("purge-old-2", 2)];
        let recent = ended("purge-recent", 10);
        let open = self.in_flight("purge-open", 1, 62, at(T0));
        // Ended long ago, then revived: open again.
        let mut revived = ended("purge-revived", 1);
        revived.state = State::InFlight;
        revived.tries.push(Try {
            id: 2,
            started_at: at(T0 + 20 * HOUR),
            dispatched_at: None,
            closed: None,
        });
        revived.tries[0].dispatched_at = None;
        revived.tries[0].closed = Some((at(T0 + HOUR), TryOutcome::PreProviderFailure));
        revived.lease = self
            .in_flight("purge-revived", 2, 61, at(T0 + 20 * HOUR))
            .lease
            .map(|lease| Lease { try_id: 2, ..lease });
        revived.ended_at = None;
        for r in old.iter().chain([&recent, &open, &revived]) {
            self.put(RULE, r, None).await?;
        }
        let purged = self.purge(RULE, Cutoff::Before(at(T0 + 5 * HOUR))).await?;
        if purged != 2 {
            return Err(broken(
                RULE,
                format!("a purge of the records ended before hour 5 answered {purged}, not 2"),
            ));
        }
        for r in &old {
            if let Some(kept) = self.get(RULE, &r.key).await? {
                return Err(broken(
                    RULE,
                    format!("{} survived its purge: {kept:?}", r.key),
                ));
            }
        }
        for r in [&recent, &open, &revived] {
            self.expect_stored(RULE, r).await?;
        }
        // Past every time: the ended one goes, the open ones never.
        let purged = self
            .purge(RULE, Cutoff::Before(DateTime::<Utc>::MAX_UTC))
            .await?;
        if purged != 1 {
            return Err(broken(
                RULE,
                format!("a purge past every time answered {purged}, not 1"),
            ));
        }
        for r in [&open, &revived] {
            self.expect_stored(RULE, r).await?;
        }
        Ok(())
    }

    async fn purge_by_the_stamping_clock(&self) -> Result<(), Broken> {
        const RULE: &str = "purge-by-the-stamping-clock";
        let read = self
            .store
            .get(&self.key("clock"))
            .await
            .map_err(|e| broken(RULE, format!("reading the store's time: {e}")))?;
        // The clock that stamps `ended_at`: the store's own if it tells
        // one, else the ledger's, here T0 + 100 h.
        let stamp = read.now.unwrap_or(at(T0 + 100 * HOUR));
        let ended = |id: &str, ago: TimeDelta| {
            let t = stamp - ago;
            Self::closed(
                self.in_flight(id, 1, 71, t),
                State::Succeeded {
                    outcome: "ok".into(),
                },
                t,
            )
        };
        let fresh = ended("clock-fresh", TimeDelta::minutes(10));
        let stale = ended("clock-stale", TimeDelta::hours(3));
        self.put(RULE, &fresh, None).await?;
        self.put(RULE, &stale, None).await?;
        // A ledger whose clock runs an hour fast of the stamping clock.
        let cutoff = Cutoff::Age {
            retention: Duration::from_secs(3600),
            now: stamp + TimeDelta::hours(1),
        };
        let fast = if read.now.is_some() {
            cutoff
        } else {
            // Without a clock of its own the store must use the ledger's
            // `now`: give it the stamping one.
            Cutoff::Age {
                retention: Duration::from_secs(3600),
                now: stamp,
            }
        };
        let purged = self.purge(RULE, fast).await?;
        if self.get(RULE, &fresh.key).await?.is_none() {
            return Err(broken(
                RULE,
                format!(
                    "a record that ended 10 minutes ago by the store's clock was purged \
                     under a retention of an hour ({fast:?})"
                ),
            ));
        }
        if self.get(RULE, &stale.key).await?.is_some() || purged != 1 {
            return Err(broken(
                RULE,
                format!(
                    "a record that ended 3 hours ago survived a retention of an hour \
                     ({fast:?}; {purged} purged)"
                ),
            ));
        }
        Ok(())
    }

    async fn fenced_write(&self) -> Result<(), Broken> {
        const RULE: &str = "fenced-write";
        let key = self.key("fenced");
        let read = self
            .store
            .get(&key)
            .await
            .map_err(|e| broken(RULE, format!("reading {key}: {e}")))?;
        let now = read.now.unwrap_or_else(Utc::now);
        let v1 = self.in_flight("fenced", 1, 91, now);
        self.put(RULE, &v1, None).await?;
        // The dispatch mark, while the lease lasts: written.
        let mut v2 = v1.clone();
        v2.version = 2;
        v2.tries[0].dispatched_at = Some(now);
        let until = now + TimeDelta::hours(1);
        if let Err(e) = self.store.put_until(&v2, Some(1), until).await {
            return Err(broken(
                RULE,
                format!("a write before its until ({until}) answered {e}"),
            ));
        }
        self.expect_stored(RULE, &v2).await?;
        let Some(now) = read.now else {
            return Ok(());
        };
        // The same write arriving after the lease ended: nothing written.
        let mut late = v2.clone();
        late.version = 3;
        late.tries[0].dispatched_at = Some(now + TimeDelta::seconds(1));
        let until = now - TimeDelta::seconds(1);
        match self.store.put_until(&late, Some(2), until).await {
            Err(Error::LeaseExpired { until: said, .. }) if said == until => {}
            other => {
                return Err(broken(
                    RULE,
                    format!(
                        "a write after its until ({until}, by the store's time {now}) \
                         answered {other:?}, not LeaseExpired"
                    ),
                ));
            }
        }
        self.expect_stored(RULE, &v2).await?;
        // A write that is both late and stale is a version conflict.
        match self.store.put_until(&late, Some(1), until).await {
            Err(Error::VersionConflict { .. }) => Ok(()),
            other => Err(broken(
                RULE,
                format!("a late write over a stale version answered {other:?}, not a conflict"),
            )),
        }
    }

    async fn time_moves_forward(&self) -> Result<(), Broken> {
        const RULE: &str = "time-moves-forward";
        let key = self.key("time");
        let mut last = None;
        for _ in 0..3 {
            let now = self
                .store
                .get(&key)
                .await
                .map_err(|e| broken(RULE, format!("reading {key}: {e}")))?
                .now;
            if let (Some(before), Some(now)) = (last, now)
                && now < before
            {
                return Err(broken(
                    RULE,
                    format!("the store's time went back from {before} to {now}"),
                ));
            }
            last = now;
        }
        Ok(())
    }
}
