//! An exact trailing-window rate limiter in which denied attempts count.
//!
//! A limit is N attempts per trailing window W (default 60 s), per key. At
//! any instant t the decision depends only on the attempts in `(t - W, t]`:
//! there is no fixed reset tick and no token-refill approximation. By
//! default DENIED attempts are recorded too, so a caller that keeps arriving
//! above the limit STAYS throttled for as long as it keeps arriving (this
//! surprises people coming from token buckets: retrying in a tight loop
//! never gets through). Once it slows below the limit, the window drains
//! within W. [`Policy::AllowedOnly`] records only allowed attempts instead.
//!
//! - [`Limiter`]: one window. [`KeyedLimiter`]: a window per key.
//! - [`LimitSet`]: several named limits for one call (a per-route limit and
//!   a shared bucket), denying if any denies and naming which.
//! - [`Decision`] / [`Combined`]: allowed with `remaining`, or denied with an
//!   exact `retry_after`.
//! - [`ApproxKeyedLimiter`](approx::ApproxKeyedLimiter) / [`BucketQuota`](approx::BucketQuota): for very large N, B
//!   sub-window counters per key; never admits more than N in any trailing
//!   W, may deny for at most W/B too long.
//! - [`Limits`]: one async check for a [`LimitSet`] kept in this process
//!   or, with the `redis` feature, in a Redis every replica shares
//!   (`Limits::redis`, `RedisConfig`), with a per-process fallback while
//!   the store cannot answer; [`Scope`] says where a decision was made.
//! - [`LimitTable`](config::LimitTable): limits from code defaults overridden by environment
//!   variables, with startup errors that name the variable and value.
//! - [`Clock`](clock::Clock), [`MonotonicClock`], [`ManualClock`](clock::ManualClock), [`Timestamp`](clock::Timestamp): time is
//!   injected; tests never sleep.
//! - [`Limiter::seed`] / [`KeyedLimiter::seed`]: rebuild windows from an
//!   audit trail after a restart, instead of handing everyone a fresh burst
//!   ([`Clock::at_wall_time`](clock::Clock::at_wall_time) places the trail's wall-clock times).
//!
//! # Example
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use ate_ratelimit::{KeyedLimiter, Quota, clock::ManualClock};
//!
//! let clock = ManualClock::default();
//! let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());
//! let limiter = KeyedLimiter::with_clock(quota, clock.clone());
//!
//! assert!(limiter.check(&"alice").is_allowed());
//! clock.advance(Duration::from_secs(10));
//! assert!(limiter.check(&"alice").is_allowed());
//! clock.advance(Duration::from_secs(5));
//! let denied = limiter.check(&"alice"); // t = 15 s
//! // The denial is recorded too: the last two attempts are at 10 s and 15 s,
//! // so an attempt is allowed again when the one at 10 s leaves, at 70 s.
//! assert_eq!(denied.retry_after(), Some(Duration::from_secs(55)));
//! assert!(limiter.check(&"bob").is_allowed());
//! ```
//!
//! # Boundary convention
//!
//! An attempt at time `a` counts at time `t` iff `t - W < a <= t`: an
//! attempt exactly W after another no longer counts it. [`Limiter`] keeps
//! whole nanoseconds and is exact at the clock's resolution. Keyed limiters
//! keep ticks of 1 µs (1 ms for windows over ~35 min, 1 s over ~24 days); a
//! recorded attempt rounds UP and "now" rounds DOWN, so rounding can only
//! make the limit stricter, never looser. With times on whole ticks they
//! are exact.
//!
//! # Memory
//!
//! A key holds the timestamps of the attempts inside its window, at most N,
//! as 4-byte offsets from a per-key base: a key at 1 request/s with W = 60 s
//! holds 60 slots. Its table entry is 16 bytes plus the key (24 for a
//! `u64` key): up to two attempts live in the entry itself, more in one
//! heap block that grows with the window and shrinks as it empties, going
//! back inline once the key has held at most one attempt for a whole
//! window (a key that pauses and bursts again refills its block instead of
//! growing a new one). A key
//! whose newest attempt is a window old holds no information and can be
//! evicted ([`KeyedLimiter::retain_recent`]) without changing any decision;
//! [`KeyedBuilder::max_keys`] bounds the table. [`Limiter`] (one window per
//! process) keeps its attempts as 8-byte nanoseconds.
//!
//! # Concurrency
//!
//! Every check is atomic: it decides and records under the lock of its
//! window (a spin lock for [`Limiter`], whose check holds it for a few
//! nanoseconds; `parking_lot` mutexes over key shards for keyed limiters).
//! The clock is read under that lock, so a window's attempts are recorded
//! in the order they take it.
//!
//! # Feature flags
//!
//! - `serde`: deserialize [`LimitTable`](config::LimitTable) entries and [`Policy`].
//! - `tokio`: `Limiter::until_allowed` and `KeyedLimiter::until_allowed`,
//!   async waits that do not record attempts while they sleep, and
//!   `TokioClock`, a clock on tokio's time for tests of them with paused
//!   time (a `ManualClock` does not move while they sleep).
//! - `redis-cluster`: `RedisConfig::cluster`, limits kept in a Redis
//!   Cluster (implies `redis`); with `test-util`, `testing::TestCluster`.
//! - `redis`: `RedisConfig`, `RedisStore`, `Fallback` and `Limits::redis`:
//!   limits shared by every replica (implies `tokio`).
//! - `test-util`: the `testing` module (reference model, proptest
//!   strategies; with `redis`, a throwaway `redis-server`).
#![warn(missing_docs)]

#[cfg(feature = "actix")]
pub mod actix;
pub mod approx;
pub mod clock;
pub mod config;
mod decision;
#[cfg(any(feature = "tower", feature = "actix"))]
pub mod http;
mod limiter;
mod limits;
mod lock;
#[cfg(feature = "redis")]
mod redis;
mod ring;
#[cfg(feature = "test-util")]
pub mod testing;
#[cfg(all(feature = "test-util", feature = "redis"))]
mod testing_redis;
#[cfg(feature = "tower")]
pub mod tower;
mod window;

pub use clock::MonotonicClock;
pub use decision::{Combined, Decision, Scope};
pub use limiter::{KeyedBuilder, KeyedLimiter, LimitId, LimitSet, Limiter, Policy, Quota, Seeded};
pub use limits::Limits;
#[cfg(feature = "redis")]
pub use redis::{Fallback, RedisConfig, RedisStore};

mod error;
pub use error::Error;

// The README's examples include the Redis backend's, so they compile with
// the `redis` feature (on in `cargo test --workspace` and the all-features
// runs).
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "redis"))]
pub struct ReadmeDoctests;
