//! How to reach the store ([`RedisConfig`]) and what a check does while it
//! cannot ([`Fallback`]). A config names no connection: `connect` (in
//! `store.rs`) turns it into a store handle.

use std::fmt;
use std::time::Duration;

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
    pub(super) target: Target,
    pub(super) prefix: String,
    pub(super) timeout: Duration,
    pub(super) fallback: Fallback,
    pub(super) retry_after: Duration,
    pub(super) recheck_after: Duration,
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
}

/// Where the store is.
#[derive(Clone)]
pub(super) enum Target {
    /// One Redis (a primary, or a proxy in front of several).
    One(String),
    /// A Redis Cluster's seed nodes.
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
}

/// `url` with any password replaced by `***`.
pub(super) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

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
