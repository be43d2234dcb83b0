//! The SQL both PostgreSQL stores run (`PgStore`, feature `postgres`;
//! `AsyncPgStore`, feature `postgres-async`): one schema, one set of
//! statements, so both fronts share a database.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::Error;
use crate::store::{Cutoff, Read, decode_stored};
use crate::{Key, Record};

/// An error with its causes, `: `-joined: a PostgreSQL driver error
/// displays only its kind ("db error", "error connecting to server") and
/// keeps what went wrong (the server's message, "Connection refused") in
/// its source.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A driver error as the stores report it: [`Error::Storage`] with its
/// causes.
pub(crate) fn storage(e: impl std::error::Error) -> Error {
    Error::Storage(format!("postgres: {}", with_causes(&e)))
}

/// A conditional write that lost the race (or was made on a stale read):
/// what is stored now, as [`Error::VersionConflict`].
fn version_conflict(key: &Key, expected: Option<u64>, found: Option<i64>) -> Error {
    Error::VersionConflict {
        key: key.to_string(),
        expected,
        found: found.map(|v| v as u64),
    }
}

/// The schema version this crate writes and reads.
pub(crate) const SCHEMA_VERSION: u64 = 1;

/// Rows a purge statement deletes at most.
pub(crate) const PURGE_BATCH: i64 = 1_000;

/// Serializes the schema setup of replicas starting at once (`CREATE TABLE
/// IF NOT EXISTS` is not safe against itself); an arbitrary constant.
pub(crate) const SETUP_LOCK: i64 = 0x6174_655f_6c65_6467; // "ate_ledg"

pub(crate) const SETUP: &str = r#"
CREATE TABLE IF NOT EXISTS ate_ledger_meta (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS ate_ledger_records (
    scope       TEXT NOT NULL,
    id          TEXT NOT NULL,
    version     BIGINT NOT NULL,
    open        BOOLEAN NOT NULL,
    ended_at    TIMESTAMPTZ,
    record      TEXT NOT NULL,
    incarnation BIGINT,
    PRIMARY KEY (scope, id)
);
-- The incarnation of a stored record, read from its text without casting
-- it to jsonb (which refuses a record holding \u0000, as an answer or a
-- reason may, and a torn row): the record's last field, as serde writes
-- it, two's complement in a BIGINT; 0 for a whole record from before
-- incarnations; NULL for text that is not a whole record.
CREATE OR REPLACE FUNCTION ate_ledger_incarnation_of(record TEXT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $f$
    SELECT (CASE WHEN n >= 9223372036854775808
                 THEN n - 18446744073709551616 ELSE n END)::bigint
    FROM (SELECT CASE
        WHEN record ~ '"incarnation":[0-9]+\}\s*$'
            THEN substring(record from '"incarnation":([0-9]+)\}\s*$')::numeric
        WHEN record ~ '^\s*\{.*\}\s*$' THEN 0
    END AS n) x
$f$;
-- Tables made before the incarnation column: add it and fill it from
-- the records once. A row whose record cannot be read keeps NULL (it is
-- refused as corrupt when read, and never written over: see UPDATE), and
-- is counted in the server's log; it never stops a replica starting.
DO $$
DECLARE
    unreadable BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ate_ledger_meta WHERE name = 'incarnation_column') THEN
        ALTER TABLE ate_ledger_records ADD COLUMN IF NOT EXISTS incarnation BIGINT;
        UPDATE ate_ledger_records SET incarnation = ate_ledger_incarnation_of(record)
        WHERE incarnation IS NULL;
        SELECT count(*) INTO unreadable FROM ate_ledger_records WHERE incarnation IS NULL;
        IF unreadable > 0 THEN
            RAISE WARNING 'ate-ledger: % record(s) could not be read for their incarnation', unreadable;
        END IF;
        INSERT INTO ate_ledger_meta (name, value) VALUES ('incarnation_column', 1);
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS ate_ledger_records_open
    ON ate_ledger_records (scope, id) WHERE open;
CREATE INDEX IF NOT EXISTS ate_ledger_records_ended
    ON ate_ledger_records (ended_at) WHERE NOT open;
"#;

pub(crate) const SCHEMA_CHECK: &str =
    "SELECT value FROM ate_ledger_meta WHERE name = 'schema_version'";

pub(crate) const INSERT: &str = "INSERT INTO ate_ledger_records
     (scope, id, version, open, ended_at, record, incarnation)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (scope, id) DO NOTHING";

/// Conditional on the version and the incarnation. A row an older build
/// wrote during a rolling upgrade has no incarnation column yet: its
/// record's own is compared (and the column gets it here), so a writer of
/// another incarnation is refused there too. With `$9` (a lease's end,
/// [`Store::put_until`](crate::store::Store::put_until)), only before it
/// by the server's clock at the moment the row is written: a statement
/// that sat in a stalled connection and runs late writes nothing.
pub(crate) const UPDATE: &str = "UPDATE ate_ledger_records
     SET version = $3, open = $4, ended_at = $5, record = $6, incarnation = $7
     WHERE scope = $1 AND id = $2 AND version = $8
       AND (incarnation = $7
            OR (incarnation IS NULL AND ate_ledger_incarnation_of(record) = $7))
       AND ($9::timestamptz IS NULL OR clock_timestamp() < $9::timestamptz)";

/// After a write that changed no row: the stored version (NULL: no
/// record) and the server's time, to say why.
pub(crate) const REFUSAL_OF: &str = "SELECT clock_timestamp(), r.version
     FROM (SELECT 1) AS one
     LEFT JOIN ate_ledger_records r ON r.scope = $1 AND r.id = $2";

/// Deletes up to `$2` rows that ended before `$1`.
const PURGE_BEFORE: &str = "DELETE FROM ate_ledger_records
     WHERE NOT open AND ended_at < $1 AND (scope, id) IN (
         SELECT scope, id FROM ate_ledger_records
         WHERE NOT open AND ended_at < $1 LIMIT $2)";

/// Deletes up to `$2` rows that ended more than `$1` seconds ago by the
/// server's clock, the one that stamped them.
const PURGE_AGE: &str = "DELETE FROM ate_ledger_records
     WHERE NOT open AND ended_at < now() - make_interval(secs => $1)
       AND (scope, id) IN (
         SELECT scope, id FROM ate_ledger_records
         WHERE NOT open AND ended_at < now() - make_interval(secs => $1) LIMIT $2)";

/// A purge statement and its time parameter.
#[derive(Clone, Copy)]
pub(crate) enum Purge {
    Before(DateTime<Utc>),
    AgeSecs(f64),
}

impl Purge {
    /// The statement for `cutoff`, or `None` when no row can have ended
    /// that long ago (a retention of thousands of years, "keep forever":
    /// out of `timestamptz`'s range, which starts in 4714 BC, an error
    /// from the server).
    pub(crate) fn of(cutoff: Cutoff) -> Option<Self> {
        const YEAR: f64 = 365.25 * 24.0 * 3600.0;
        match cutoff {
            Cutoff::Age { retention, .. } => {
                let secs = retention.as_secs_f64();
                (secs < 5_000.0 * YEAR).then_some(Self::AgeSecs(secs))
            }
            other => other
                .local()
                .filter(|at| !before_first_day(*at))
                .map(Self::Before),
        }
    }

    pub(crate) fn sql(&self) -> &'static str {
        match self {
            Self::Before(_) => PURGE_BEFORE,
            Self::AgeSecs(_) => PURGE_AGE,
        }
    }

    pub(crate) fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Self::Before(at) => at,
            Self::AgeSecs(secs) => secs,
        }
    }
}

/// Whether no row can have ended before `cutoff`: `timestamptz` starts at
/// 4714-11-24 BC (chrono's year -4713).
fn before_first_day(cutoff: DateTime<Utc>) -> bool {
    chrono::NaiveDate::from_ymd_opt(-4713, 11, 24)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .is_some_and(|first| cutoff < first.and_utc())
}

/// One conditional write of a record, as both stores send it: an
/// `INSERT` (expecting no record) or an `UPDATE` conditional on the
/// version and incarnation, with its parameters.
pub(crate) struct Write {
    scope: String,
    id: String,
    version: i64,
    open: bool,
    ended_at: Option<DateTime<Utc>>,
    text: String,
    incarnation: i64,
    expected: Option<i64>,
    /// The lease's end, past which an update writes nothing.
    until: Option<DateTime<Utc>>,
}

impl Write {
    /// `record` over version `expected`; with `until`, only before it by
    /// the server's clock.
    pub(crate) fn of(
        record: &Record,
        expected: Option<u64>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Self, Error> {
        let key = &record.key;
        Ok(Self {
            scope: key.scope.clone(),
            id: key.id.clone(),
            version: to_i64(key, record.version)?,
            open: !record.state.is_closed(),
            ended_at: record.ended_at,
            text: serde_json::to_string(record).map_err(|e| Error::Storage(e.to_string()))?,
            incarnation: incarnation_column(record.incarnation),
            expected: expected.map(|v| to_i64(key, v)).transpose()?,
            until,
        })
    }

    /// Why a write that changed no row was refused, from a [`REFUSAL_OF`]
    /// row: [`Error::LeaseExpired`] if it came after its `until` with the
    /// version it expected still stored, else [`Error::VersionConflict`]
    /// naming what is stored.
    pub(crate) fn refusal(&self, row: &Row) -> Error {
        let now: DateTime<Utc> = row.get(0);
        let found: Option<i64> = row.get(1);
        let key = Key::new(self.scope.clone(), self.id.clone());
        match self.until {
            Some(until) if now >= until && found.is_some() && found == self.expected => {
                Error::LeaseExpired {
                    key: key.to_string(),
                    until,
                }
            }
            _ => version_conflict(&key, self.expected.map(|v| v as u64), found),
        }
    }

    /// The key's scope, as the statements take it.
    pub(crate) fn scope(&self) -> &String {
        &self.scope
    }

    /// The key's id, as the statements take it.
    pub(crate) fn id(&self) -> &String {
        &self.id
    }

    /// `INSERT` or `UPDATE`.
    pub(crate) fn sql(&self) -> &'static str {
        if self.expected.is_some() {
            UPDATE
        } else {
            INSERT
        }
    }

    /// The statement's parameters, in its order.
    pub(crate) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.scope,
            &self.id,
            &self.version,
            &self.open,
            &self.ended_at,
            &self.text,
            &self.incarnation,
        ];
        if let Some(expected) = &self.expected {
            params.push(expected);
            params.push(&self.until);
        }
        params
    }
}

/// A record's incarnation as the `incarnation` column holds it: the same
/// 64 bits, read as a signed `BIGINT`.
pub(crate) fn incarnation_column(incarnation: u64) -> i64 {
    i64::from_ne_bytes(incarnation.to_ne_bytes())
}

pub(crate) fn to_i64(key: &Key, version: u64) -> Result<i64, Error> {
    i64::try_from(version)
        .map_err(|_| Error::Storage(format!("{key}: version {version} does not fit a BIGINT")))
}

/// The record in a row, which must agree with the row's `version` and
/// `open` columns (the queries select on those).
pub(crate) fn decode(key: &Key, version: i64, open: bool, text: &str) -> Result<Record, Error> {
    let record = decode_stored(key, text.as_bytes())?;
    if i64::try_from(record.version) != Ok(version) || record.state.is_closed() == open {
        return Err(Error::Corrupt {
            what: format!("record {key}"),
            detail: "its version or open columns disagree with the record".into(),
        });
    }
    Ok(record)
}

/// The record of a key and the server's time, in one statement (one row,
/// the record's columns NULL when there is none).
pub(crate) const READ_AT: &str = "SELECT now(), r.version, r.open, r.record
     FROM (SELECT 1) AS one
     LEFT JOIN ate_ledger_records r ON r.scope = $1 AND r.id = $2";

/// Every open record and the server's time, in one statement (one row of
/// NULLs beside the time when none is open).
pub(crate) const OPEN_AT: &str = "SELECT now(), r.scope, r.id, r.version, r.open, r.record
     FROM (SELECT 1) AS one
     LEFT JOIN ate_ledger_records r ON r.open
     ORDER BY r.scope, r.id";

/// A [`READ_AT`] row as a [`Read`].
pub(crate) fn read_row(key: &Key, row: &Row) -> Result<Read, Error> {
    let now: DateTime<Utc> = row.get(0);
    let version: Option<i64> = row.get(1);
    let record = match version {
        None => None,
        Some(v) => Some(decode(key, v, row.get(2), row.get(3))?),
    };
    Ok(Read {
        record,
        now: Some(now),
    })
}

/// [`OPEN_AT`] rows as the open records and the server's time.
pub(crate) fn open_rows(rows: &[Row]) -> Result<(Vec<Record>, Option<DateTime<Utc>>), Error> {
    let now = rows.first().map(|r| r.get::<_, DateTime<Utc>>(0));
    let mut records = Vec::new();
    for r in rows {
        let (Some(scope), Some(id)) =
            (r.get::<_, Option<String>>(1), r.get::<_, Option<String>>(2))
        else {
            continue;
        };
        let key = Key::new(scope, id);
        records.push(decode(&key, r.get(3), r.get(4), r.get(5))?);
    }
    Ok((records, now))
}
