//! Limits shared by every replica, kept in Redis (feature `redis`).
//!
//! Each limit's window for a caller is one Redis list of runs (a time, the
//! attempts recorded at it, a running total), newest first, holding at
//! most the last N recorded attempts. One Lua script (run with `EVALSHA`,
//! loaded again on `NOSCRIPT`) drops what left the window, decides, records
//! and sets the key's expiry for every limit of a call, atomically, in one
//! round trip: it reads both ends of each list and writes its head,
//! whatever the check's cost or N. The rules are the in-process ones
//! ([`LimitSet`](crate::LimitSet)), on the same tick: the trailing window
//! `(t - W, t]`, exact `remaining` and `retry_after`, denials recorded under
//! [`Policy::CountDenied`](crate::Policy::CountDenied), all or nothing
//! under [`Policy::AllowedOnly`](crate::Policy::AllowedOnly).
//!
//! With the `redis-cluster` feature the store may be a Redis Cluster
//! (`RedisConfig::cluster`): a call's keys share one hash tag (the
//! caller), so each check is still one script call on one node.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::Error;

/// What a check does while the store cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Fallback {
    /// Decide with this process's own exact windows (the same limits, in
    /// process) until the store answers again: the pod keeps serving, and
    /// each replica enforces the limit on the traffic it gets. The default:
    /// a shared cache that blinks must not take every pod's traffic down.
    #[default]
    Local,
    /// Refuse every check with [`Decision::Unavailable`](crate::Decision::Unavailable)
    /// (answer 503 with `Retry-After`) until the store answers again.
    Refuse,
}

/// How to reach the store, and what to do when it cannot be reached.
///
/// ```
/// use std::time::Duration;
/// use ate_ratelimit::{Fallback, RedisConfig};
///
/// let config = RedisConfig::new("redis://127.0.0.1:6379/0")
///     .prefix("checkout")
///     .timeout(Duration::from_millis(50))
///     .fallback(Fallback::Refuse);
/// assert_eq!(config.fallback_policy(), Fallback::Refuse);
/// ```
#[derive(Clone)]
#[must_use = "a config does nothing until `connect` is called"]
pub struct RedisConfig {
    target: Target,
    prefix: String,
    timeout: Duration,
    fallback: Fallback,
    retry_after: Duration,
    recheck_after: Duration,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            Target::One(url) => redacted(url),
            #[cfg(feature = "redis-cluster")]
            Target::Cluster(nodes) => {
                let nodes: Vec<String> = nodes.iter().map(|n| redacted(n)).collect();
                format!("cluster {}", nodes.join(","))
            }
        };
        f.debug_struct("RedisConfig")
            .field("target", &target)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("fallback", &self.fallback)
            .field("retry_after", &self.retry_after)
            .field("recheck_after", &self.recheck_after)
            .finish()
    }
}

impl RedisConfig {
    /// The default bound on one check's round trip: 25 ms. A loopback or
    /// same-zone round trip takes well under a millisecond; past this, the
    /// store counts as unreachable for that check.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(25);

    /// A store at `url` (`redis://[user:password@]host:port/db`, or
    /// `rediss://` with TLS where the `redis` crate is built with it), with
    /// the key prefix `ate`, [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT),
    /// [`Fallback::Local`], a `Retry-After` of 1 s when refusing, and a
    /// store found unreachable tried again after 1 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::One(url.into()))
    }

    /// A store in a Redis Cluster (feature `redis-cluster`), found through
    /// `nodes` (seed URLs, `redis://host:port`; one that answers is
    /// enough), otherwise as [`new`](Self::new). The client follows
    /// `MOVED`/`ASK` and topology changes by itself; every key of one call
    /// is in one slot (the caller is the hash tag), so a check is still one
    /// script call.
    ///
    /// While a slot has no master (its master died and no replica is
    /// promoted yet, or the cluster reports itself down), checks of the
    /// callers in that slot take the fallback; the others stay shared. A
    /// failover can lose what the old master recorded and had not yet
    /// copied to the replica it promotes (replication is asynchronous):
    /// at most the attempts of that last moment are forgotten, so the limit
    /// errs open only by those, for one window.
    ///
    /// ```
    /// use ate_ratelimit::RedisConfig;
    ///
    /// let config = RedisConfig::cluster(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"]);
    /// assert!(format!("{config:?}").contains("cluster"));
    /// ```
    #[cfg(feature = "redis-cluster")]
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            prefix: "ate".into(),
            timeout: Self::DEFAULT_TIMEOUT,
            fallback: Fallback::Local,
            retry_after: Duration::from_secs(1),
            recheck_after: Duration::from_secs(1),
        }
    }

    /// The key prefix, so several services share one Redis: keys are
    /// `PREFIX:{=CALLER}:LIMIT`. The caller is a hash tag, so every key of
    /// one call is in one Redis Cluster slot.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The bound on one check's round trip (and on connecting): past it
    /// the check is decided by the fallback.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What checks do while the store cannot answer.
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// The `retry_after` of [`Decision::Unavailable`](crate::Decision::Unavailable)
    /// under [`Fallback::Refuse`].
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// How long checks skip a store found unreachable before one tries it
    /// again, so that a store that hangs does not add the timeout to every
    /// request. Zero: every check tries.
    pub fn recheck_after(mut self, recheck_after: Duration) -> Self {
        self.recheck_after = recheck_after;
        self
    }

    /// The fallback configured.
    pub fn fallback_policy(&self) -> Fallback {
        self.fallback
    }

    /// The configured `Retry-After` of a refusal.
    pub(crate) fn retry_after_value(&self) -> Duration {
        self.retry_after
    }

    /// A store handle. It connects lazily, on the first check, and
    /// reconnects by itself after the server restarts, so a service may
    /// start while the store is down (its checks then take the fallback).
    /// Call it inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::RedisUrl`] for a URL the client cannot read (its password,
    /// if any, is not repeated in the message); [`Error::NoRuntime`]
    /// outside a tokio runtime.
    pub fn connect(self) -> Result<RedisStore, Error> {
        let bad = |url: &str, reason: String| Error::RedisUrl {
            url: redacted(url),
            reason,
        };
        let (client, slots) = match &self.target {
            Target::One(url) => {
                let client =
                    redis::Client::open(url.as_str()).map_err(|e| bad(url, e.to_string()))?;
                // The bound on a call is one `tokio::time::timeout` around
                // it (connecting included); a response timeout of the
                // manager's own would be a second timer on every call.
                let manager = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(1)
                    .set_max_delay(self.timeout);
                (Client::One(client, manager), 1)
            }
            #[cfg(feature = "redis-cluster")]
            Target::Cluster(nodes) => {
                if nodes.is_empty() {
                    return Err(bad("", "a cluster needs at least one seed node".into()));
                }
                for node in nodes {
                    redis::Client::open(node.as_str()).map_err(|e| bad(node, e.to_string()))?;
                }
                // The cluster client bounds each node's answer itself (and
                // reconnects a node that gave none); our outer timeout
                // still bounds the whole check.
                let client = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(self.timeout)
                    .response_timeout(self.timeout)
                    .retries(2)
                    .min_retry_wait(1)
                    .max_retry_wait(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
                    .build()
                    .map_err(|e| bad(&nodes.join(","), e.to_string()))?;
                (Client::Cluster(client, self.timeout), 16_384)
            }
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let conn = client.connect().map_err(|e| match &self.target {
            Target::One(url) => bad(url, e.to_string()),
            #[cfg(feature = "redis-cluster")]
            Target::Cluster(nodes) => bad(&nodes.join(","), e.to_string()),
        })?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                conn: parking_lot::RwLock::new(conn),
                client,
                script: redis::Script::new(SCRIPT),
                started: Instant::now(),
                up: AtomicBool::new(false),
                down_until_ms: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                config: self,
            }),
        })
    }
}

/// Where the store is.
#[derive(Clone)]
enum Target {
    /// One Redis (a primary, or a proxy in front of several).
    One(String),
    /// A Redis Cluster's seed nodes.
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
}

/// How new connections are made.
enum Client {
    One(redis::Client, ConnectionManagerConfig),
    /// The client, and the bound on connecting to a node and on its
    /// answer.
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster::ClusterClient, Duration),
}

impl Client {
    /// A connection that connects on first use.
    fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Client::One(client, manager) => Ok(Conn::One(ConnectionManager::new_lazy_with_config(
                client.clone(),
                manager.clone(),
            )?)),
            #[cfg(feature = "redis-cluster")]
            Client::Cluster(client, timeout) => Ok(Conn::Cluster(
                client.get_pending_async_connection_with_config(
                    redis::cluster::ClusterConfig::new()
                        .set_connection_timeout(*timeout)
                        .set_response_timeout(*timeout),
                ),
            )),
        }
    }
}

/// One multiplexed connection, or a cluster client's connections to every
/// node.
#[derive(Clone)]
enum Conn {
    One(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// text between the first `{` and the next `}`, if not empty) or of the
/// whole key, modulo 16,384.
#[cfg(feature = "redis-cluster")]
fn slot(key: &[u8]) -> usize {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    usize::from(crc16::State::<crc16::XMODEM>::calculate(tag)) % 16_384
}

/// `url` with any password replaced by `***`.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// A handle on the shared store. Clones share one multiplexed connection.
/// `Send + Sync`.
///
/// How it meets a failing store:
///
/// - A call that gets no answer within the timeout (a stalled server, or a
///   flow that died without a word: a dropped NAT or load-balancer entry)
///   takes the fallback, and the next call goes over a new connection.
/// - A call that cannot reach the server (a connection a restart closed,
///   a reset) is tried once more on a new connection within the same
///   timeout, so the first check after a restart is shared. A check whose
///   request went out and only its reply was lost may then be counted
///   twice: stricter, never looser.
/// - Only a failure to reach the server marks the store down for every
///   caller (checks then take the fallback for `recheck_after`); an error
///   the server answers about one call (a key of another type) answers
///   that call from the fallback alone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The connection, replaced after a timeout or a failure to reach the
    /// server: a flow that died without a word (a dropped NAT or load
    /// balancer entry, a hung proxy) never errors, so the manager itself
    /// would keep it.
    conn: parking_lot::RwLock<Conn>,
    client: Client,
    script: redis::Script,
    config: RedisConfig,
    started: Instant,
    /// Whether the last call reached the store.
    up: AtomicBool,
    /// Until this many ms after `started`, checks skip the store: one
    /// entry for one Redis, one per slot for a cluster (a slot without a
    /// master is skipped alone).
    down_until_ms: Box<[AtomicU64]>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.inner.config)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

/// One limit of a call, as the script needs it.
pub(crate) struct Window<'a> {
    pub(crate) name: &'a str,
    pub(crate) limit: u32,
    /// The window in ticks, and the tick in microseconds: the in-process
    /// geometry, so both backends round alike.
    pub(crate) window_ticks: u64,
    pub(crate) tick_us: u64,
}

/// One limit's answer from the script.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) allowed: bool,
    /// Attempts in the window before this call.
    pub(crate) count: u32,
    /// Until the same cost would fit, given what was recorded.
    pub(crate) wait: Duration,
    /// Until the oldest attempt held leaves.
    pub(crate) reset: Duration,
}

/// Times passed to the script: `None` reads the server's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    /// "Now" in nanoseconds; the script gets it in microseconds, rounded
    /// down, and the attempt's time rounded up.
    pub(crate) now_ns: u64,
}

impl RedisStore {
    /// Whether the last call reached the store (false before the first).
    pub fn is_up(&self) -> bool {
        self.inner.up.load(Ordering::Acquire)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// One `PING`, bounded by the timeout: for a startup log or a
    /// readiness check of a service that refuses without the store. It
    /// updates [`is_up`](Self::is_up).
    ///
    /// # Errors
    ///
    /// The reason the store did not answer.
    pub async fn ping(&self) -> Result<(), String> {
        let mut conn = self.connection();
        let result = tokio::time::timeout(
            self.inner.config.timeout,
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await;
        let result = match result {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(self.timed_out()),
        };
        if result.is_err() {
            self.replace_connection();
        }
        // One Redis: a failed ping marks it down. A cluster's ping reaches
        // one node, which says nothing of the others' slots.
        if self.inner.down_until_ms.len() == 1 {
            self.mark(0, result.is_ok());
        } else {
            self.inner.up.store(result.is_ok(), Ordering::Release);
        }
        result
    }

    /// The connection calls use now.
    fn connection(&self) -> Conn {
        self.inner.conn.read().clone()
    }

    /// A new connection for the calls after this one (made on first use);
    /// the old one goes once the calls holding it end. A cluster client
    /// replaces a node's connection by itself (it bounds each node's
    /// answer), so its connections stay.
    fn replace_connection(&self) {
        if let Client::One(..) = self.inner.client
            && let Ok(fresh) = self.inner.client.connect()
        {
            *self.inner.conn.write() = fresh;
        }
    }

    fn timed_out(&self) -> String {
        format!(
            "no answer within {:?} (RedisConfig::timeout)",
            self.inner.config.timeout
        )
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records whether a call about the keys in `slot` reached the store.
    fn mark(&self, slot: usize, up: bool) {
        self.inner.up.store(up, Ordering::Release);
        let mark = &self.inner.down_until_ms[slot];
        if !up {
            let recheck =
                u64::try_from(self.inner.config.recheck_after.as_millis()).unwrap_or(u64::MAX);
            mark.store(self.now_ms().saturating_add(recheck), Ordering::Release);
        } else if mark.load(Ordering::Relaxed) != 0 {
            // Read first: a store on every call would bounce the line
            // between cores.
            mark.store(0, Ordering::Release);
        }
    }

    /// Where the down mark of a call's keys is kept: their slot on a
    /// cluster (every key of one call shares it).
    fn slot(&self, key: &str) -> usize {
        if self.inner.down_until_ms.len() == 1 {
            return 0;
        }
        #[cfg(feature = "redis-cluster")]
        return slot(key.as_bytes());
        #[cfg(not(feature = "redis-cluster"))]
        {
            let _ = key;
            0
        }
    }

    /// Whether checks of the keys in `slot` skip the store for now (found
    /// unreachable less than `recheck_after` ago).
    fn skipping(&self, slot: usize) -> bool {
        let until = self.inner.down_until_ms[slot].load(Ordering::Acquire);
        until != 0 && self.now_ms() < until
    }

    /// The key of `limit`'s window for `caller`.
    fn key(&self, caller: &str, limit: &str) -> String {
        format!("{}:{{={caller}}}:{limit}", self.inner.config.prefix)
    }

    /// Runs the script for one call: `Err` with the reason when the store
    /// did not answer (or answered with an error).
    pub(crate) async fn run(
        &self,
        caller: &str,
        windows: &[Window<'_>],
        cost: u32,
        count_denied: bool,
        times: Option<Times>,
    ) -> Result<Vec<Answer>, String> {
        let mut invocation = self.inner.script.prepare_invoke();
        let mut slot = 0;
        for (i, w) in windows.iter().enumerate() {
            let key = self.key(caller, w.name);
            if i == 0 {
                slot = self.slot(&key);
                if self.skipping(slot) {
                    return Err(format!(
                        "unreachable less than {:?} ago (RedisConfig::recheck_after)",
                        self.inner.config.recheck_after
                    ));
                }
            }
            invocation.key(key);
        }
        invocation.arg(cost).arg(u8::from(count_denied));
        match times {
            Some(t) => invocation
                .arg(t.now_ns / 1_000)
                .arg(t.now_ns.div_ceil(1_000)),
            None => invocation.arg("").arg(""),
        };
        for w in windows {
            invocation.arg(w.limit).arg(w.window_ticks).arg(w.tick_us);
        }
        // A failure to reach the server (a connection a restart closed, a
        // reset) is tried once more on a new connection within the same
        // deadline: a call whose request went out and only its reply was
        // lost may then be counted twice, which is stricter, never looser.
        let deadline = tokio::time::Instant::now() + self.inner.config.timeout;
        let mut tries = 0;
        let (answer, reached) = loop {
            tries += 1;
            let mut conn = self.connection();
            let result =
                tokio::time::timeout_at(deadline, invocation.invoke_async::<Vec<i64>>(&mut conn))
                    .await;
            match result {
                Err(_) => {
                    self.replace_connection();
                    break (Err(self.timed_out()), false);
                }
                Ok(Err(e)) if unreachable(&e) => {
                    self.replace_connection();
                    if tries == 1 && tokio::time::Instant::now() < deadline {
                        continue;
                    }
                    break (Err(e.to_string()), false);
                }
                // The server answered, with an error about this call (a key
                // of another type, a script error): it is up for everyone.
                Ok(Err(e)) => break (Err(e.to_string()), true),
                Ok(Ok(flat)) if flat.len() == 1 + 4 * windows.len() => {
                    // Absolute times in µs to waits: exact in nanoseconds
                    // against a given "now", as in process.
                    let until = |at_us: i64| -> Duration {
                        let at_us = u64::try_from(at_us).unwrap_or(0);
                        match times {
                            Some(t) => Duration::from_nanos(
                                at_us.saturating_mul(1_000).saturating_sub(t.now_ns),
                            ),
                            None => Duration::from_micros(
                                at_us.saturating_sub(u64::try_from(flat[0]).unwrap_or(0)),
                            ),
                        }
                    };
                    let answers = flat[1..]
                        .chunks_exact(4)
                        .map(|a| Answer {
                            allowed: a[0] == 1,
                            count: u32::try_from(a[1]).unwrap_or(u32::MAX),
                            wait: until(a[2]),
                            reset: until(a[3]),
                        })
                        .collect();
                    break (Ok(answers), true);
                }
                Ok(Ok(flat)) => {
                    let message = format!(
                        "the script answered {} values for {} limits",
                        flat.len().saturating_sub(1),
                        windows.len()
                    );
                    break (Err(message), true);
                }
            }
        };
        self.mark(slot, reached);
        answer
    }
}

/// Whether `e` says the server was not reached (or the connection broke),
/// rather than that it answered this call with an error. A server that
/// answers that it cannot take writes now (`READONLY`: a master demoted to
/// a replica by a failover that left it up, behind a DNS name or a proxy
/// that now points elsewhere; `MASTERDOWN`, `LOADING`, `TRYAGAIN`,
/// `CLUSTERDOWN`) counts too: the answer is a new connection, not an error
/// about this key.
fn unreachable(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
            )
        )
}

/// The check of one call against every limit it touches.
///
/// A window is one list of runs, newest first, each 28 bytes: a time in
/// ticks of the limit's own tick (the in-process one: 1 µs,
/// 1 ms or 1 s), the attempts recorded at it, the attempts recorded on the
/// key up to and including it, and until when (in ticks) the key's expiry
/// already holds. The attempts held are the head's `cum` less the oldest
/// run's `cum - count`, so a check reads both ends and writes the head:
/// its server time and memory do not grow with its cost or with N. The
/// expiry is set to two windows at most once a window, not on every call.
const SCRIPT: &str = include_str!("redis/window.lua");

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_password_in_a_url_is_never_repeated() {
        assert_eq!(
            redacted("redis://app:s3cret@cache:6379/0"),
            "redis://app:***@cache:6379/0"
        );
        assert_eq!(redacted("redis://:s3cret@cache/1"), "redis://:***@cache/1");
        assert_eq!(redacted("redis://cache:6379"), "redis://cache:6379");
    }
}
