//! The store on PostgreSQL for async services (feature `postgres-async`):
//! `tokio-postgres` connections from a `deadpool-postgres` pool, the same
//! schema and statements as `PgStore` (feature `postgres`). Every call is
//! bounded by the call timeout; a write that timed out may still run on
//! the server later, which only a fenced one (`put_until`) cannot land.

use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use super::pg_sql::{
    OPEN_AT, PURGE_BATCH, Purge, READ_AT, REFUSAL_OF, SCHEMA_CHECK, SCHEMA_VERSION, SETUP,
    SETUP_LOCK, Write, open_rows, read_row, storage,
};
use crate::error::Error;
use crate::store::{AsyncStore, Cutoff, Read, StoreFuture};
use crate::{Key, Record};

/// A durable store on PostgreSQL for a ledger several replicas share, on
/// a `deadpool-postgres` pool: every call awaits a pooled `tokio-postgres`
/// connection, so no runtime worker ever blocks, and the crate runs no
/// thread or pool of its own. Hand in the service's own pool (any TLS
/// connector it was built with), or let [`connect`](Self::connect) build
/// one without TLS.
///
/// Reads and writes run as statements prepared once per connection
/// (deadpool's statement cache), so each is one round trip. Behind
/// PgBouncer in transaction mode that needs PgBouncer 1.21 or later with
/// `max_prepared_statements` set.
///
/// ```no_run
/// use ate_ledger::{AsyncLedger, AsyncPgStore};
///
/// # async fn run() -> Result<(), ate_ledger::Error> {
/// let store = AsyncPgStore::connect("postgres://app@db/app", 16).await?;
/// let ledger = AsyncLedger::new(store);
/// # let _ = ledger; Ok(()) }
/// ```
///
/// Every call is bounded: it answers [`Error::Storage`] after
/// [`call_timeout`](Self::with_call_timeout) (5 s by default) whether the
/// pool had no free connection, the server could not be reached, or it
/// stalled mid-statement, so a service's 503 path runs instead of a
/// request hanging. (A write that timed out may still land: the ledger
/// reads again before it acts on one.) [`connect`](Self::connect) also
/// bounds the pool's own waits (for a free connection, to create one, to
/// recycle one) by the same default.
#[derive(Clone)]
pub struct AsyncPgStore {
    pool: Pool,
    timeout: Duration,
}

impl std::fmt::Debug for AsyncPgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("AsyncPgStore")
            .field("max_size", &status.max_size)
            .field("size", &status.size)
            .field("call_timeout", &self.timeout)
            .finish()
    }
}

impl AsyncPgStore {
    /// A store on `pool`, after creating the schema if it is missing (the
    /// same as `PgStore`'s, so both fronts share one database).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if no connection can be had or the schema cannot
    /// be set up; [`Error::UnknownSchema`] for a database of a newer
    /// version.
    pub async fn new(pool: Pool) -> Result<Self, Error> {
        let mut client = pool.get().await.map_err(storage)?;
        let tx = client.transaction().await.map_err(storage)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK])
            .await
            .map_err(storage)?;
        tx.batch_execute(SETUP).await.map_err(storage)?;
        let supported = SCHEMA_VERSION as i64;
        tx.execute(
            "INSERT INTO ate_ledger_meta (name, value) VALUES ('schema_version', $1)
             ON CONFLICT (name) DO NOTHING",
            &[&supported],
        )
        .await
        .map_err(storage)?;
        let found: i64 = tx
            .query_one(SCHEMA_CHECK, &[])
            .await
            .map_err(storage)?
            .get(0);
        if found != supported {
            return Err(Error::UnknownSchema {
                found: found as u64,
                supported: SCHEMA_VERSION,
            });
        }
        tx.commit().await.map_err(storage)?;
        drop(client);
        Ok(Self {
            pool,
            timeout: Self::DEFAULT_CALL_TIMEOUT,
        })
    }

    /// The longest a call waits by default (for a connection, and for the
    /// server's answer), and the pool waits [`connect`](Self::connect)
    /// sets: 5 s.
    pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

    /// The store with each call bounded by `timeout` instead of
    /// [`DEFAULT_CALL_TIMEOUT`](Self::DEFAULT_CALL_TIMEOUT) (a zero timeout
    /// is taken as 1 ms: every call fails fast).
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// `call`, or [`Error::Storage`] once the call timeout has passed.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Storage(format!(
                "postgres: {what}: no answer within {:?} (pool exhausted, server unreachable \
                 or stalled)",
                self.timeout
            ))),
        }
    }

    /// Makes `write`: `Ok` iff it changed its row, else why not.
    async fn write(&self, write: Write) -> Result<(), Error> {
        let client = self.pool.get().await.map_err(storage)?;
        let statement = client.prepare_cached(write.sql()).await.map_err(storage)?;
        let written = client
            .execute(&statement, &write.params())
            .await
            .map_err(storage)?;
        if written == 1 {
            return Ok(());
        }
        // Refused: lost the race, a stale view, or past its lease.
        let row = client
            .query_one(REFUSAL_OF, &[write.scope(), write.id()])
            .await
            .map_err(storage)?;
        Err(write.refusal(&row))
    }

    /// A store on a new pool of at most `max_connections` connections to
    /// `params` (a URL or `key=value` string), without TLS. For TLS build
    /// the pool with your connector and use [`new`](Self::new).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] naming what is wrong with `params` or a
    /// `max_connections` of 0, or as for [`new`](Self::new).
    pub async fn connect(params: &str, max_connections: usize) -> Result<Self, Error> {
        if max_connections == 0 {
            return Err(Error::Storage(
                "max_connections is 0: a pool needs at least one connection".into(),
            ));
        }
        let config: tokio_postgres::Config = params
            .parse()
            .map_err(|e| Error::Storage(format!("invalid postgres connection string: {e}")))?;
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Self::DEFAULT_CALL_TIMEOUT))
            .create_timeout(Some(Self::DEFAULT_CALL_TIMEOUT))
            .recycle_timeout(Some(Self::DEFAULT_CALL_TIMEOUT))
            .build()
            .map_err(storage)?;
        Self::new(pool).await
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

impl AsyncStore for AsyncPgStore {
    fn get<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Read> {
        Box::pin(self.bounded("read", async move {
            let client = self.pool.get().await.map_err(storage)?;
            let statement = client.prepare_cached(READ_AT).await.map_err(storage)?;
            let row = client
                .query_one(&statement, &[&key.scope, &key.id])
                .await
                .map_err(storage)?;
            read_row(key, &row)
        }))
    }

    fn put<'a>(&'a self, record: &'a Record, expected: Option<u64>) -> StoreFuture<'a, ()> {
        Box::pin(self.bounded("write", async move {
            self.write(Write::of(record, expected, None)?).await
        }))
    }

    fn put_until<'a>(
        &'a self,
        record: &'a Record,
        expected: Option<u64>,
        until: DateTime<Utc>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.bounded("write", async move {
            self.write(Write::of(record, expected, Some(until))?).await
        }))
    }

    fn open(&self) -> StoreFuture<'_, (Vec<Record>, Option<DateTime<Utc>>)> {
        Box::pin(self.bounded("list open records", async move {
            let client = self.pool.get().await.map_err(storage)?;
            open_rows(&client.query(OPEN_AT, &[]).await.map_err(storage)?)
        }))
    }

    fn purge(&self, cutoff: Cutoff) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let Some(purge) = Purge::of(cutoff) else {
                return Ok(0);
            };
            let mut purged = 0;
            loop {
                // Each batch is bounded on its own: a purge of many rows
                // takes as many calls.
                let n = self
                    .bounded("purge", async {
                        let client = self.pool.get().await.map_err(storage)?;
                        client
                            .execute(purge.sql(), &[purge.param(), &PURGE_BATCH])
                            .await
                            .map_err(storage)
                    })
                    .await?;
                purged += n as usize;
                if n < PURGE_BATCH as u64 {
                    return Ok(purged);
                }
            }
        })
    }
}
