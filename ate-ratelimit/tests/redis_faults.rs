//! The Redis backend (feature `redis`) with the store failing under it,
//! over a throwaway `redis-server` of each test's own: killed, hung,
//! flushed, restarted, failed over, a flow that died without a word, a key
//! of the wrong type. Each check is decided (shared, by the fallback, or
//! refused as configured), never hangs past its timeout, never panics.
#![cfg(all(feature = "redis", feature = "test-util"))]

use std::time::Duration;

use ate_ratelimit::testing::TestRedis;
use ate_ratelimit::{
    Decision, Fallback, LimitSet, Limits, MonotonicClock, Policy, RedisConfig, Scope,
};

#[path = "common/redis_store.rs"]
mod redis_store;
use redis_store::{nz, quota, raw, store};

#[path = "common/relay.rs"]
mod relay;
use relay::Relay;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_falls_back_to_local_windows_until_it_returns() {
    let mut server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(3, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "kill", Fallback::Local));
    assert!(limits.check(&[id], "bob").await.is_allowed());
    assert_eq!(limits.scope(), Scope::Shared);
    server.kill();
    for _ in 0..4 {
        let d = limits.check(&[id], "bob").await;
        assert_eq!(d.scope(), Scope::Fallback);
        assert!(d.store_error().is_some());
    }
    assert_eq!(limits.scope(), Scope::Fallback);
    // The process's own window counted the four checks: three allowed.
    assert!(!limits.check(&[id], "bob").await.is_allowed());
    server.restart();
    let mut shared = None;
    for _ in 0..50 {
        let d = limits.check(&[id], "carol").await;
        if d.scope() == Scope::Shared {
            shared = Some(d);
            break;
        }
    }
    let d = shared.expect("shared again once the server is back");
    assert_eq!(d.remaining(), 2, "the restarted server is empty");
    assert_eq!(limits.scope(), Scope::Shared);
}

/// Under `Fallback::Refuse` a store that cannot answer refuses: every
/// decision is `Unavailable` with the configured retry, and nothing is
/// recorded in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_refuses_under_the_refuse_fallback() {
    let mut server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let a = set.add("a", quota(3, Duration::from_secs(60)));
    let b = set.add("b", quota(3, Duration::from_secs(60)));
    let store = RedisConfig::new(server.url())
        .timeout(Duration::from_secs(2))
        .recheck_after(Duration::ZERO)
        .fallback(Fallback::Refuse)
        .retry_after(Duration::from_secs(3))
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    server.kill();
    let d = limits.check(&[a, b], "dan").await;
    assert_eq!(d.scope(), Scope::Unavailable);
    assert!(!d.is_allowed());
    assert_eq!(d.denied_by(), ["a", "b"]);
    assert_eq!(
        d.decision("a"),
        Some(Decision::Unavailable {
            retry_after: Duration::from_secs(3)
        })
    );
    assert_eq!(d.retry_after_secs(), Some(3));
    assert_eq!(limits.scope(), Scope::Unavailable);
    assert_eq!(limits.set().keys_held(), 0, "nothing recorded in process");
}

/// A server that never answers (stopped, not closed): each check gives up
/// after the timeout, and once found down the store is skipped until
/// `recheck_after` has passed, so requests do not each wait the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_costs_one_timeout_then_is_skipped() {
    let server = TestRedis::start();
    // A listener that accepts and never answers stands in for the store.
    let silent = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let url = format!(
        "redis://127.0.0.1:{}/0",
        silent.local_addr().unwrap().port()
    );
    drop(server);
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(3, Duration::from_secs(60)));
    let store = RedisConfig::new(url)
        .timeout(Duration::from_millis(50))
        .recheck_after(Duration::from_secs(3_600))
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    let first = tokio::time::Instant::now();
    let d = limits.check(&[id], "eve").await;
    assert_eq!(d.scope(), Scope::Fallback);
    assert!(
        d.store_error().unwrap().contains("50ms"),
        "{:?}",
        d.store_error()
    );
    assert!(
        first.elapsed() < Duration::from_secs(2),
        "bounded by the timeout"
    );
    let then = tokio::time::Instant::now();
    for _ in 0..100 {
        assert_eq!(limits.check(&[id], "eve").await.scope(), Scope::Fallback);
    }
    assert!(
        then.elapsed() < Duration::from_millis(500),
        "skipped, not 100 timeouts: {:?}",
        then.elapsed()
    );
    drop(silent);
}

/// The script flushed from the server mid-run (SCRIPT FLUSH, a failover
/// to a replica without it): the next check loads it again and stays
/// shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_script_is_loaded_again() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(5, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "flush", Fallback::Refuse));
    assert_eq!(limits.check(&[id], "f").await.remaining(), 4);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    let d = limits.check(&[id], "f").await;
    assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
    assert_eq!(d.remaining(), 3);
}

/// A key holding someone else's data (a string where a window's list
/// belongs): a clear error naming the problem, the fallback decides, no
/// panic; other callers are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_type_is_a_clear_error_not_a_panic() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(5, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "typed", Fallback::Local));
    let _: () = redis::cmd("SET")
        .arg("typed:{=mallory}:notify")
        .arg("not a list")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    let d = limits.check(&[id], "mallory").await;
    assert_eq!(d.scope(), Scope::Fallback);
    assert!(
        d.store_error().unwrap().contains("WRONGTYPE"),
        "{:?}",
        d.store_error()
    );
    assert_eq!(limits.check(&[id], "oscar").await.scope(), Scope::Shared);
}

/// A weighted check over the limit is refused before any round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_over_the_limit_is_an_error() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(5, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "cost", Fallback::Refuse));
    let err = limits.check_n(&[id], "c", nz(6)).await.unwrap_err();
    assert!(err.to_string().contains("\"notify\""), "{err}");
    assert_eq!(
        limits.check_n(&[id], "c", nz(5)).await.unwrap().remaining(),
        0
    );
}

/// Connecting outside a tokio runtime is an error that says so, not a
/// panic inside the client.
#[test]
fn connecting_outside_a_runtime_is_an_error() {
    let err = RedisConfig::new("redis://127.0.0.1:6379/0")
        .connect()
        .unwrap_err();
    assert_eq!(err, ate_ratelimit::Error::NoRuntime);
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}

/// A URL the client cannot read is refused at once, without its password.
#[test]
fn a_bad_url_is_refused_without_repeating_its_password() {
    let err = RedisConfig::new("redis://app:s3cret@cache:notaport/0")
        .connect()
        .unwrap_err()
        .to_string();
    assert!(!err.contains("s3cret"), "{err}");
    assert!(err.contains("redis://app:***@cache:notaport/0"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_connection_is_replaced_after_one_timeout() {
    let server = TestRedis::start();
    let relay = Relay::start(server.port()).await;
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(100, Duration::from_secs(60)));
    let store = RedisConfig::new(relay.url())
        .prefix("dead")
        .timeout(Duration::from_millis(500))
        .recheck_after(Duration::ZERO)
        .fallback(Fallback::Refuse)
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    assert_eq!(limits.check(&[id], "ann").await.scope(), Scope::Shared);
    relay.freeze();
    // The flow is dead: this check waits out its timeout, and refuses.
    assert_eq!(limits.check(&[id], "ann").await.scope(), Scope::Unavailable);
    // The next goes over a new connection, shared again (before: every
    // check timed out on the dead flow until the kernel gave up).
    let d = limits.check(&[id], "ann").await;
    assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_left_up_read_only_by_a_failover_is_left_for_the_new_one() {
    // The ElastiCache / Sentinel-DNS case: the name now points at the new
    // master, while the connection held goes to the old one, up as a
    // read-only replica. Before, READONLY was a per-key error and the
    // connection was kept for good: every check fell back.
    let old = TestRedis::start();
    let new = TestRedis::start();
    let relay = Relay::start(old.port()).await;
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(100, Duration::from_secs(60)));
    let store = RedisConfig::new(relay.url())
        .prefix("failover")
        .timeout(Duration::from_secs(2))
        .recheck_after(Duration::from_secs(3_600))
        .fallback(Fallback::Refuse)
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    assert_eq!(limits.check(&[id], "ann").await.scope(), Scope::Shared);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(new.port())
        .query_async(&mut raw(&old).await)
        .await
        .unwrap();
    relay.point_at(new.port());
    let d = limits.check(&[id], "ann").await;
    assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
    for _ in 0..5 {
        assert_eq!(limits.check(&[id], "ann").await.scope(), Scope::Shared);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_first_check_reconnects_and_is_shared() {
    let mut server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(100, Duration::from_secs(60)));
    // A replica that would decide alone for an hour once it found the
    // store down.
    let store = RedisConfig::new(server.url())
        .prefix("restart")
        .timeout(Duration::from_secs(2))
        .recheck_after(Duration::from_secs(3_600))
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    assert_eq!(limits.check(&[id], "ann").await.scope(), Scope::Shared);
    server.restart();
    // The old connection is closed; the check goes again on a new one.
    let d = limits.check(&[id], "ann").await;
    assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
    assert_eq!(d.remaining(), 99, "the restarted server is empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_bad_key_does_not_take_the_store_away_from_others() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(5, Duration::from_secs(60)));
    let store = RedisConfig::new(server.url())
        .prefix("perkey")
        .timeout(Duration::from_secs(2))
        .recheck_after(Duration::from_secs(3_600))
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    let _: () = redis::cmd("SET")
        .arg("perkey:{=mallory}:notify")
        .arg("not a list")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    let d = limits.check(&[id], "mallory").await;
    assert_eq!(d.scope(), Scope::Fallback);
    assert!(d.store_error().unwrap().contains("WRONGTYPE"));
    // Everyone else is still shared (before: the store was marked down
    // for recheck_after, an hour here).
    assert_eq!(limits.check(&[id], "oscar").await.scope(), Scope::Shared);
    assert_eq!(limits.scope(), Scope::Shared);
}
