//! The store on PostgreSQL (feature `postgres`): one ledger shared by many
//! replicas of a service. Every write is one conditional statement (on the
//! version, the incarnation and, for a dispatch mark, the lease's end by
//! the server's clock), so a refused write changed nothing.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres::{Client, Config, NoTls, Socket, Statement};

use super::pg_sql::{
    OPEN_AT, PURGE_BATCH, Purge, READ_AT, REFUSAL_OF, SCHEMA_CHECK, SCHEMA_VERSION, SETUP,
    SETUP_LOCK, Write, decode, open_rows, read_row, storage, with_causes,
};
use crate::error::Error;
use crate::store::{Cutoff, Read, Store};
use crate::{Key, Record};

/// A durable store on PostgreSQL, for a ledger that several replicas (or
/// several workers) share: every replica connects its own `PgStore` to the
/// same database, and each transition is a conditional write on the
/// record's version, so two workers can never both move an attempt (the
/// loser gets [`Error::VersionConflict`] and the [`Ledger`](crate::Ledger)
/// re-reads).
///
/// - `put(.., None)` is `INSERT ... ON CONFLICT DO NOTHING`, `put(..,
///   Some(v))` is `UPDATE ... WHERE version = v`; each checks the row
///   count. Each call is its own transaction, durable when it returns under
///   PostgreSQL's default `synchronous_commit = on` (do not turn it off for
///   this database).
/// - Records are stored as JSON text beside the columns the queries need
///   (`version`, `open`, `ended_at`); one that does not decode, or whose
///   columns disagree with it, is [`Error::Corrupt`], never reinterpreted.
/// - Tables `ate_ledger_records` and `ate_ledger_meta` are created on
///   connect if missing (in the connection's `search_path`; put
///   `options='-c search_path=ledger'` in the connection string to choose a
///   schema). A database written by a newer schema is
///   [`Error::UnknownSchema`].
/// - Each connection is owned by a thread of the store's: calls from any
///   thread, async runtimes included, run there (the caller blocks for the
///   round trip, as on a file write; in an async handler, call the ledger
///   from `spawn_blocking`). [`connect`](Self::connect) opens one, so
///   calls run in turn; [`connect_pooled`](Self::connect_pooled) opens
///   several for concurrent callers. A connection that broke is reopened
///   on its next call (one the store opened itself).
///
/// A call waits for PostgreSQL: bound it in the connection string, for
/// example `connect_timeout=5 tcp_user_timeout=10
/// options='-c statement_timeout=5000'` (seconds, seconds, milliseconds),
/// so a partitioned database fails calls with [`Error::Storage`] instead
/// of holding them.
///
/// Recovery on a shared store: call
/// [`Ledger::recover`](crate::Ledger::recover), which resolves only attempts
/// whose lease expired (their worker is gone), or, at a worker's start,
/// [`Ledger::recover_owner`](crate::Ledger::recover_owner) with its own
/// name; never [`Ledger::recover_all`](crate::Ledger::recover_all), which
/// would take over attempts live replicas are still running.
///
/// ```no_run
/// use ate_ledger::{Ledger, PgStore};
///
/// let store = PgStore::connect("host=/run/postgresql user=app dbname=app")?;
/// let ledger = Ledger::new(store);
/// # Ok::<(), ate_ledger::Error>(())
/// ```
pub struct PgStore {
    /// Where calls go: the thread that owns the connection.
    jobs: mpsc::Sender<Job>,
    /// Where it points (never the password), for `Debug`.
    target: String,
}

/// One call, run on a connection's thread.
type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// Opens one connection, on its thread (with how to reopen it, if known).
type Open = Box<dyn FnOnce() -> Result<(Option<Reconnect>, Client), Error> + Send>;

/// Opens the connection again, with the same parameters and TLS connector.
type Reconnect = Box<dyn FnMut() -> Result<Client, postgres::Error> + Send>;

/// The connection, owned by one thread: the `postgres` client drives its
/// own runtime on every call, which panics on a thread already running
/// one (an async handler, `#[tokio::main]`). On its own thread, a store
/// works from any caller, async or not (the caller blocks, as on a file).
struct Conn {
    /// How to reconnect (`None` for a client the caller built).
    reconnect: Option<Reconnect>,
    client: Client,
    /// Bumped by any of the store's connections that finds itself broken:
    /// the others then check theirs before their next call, so after a
    /// failover one call fails, not one per connection.
    broken: Arc<AtomicU64>,
    /// The value of `broken` this connection last checked against.
    checked: u64,
    /// The store's statements, prepared on this connection as first used
    /// (so each call is one round trip, not a parse and an execute);
    /// emptied when the connection is reopened.
    statements: HashMap<&'static str, Statement>,
    /// Found dead after an error while its client still looked open:
    /// reopened before the next call.
    dead: bool,
}

impl Conn {
    /// Reopens the connection if it is closed, or, when another connection
    /// found itself broken since the last check, if it does not answer.
    /// Otherwise it asks the server nothing: a check is a round trip, and
    /// one before every call would double its latency.
    fn ensure_open(&mut self) -> Result<(), Error> {
        let broken = self.broken.load(Ordering::Acquire);
        let suspect = broken != self.checked;
        self.checked = broken;
        let Some(reconnect) = &mut self.reconnect else {
            return Ok(()); // a caller's client: it cannot be reopened
        };
        if self.client.is_closed()
            || self.dead
            || (suspect
                && self
                    .client
                    .is_valid(std::time::Duration::from_secs(5))
                    .is_err())
        {
            self.client = reconnect().map_err(storage)?;
            self.dead = false;
            self.statements.clear();
        }
        Ok(())
    }

    /// `sql`, prepared on this connection.
    fn prepared(&mut self, sql: &'static str) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).map_err(storage)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// The record schema this build writes and reads.
    pub const SCHEMA_VERSION: u64 = SCHEMA_VERSION;

    /// The most connections one store opens, a thread each (PostgreSQL
    /// serves 100 by default, for every client together). More is an
    /// error, not an attempt to start millions of threads.
    pub const MAX_CONNECTIONS: usize = 1_024;

    /// Connects without TLS (a Unix socket, or a network you trust) with a
    /// libpq-style connection string (`host=... user=... dbname=...`) or
    /// URL (`postgresql://user@host/db`), and creates the tables if
    /// missing. For TLS (a managed database that requires it), see
    /// [`connect_pooled_tls`](Self::connect_pooled_tls).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] naming what failed (a bad connection string, a
    /// server that cannot be reached or refuses the login, a failed TLS
    /// handshake), and [`Error::UnknownSchema`] for tables of a newer
    /// schema.
    pub fn connect(params: &str) -> Result<Self, Error> {
        Self::connect_pooled(params, NonZeroUsize::MIN)
    }

    /// [`connect`](Self::connect) with `connections` connections, each on a
    /// thread of its own, taking calls from one queue: calls from several
    /// threads (concurrent requests) run on as many connections at once,
    /// where one connection runs them in turn. Two calls on one key from
    /// different connections are safe for the same reason two replicas
    /// are: every write is conditional on the record's version. Measured
    /// with 8 threads each running begin, dispatch and close: 551 attempts/s
    /// on one connection, 1,204 on two, 1,355 on four (a 2-core machine,
    /// PostgreSQL on a Unix socket without fsync).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] naming what failed (a bad connection string, a
    /// server that cannot be reached or refuses the login, a failed TLS
    /// handshake, more than [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS)
    /// connections), and [`Error::UnknownSchema`] for tables of a newer
    /// schema.
    pub fn connect_pooled(params: &str, connections: NonZeroUsize) -> Result<Self, Error> {
        Self::connect_pooled_tls(params, connections, NoTls)
    }

    /// [`connect_pooled`](Self::connect_pooled) through a TLS connector
    /// from a crate such as `postgres-native-tls`, `postgres-openssl` or
    /// `tokio-postgres-rustls` (managed databases such as Amazon RDS for
    /// PostgreSQL 15 and later require TLS by default). Every connection,
    /// and every reconnection after a failover, goes through `tls`; the
    /// connection string's `sslmode` says whether TLS is required
    /// (`require`) or only tried (`prefer`, the default).
    ///
    /// A service that builds its connector elsewhere (with
    /// `postgres-native-tls`: `postgres_native_tls::MakeTlsConnector::new(
    /// native_tls::TlsConnector::new()?)`):
    ///
    /// ```no_run
    /// use std::num::NonZeroUsize;
    /// use ate_ledger::PgStore;
    /// use postgres::Socket;
    /// use postgres::tls::{MakeTlsConnect, TlsConnect};
    ///
    /// fn ledger_store<T>(tls: T) -> Result<PgStore, ate_ledger::Error>
    /// where
    ///     T: MakeTlsConnect<Socket> + Clone + Send + 'static,
    ///     T::TlsConnect: Send,
    ///     T::Stream: Send,
    ///     <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    /// {
    ///     PgStore::connect_pooled_tls(
    ///         "host=db.example user=svc dbname=ledger sslmode=require",
    ///         NonZeroUsize::new(4).unwrap(),
    ///         tls,
    ///     )
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] naming what failed (a bad connection string, a
    /// server that cannot be reached or refuses the login, a failed TLS
    /// handshake, more than [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS)
    /// connections), and [`Error::UnknownSchema`] for tables of a newer
    /// schema.
    pub fn connect_pooled_tls<T>(
        params: &str,
        connections: NonZeroUsize,
        tls: T,
    ) -> Result<Self, Error>
    where
        T: MakeTlsConnect<Socket> + Clone + Send + 'static,
        T::TlsConnect: Send,
        T::Stream: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        if connections.get() > Self::MAX_CONNECTIONS {
            return Err(Error::Storage(format!(
                "{connections} postgres connections asked of one store: it opens at most {} \
                 (a thread each)",
                Self::MAX_CONNECTIONS
            )));
        }
        let config: Config = params.parse().map_err(|e| {
            Error::Storage(format!("postgres connection string: {}", with_causes(&e)))
        })?;
        let target = format!(
            "dbname={} user={} ({} host(s))",
            config.get_dbname().unwrap_or("-"),
            config.get_user().unwrap_or("-"),
            config.get_hosts().len()
        );
        let opens = (0..connections.get())
            .map(|_| {
                let (config, tls) = (config.clone(), tls.clone());
                Box::new(move || {
                    let mut reconnect: Reconnect = Box::new(move || config.connect(tls.clone()));
                    let client = reconnect().map_err(storage)?;
                    Ok((Some(reconnect), client))
                }) as Open
            })
            .collect();
        Self::spawn(target, opens)
    }

    /// Uses a client the caller connected and creates the tables if
    /// missing. A store made this way cannot reconnect: once the connection
    /// breaks, calls fail with [`Error::Storage`]. For TLS, prefer
    /// [`connect_pooled_tls`](Self::connect_pooled_tls), which reconnects.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the tables cannot be created or read on that
    /// connection, and [`Error::UnknownSchema`] for tables of a newer
    /// schema.
    pub fn with_client(client: Client) -> Result<Self, Error> {
        let open: Open = Box::new(move || Ok((None, client)));
        Self::spawn("a caller's client".into(), vec![open])
    }

    /// Starts a thread per connection: each connects, sets the schema up
    /// (under the setup lock), reports, then takes calls from the shared
    /// queue until the store is dropped.
    fn spawn(target: String, opens: Vec<Open>) -> Result<Self, Error> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let inbox = Arc::new(Mutex::new(inbox));
        let (ready, opened) = mpsc::sync_channel::<Result<(), Error>>(opens.len());
        let count = opens.len();
        let broken = Arc::new(AtomicU64::new(0));
        for open in opens {
            let (ready, inbox, broken) = (ready.clone(), inbox.clone(), broken.clone());
            std::thread::Builder::new()
                .name("ate-ledger-pg".into())
                .spawn(move || {
                    let opened = open().and_then(|(reconnect, mut client)| {
                        Self::setup(&mut client)?;
                        Ok(Conn {
                            reconnect,
                            client,
                            broken,
                            checked: 0,
                            statements: HashMap::new(),
                            dead: false,
                        })
                    });
                    let mut conn = match opened {
                        Ok(conn) => {
                            let _ = ready.send(Ok(()));
                            conn
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    drop(ready);
                    loop {
                        // One idle thread waits on the queue at a time; the
                        // others wait for the lock.
                        let job = inbox.lock().recv();
                        match job {
                            Ok(job) => job(&mut conn),
                            Err(_) => return, // the store was dropped
                        }
                    }
                })
                .map_err(|e| Error::Storage(format!("cannot start a postgres thread: {e}")))?;
        }
        drop(ready);
        for _ in 0..count {
            // On an error, dropping `jobs` on return ends the other threads.
            opened
                .recv()
                .map_err(|_| Error::Storage("a postgres thread ended while connecting".into()))??;
        }
        Ok(Self { jobs, target })
    }

    fn setup(client: &mut Client) -> Result<(), Error> {
        let mut tx = client.transaction().map_err(storage)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK])
            .map_err(storage)?;
        tx.batch_execute(SETUP).map_err(storage)?;
        let supported = Self::SCHEMA_VERSION as i64;
        tx.execute(
            "INSERT INTO ate_ledger_meta (name, value) VALUES ('schema_version', $1)
             ON CONFLICT (name) DO NOTHING",
            &[&supported],
        )
        .map_err(storage)?;
        let found: i64 = tx.query_one(SCHEMA_CHECK, &[]).map_err(storage)?.get(0);
        if found != supported {
            return Err(Error::UnknownSchema {
                found: found as u64,
                supported: Self::SCHEMA_VERSION,
            });
        }
        tx.commit().map_err(storage)
    }

    /// Makes `write`: `Ok` iff it changed its row, else why not.
    fn write(&self, write: Write) -> Result<(), Error> {
        self.with(move |c| {
            let statement = c.prepared(write.sql())?;
            let written = c
                .client
                .execute(&statement, &write.params())
                .map_err(storage)?;
            if written == 1 {
                return Ok(());
            }
            // Refused: lost the race, a stale view, or past its lease.
            let row = c
                .client
                .query_one(REFUSAL_OF, &[&write.scope(), &write.id()])
                .map_err(storage)?;
            Err(write.refusal(&row))
        })
    }

    /// Runs `f` on the connection's thread, reopening the connection first
    /// if it broke, and waits for the answer.
    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |conn: &mut Conn| {
            let result = conn.ensure_open().and_then(|()| f(conn));
            // A server that ended the session (a failover, an
            // administrator) answers the next statement with an error
            // before the client sees the socket close: after a storage
            // error, one round trip says whether the connection is dead.
            if matches!(result, Err(Error::Storage(_)))
                && conn.reconnect.is_some()
                && !conn.client.is_closed()
                && conn
                    .client
                    .is_valid(std::time::Duration::from_secs(5))
                    .is_err()
            {
                conn.dead = true;
            }
            if conn.dead || conn.client.is_closed() {
                // Broken under this call: the others may be too.
                conn.checked = conn.broken.fetch_add(1, Ordering::AcqRel) + 1;
            }
            let _ = reply.send(result);
        });
        let gone = || Error::Storage("the postgres connection thread has ended".into());
        self.jobs.send(job).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

impl Store for PgStore {
    fn read(&self, key: &Key) -> Result<Read, Error> {
        let key = key.clone();
        self.with(move |c| {
            let statement = c.prepared(READ_AT)?;
            let row = c
                .client
                .query_one(&statement, &[&key.scope, &key.id])
                .map_err(storage)?;
            read_row(&key, &row)
        })
    }

    fn open_at(&self) -> Result<(Vec<Record>, Option<DateTime<Utc>>), Error> {
        self.with(|c| open_rows(&c.client.query(OPEN_AT, &[]).map_err(storage)?))
    }

    fn get(&self, key: &Key) -> Result<Option<Record>, Error> {
        let key = key.clone();
        self.with(move |c| {
            let row = c
                .client
                .query_opt(
                    "SELECT version, open, record FROM ate_ledger_records
                     WHERE scope = $1 AND id = $2",
                    &[&key.scope, &key.id],
                )
                .map_err(storage)?;
            row.map(|r| decode(&key, r.get(0), r.get(1), r.get(2)))
                .transpose()
        })
    }

    fn put(&self, record: &Record, expected: Option<u64>) -> Result<(), Error> {
        self.write(Write::of(record, expected, None)?)
    }

    fn put_until(
        &self,
        record: &Record,
        expected: Option<u64>,
        until: DateTime<Utc>,
    ) -> Result<(), Error> {
        self.write(Write::of(record, expected, Some(until))?)
    }

    fn open(&self) -> Result<Vec<Record>, Error> {
        self.with(|c| {
            let rows = c
                .client
                .query(
                    "SELECT scope, id, version, open, record FROM ate_ledger_records
                     WHERE open ORDER BY scope, id",
                    &[],
                )
                .map_err(storage)?;
            rows.iter()
                .map(|r| {
                    let key = Key::new(r.get::<_, String>(0), r.get::<_, String>(1));
                    decode(&key, r.get(2), r.get(3), r.get(4))
                })
                .collect()
        })
    }

    /// Deletes in statements of 1,000 rows (`PURGE_BATCH`), each a call of
    /// its own: a store's calls queue for its connections (one, made by
    /// `connect`), so one statement over every row past retention held up
    /// every transition behind it (a million rows: 428 ms on a server
    /// without fsync). A row revived since it was picked is kept: the
    /// `DELETE` checks `NOT open` on the row as it is when it deletes.
    fn purge(&self, cutoff: Cutoff) -> Result<usize, Error> {
        let Some(purge) = Purge::of(cutoff) else {
            return Ok(0);
        };
        let mut purged = 0;
        loop {
            let n = self.with(move |c| {
                c.client
                    .execute(purge.sql(), &[purge.param(), &PURGE_BATCH])
                    .map_err(storage)
            })?;
            purged += n as usize;
            if n < PURGE_BATCH as u64 {
                return Ok(purged);
            }
        }
    }
}
