//! The store handle: one script call per check, the down marks that keep
//! a failing store from adding its timeout to every request.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManagerConfig;

use super::config::{RedisConfig, Target, redacted};
use super::conn::{Client, Conn, unreachable};
use crate::error::Error;

impl RedisConfig {
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
        Ok(RedisStore::open(self, client, conn, slots))
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
/// - On a cluster, "the store" is the node that serves the call's slot: a
///   failure marks every slot of that node (as the slot map last read
///   says: by [`ping`](Self::ping), or by the store itself after its first
///   call), so a node that hangs costs one timeout per `recheck_after`,
///   whichever of its slots the callers touch; the other nodes' callers
///   stay shared. The new connection after a failure is made, and read
///   the slot map, in a task of its own, and replaces the old one once it
///   reached the cluster.
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
    /// Which slots share a node (a cluster's).
    #[cfg(feature = "redis-cluster")]
    topology: super::cluster::Topology,
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
    /// A handle over `conn`, made by `client`; `slots` down marks (1, or
    /// one per cluster slot).
    pub(super) fn open(config: RedisConfig, client: Client, conn: Conn, slots: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                conn: parking_lot::RwLock::new(conn),
                client,
                script: redis::Script::new(SCRIPT),
                started: Instant::now(),
                up: AtomicBool::new(false),
                down_until_ms: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                #[cfg(feature = "redis-cluster")]
                topology: super::cluster::Topology::default(),
                config,
            }),
        }
    }

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
    /// updates [`is_up`](Self::is_up). On a cluster it also asks one node
    /// for the slot map (which tells the store which slots share a node,
    /// so that a node that hangs is skipped as a whole); only the `PING`
    /// decides the answer.
    ///
    /// # Errors
    ///
    /// The reason the store did not answer.
    pub async fn ping(&self) -> Result<(), String> {
        let mut conn = self.connection();
        let result = tokio::time::timeout(self.inner.config.timeout, self.ping_on(&mut conn)).await;
        let result = match result {
            Ok(result) => result,
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

    /// `PING` on one Redis; `CLUSTER SLOTS` on a cluster, learned.
    async fn ping_on(&self, conn: &mut Conn) -> Result<(), String> {
        let answer = redis::cmd("PING")
            .query_async::<String>(conn)
            .await
            .map(drop)
            .map_err(|e| e.to_string());
        #[cfg(feature = "redis-cluster")]
        if answer.is_ok() {
            self.learn_topology(conn).await;
        }
        answer
    }

    /// On a cluster, asks one node for the slot map (`CLUSTER SLOTS`) and
    /// learns it; an error or a reply it cannot read leaves the map as it
    /// was (it only widens down marks: checks work without it).
    #[cfg(feature = "redis-cluster")]
    async fn learn_topology(&self, conn: &mut Conn) {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let Conn::Cluster(c) = conn else {
            return;
        };
        self.inner.topology.tried(self.now_ms());
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        if let Ok(reply) = c.route_command(cmd, routing).await {
            self.inner.topology.learn(&reply);
        }
    }

    /// The connection calls use now.
    fn connection(&self) -> Conn {
        self.inner.conn.read().clone()
    }

    /// A new connection for the calls after this one; the old one goes
    /// once the calls holding it end. One Redis: made at once (it connects
    /// on first use). A cluster: made, and its slot map read, by a task of
    /// its own, and swapped in once it works (a cluster connection would
    /// otherwise keep a node's flow that died without a word: it retries a
    /// timed-out answer on the same flow).
    fn replace_connection(&self) {
        match self.inner.client {
            Client::One(..) => {
                if let Ok(fresh) = self.inner.client.connect() {
                    *self.inner.conn.write() = fresh;
                }
            }
            #[cfg(feature = "redis-cluster")]
            Client::Cluster(..) => self.renew(true),
        }
    }

    /// On a cluster, in a task of its own and one at a time: with `fresh`,
    /// a new connection, swapped in once it reached the cluster; then the
    /// slot map, learned over the connection in use. Each step is bounded
    /// by a few timeouts; one that fails leaves things as they were.
    #[cfg(feature = "redis-cluster")]
    fn renew(&self, fresh: bool) {
        if !self.inner.topology.start_renewing() {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            let bound = store.inner.config.timeout.saturating_mul(4);
            if fresh
                && let Ok(Some(Ok(conn))) =
                    tokio::time::timeout(bound, store.inner.client.connect_now()).await
            {
                *store.inner.conn.write() = conn;
            }
            let mut conn = store.connection();
            let _ = tokio::time::timeout(bound, store.learn_topology(&mut conn)).await;
            store.inner.topology.done_renewing();
        });
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
    /// On a cluster, a failure marks every slot of the node that serves
    /// `slot`, as far as the slot map knows.
    fn mark(&self, slot: usize, up: bool) {
        self.inner.up.store(up, Ordering::Release);
        if !up {
            let recheck =
                u64::try_from(self.inner.config.recheck_after.as_millis()).unwrap_or(u64::MAX);
            let until = self.now_ms().saturating_add(recheck);
            #[cfg(feature = "redis-cluster")]
            if self.inner.down_until_ms.len() > 1 {
                for range in self.inner.topology.node_slots(slot) {
                    for mark in &self.inner.down_until_ms[range] {
                        mark.store(until, Ordering::Release);
                    }
                }
                return;
            }
            self.inner.down_until_ms[slot].store(until, Ordering::Release);
            return;
        }
        let mark = &self.inner.down_until_ms[slot];
        if mark.load(Ordering::Relaxed) != 0 {
            // Read first: a store on every call would bounce the line
            // between cores.
            mark.store(0, Ordering::Release);
        }
        // A cluster whose slot map is not known yet learns it now, off the
        // check's path.
        #[cfg(feature = "redis-cluster")]
        if self.inner.down_until_ms.len() > 1
            && self.inner.topology.wants_learning(|| self.now_ms())
        {
            self.renew(false);
        }
    }

    /// Where the down mark of a call's keys is kept: their slot on a
    /// cluster (every key of one call shares it).
    fn slot(&self, key: &str) -> usize {
        if self.inner.down_until_ms.len() == 1 {
            return 0;
        }
        #[cfg(feature = "redis-cluster")]
        return super::cluster::slot(key.as_bytes());
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
                    // A node's own answer timeout (a cluster's) reads as
                    // ours.
                    let reason = if e.is_timeout() {
                        self.timed_out()
                    } else {
                        e.to_string()
                    };
                    break (Err(reason), false);
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
const SCRIPT: &str = include_str!("window.lua");
