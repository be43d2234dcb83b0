//! The throwaway-server helpers the Redis tests share.
// Each test file uses the part it needs.
#![allow(dead_code)]

use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::testing::TestRedis;
use ate_ratelimit::{Fallback, Quota, RedisConfig};

pub(crate) fn quota(n: u32, window: Duration) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), window).unwrap()
}

/// A store on `server`; a generous timeout, since debug builds on a busy
/// CI machine are slow, and no pause before trying a store found down.
pub(crate) fn store(
    server: &TestRedis,
    prefix: &str,
    fallback: Fallback,
) -> ate_ratelimit::RedisStore {
    RedisConfig::new(server.url())
        .prefix(prefix)
        .timeout(Duration::from_secs(2))
        .recheck_after(Duration::ZERO)
        .fallback(fallback)
        .connect()
        .unwrap()
}

/// A plain connection for looking at what the store holds.
pub(crate) async fn raw(server: &TestRedis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

pub(crate) fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}
