//! Limits shared by every replica, kept in Redis (feature `redis`).
//!
//! Each limit's window for a caller is one Redis list: the times of the
//! last N recorded attempts, newest first, in microseconds. One Lua script
//! (run with `EVALSHA`, loaded again on `NOSCRIPT`) drops what left the
//! window, decides, records and sets the key's expiry for every limit of a
//! call, atomically, in one round trip. The rules are the in-process ones
//! ([`LimitSet`](crate::LimitSet)): the trailing window `(t - W, t]`,
//! exact `remaining` and `retry_after`, denials recorded under
//! [`Policy::CountDenied`](crate::Policy::CountDenied), all or nothing
//! under [`Policy::AllowedOnly`](crate::Policy::AllowedOnly).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::Error;

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
    url: String,
    prefix: String,
    timeout: Duration,
    fallback: Fallback,
    retry_after: Duration,
    recheck_after: Duration,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redacted(&self.url))
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
        Self {
            url: url.into(),
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
        let bad = |reason: String| Error::RedisUrl {
            url: redacted(&self.url),
            reason,
        };
        let client = redis::Client::open(self.url.as_str()).map_err(|e| bad(e.to_string()))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        // The bound on a call is one `tokio::time::timeout` around it
        // (connecting included); a response timeout of the manager's own
        // would be a second timer on every call.
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None)
            .set_number_of_retries(1)
            .set_max_delay(self.timeout);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager.clone())
            .map_err(|e| bad(e.to_string()))?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                conn: parking_lot::RwLock::new(conn),
                client,
                manager,
                script: redis::Script::new(SCRIPT),
                started: Instant::now(),
                up: AtomicBool::new(false),
                down_until_ms: AtomicU64::new(0),
                config: self,
            }),
        })
    }
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
    conn: parking_lot::RwLock<ConnectionManager>,
    client: redis::Client,
    manager: ConnectionManagerConfig,
    script: redis::Script,
    config: RedisConfig,
    started: Instant,
    /// Whether the last call reached the store.
    up: AtomicBool,
    /// Until this many ms after `started`, checks skip the store.
    down_until_ms: AtomicU64,
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
    pub(crate) window_us: u64,
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
    /// "Now", rounded down to a microsecond.
    pub(crate) now_us: u64,
    /// When the attempt is recorded, rounded up.
    pub(crate) at_us: u64,
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
        self.mark(result.is_ok());
        result
    }

    /// The connection calls use now.
    fn connection(&self) -> ConnectionManager {
        self.inner.conn.read().clone()
    }

    /// A new connection for the calls after this one (made on first use);
    /// the old one goes once the calls holding it end.
    fn replace_connection(&self) {
        if let Ok(fresh) = ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.manager.clone(),
        ) {
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

    fn mark(&self, up: bool) {
        self.inner.up.store(up, Ordering::Release);
        if !up {
            let recheck =
                u64::try_from(self.inner.config.recheck_after.as_millis()).unwrap_or(u64::MAX);
            self.inner
                .down_until_ms
                .store(self.now_ms().saturating_add(recheck), Ordering::Release);
        }
    }

    /// Whether checks skip the store for now (found unreachable less than
    /// `recheck_after` ago).
    fn skipping(&self) -> bool {
        !self.is_up() && self.now_ms() < self.inner.down_until_ms.load(Ordering::Acquire)
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
        if self.skipping() {
            return Err(format!(
                "unreachable less than {:?} ago (RedisConfig::recheck_after)",
                self.inner.config.recheck_after
            ));
        }
        let mut invocation = self.inner.script.prepare_invoke();
        for w in windows {
            invocation.key(self.key(caller, w.name));
        }
        invocation.arg(cost).arg(u8::from(count_denied));
        match times {
            Some(t) => invocation.arg(t.now_us).arg(t.at_us),
            None => invocation.arg("").arg(""),
        };
        for w in windows {
            invocation.arg(w.limit).arg(w.window_us);
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
                Ok(Ok(flat)) if flat.len() == 4 * windows.len() => {
                    let answers = flat
                        .chunks_exact(4)
                        .map(|a| Answer {
                            allowed: a[0] == 1,
                            count: u32::try_from(a[1]).unwrap_or(u32::MAX),
                            wait: Duration::from_micros(u64::try_from(a[2]).unwrap_or(0)),
                            reset: Duration::from_micros(u64::try_from(a[3]).unwrap_or(0)),
                        })
                        .collect();
                    break (Ok(answers), true);
                }
                Ok(Ok(flat)) => {
                    let message = format!(
                        "the script answered {} values for {} limits",
                        flat.len(),
                        windows.len()
                    );
                    break (Err(message), true);
                }
            }
        };
        self.mark(reached);
        answer
    }
}

/// Whether `e` says the server was not reached (or the connection broke),
/// rather than that it answered this call with an error.
fn unreachable(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || e.is_timeout()
}

/// The check of one call against every limit it touches. Times are whole
/// microseconds; a list holds the last N recorded attempts, newest first.
const SCRIPT: &str = r"
-- KEYS[i]: limit i's window for this caller.
-- ARGV: cost, '1' to record denials too (CountDenied) or '0' (all or
-- nothing), now and the attempt's time in microseconds ('' for the server's
-- clock), then each limit's N and window in microseconds.
local cost = tonumber(ARGV[1])
local count_denied = ARGV[2] == '1'
local now, at
-- On the server's clock, calls run one at a time and times only go up (a
-- server clock stepped back could leave the list unsorted for a window:
-- an expired attempt kept longer, stricter, never looser), so the newest
-- need not be read. Times given by the caller are raised to it.
local given = ARGV[3] ~= ''
if given then
  now = tonumber(ARGV[3])
  at = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  at = now
end
local n = #KEYS
local limits, windows, counts, newest, oldests = {}, {}, {}, {}, {}
local all = true
for i = 1, n do
  local key = KEYS[i]
  local limit = tonumber(ARGV[3 + 2 * i])
  local window = tonumber(ARGV[4 + 2 * i])
  limits[i] = limit
  windows[i] = window
  -- An attempt at a counts at now iff a > now - window; the oldest is last.
  local edge = now - window
  local oldest = redis.call('LINDEX', key, -1)
  while oldest and tonumber(oldest) <= edge do
    redis.call('RPOP', key)
    oldest = redis.call('LINDEX', key, -1)
  end
  oldests[i] = oldest and tonumber(oldest) or nil
  if oldest then
    if given then newest[i] = tonumber(redis.call('LINDEX', key, 0)) end
    -- Under CountDenied every limit records, and LPUSH gives the count.
    if not count_denied then
      counts[i] = redis.call('LLEN', key)
      if counts[i] + cost > limit then all = false end
    end
  else
    counts[i] = 0
    if cost > limit then all = false end
  end
end
local out = {}
for i = 1, n do
  local key, limit, window = KEYS[i], limits[i], windows[i]
  local len = counts[i]
  if count_denied or all then
    -- Time never goes backwards within a key: the list stays sorted.
    local t = at
    if newest[i] and newest[i] > t then t = newest[i] end
    local s = string.format('%.0f', t)
    -- More than N at one instant would only push out each other.
    local push = math.min(cost, limit)
    local after
    if push == 1 then
      after = redis.call('LPUSH', key, s)
    else
      local left = push
      while left > 0 do
        local batch = {}
        for j = 1, math.min(left, 1000) do batch[j] = s end
        after = redis.call('LPUSH', key, unpack(batch))
        left = left - #batch
      end
    end
    len = after - push
    counts[i] = len
    if after > limit then
      redis.call('LTRIM', key, 0, limit - 1)
      after = limit
    end
    -- The key holds nothing once its newest attempt is a window old.
    redis.call('PEXPIRE', key, math.max(1, math.ceil((t + window - now) / 1000)))
    len = after
    if not oldests[i] then oldests[i] = t end
  end
  -- Until the same cost fits again: when the entry at index N - cost (the
  -- newest that must leave) leaves.
  local wait = 0
  if len > limit - cost then
    wait = tonumber(redis.call('LINDEX', key, limit - cost)) + window - now
  end
  -- When the oldest attempt held leaves (what LTRIM dropped was older).
  local reset = 0
  if oldests[i] then
    if len >= limit then
      reset = tonumber(redis.call('LINDEX', key, -1)) + window - now
    else
      reset = oldests[i] + window - now
    end
  end
  out[4 * i - 3] = (counts[i] + cost <= limit) and 1 or 0
  out[4 * i - 2] = counts[i]
  out[4 * i - 1] = wait
  out[4 * i] = reset
end
return out
";

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
