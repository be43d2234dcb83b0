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

#[cfg(feature = "redis-cluster")]
mod cluster;
mod config;
mod conn;
mod store;

pub use config::{Fallback, RedisConfig};
pub use store::RedisStore;
pub(crate) use store::{Answer, Times, Window};
