//! The Redis backend on a real Redis Cluster of 3 masters and 3 replicas
//! (feature `redis-cluster`): calls spread over every master share one
//! window across replicas, a master killed mid-run costs the callers of
//! its slots the fallback only until its replica takes over, a node that
//! hangs costs one timeout (not one per slot), and a flow to a node that
//! died without a word is replaced.
#![cfg(all(feature = "redis-cluster", feature = "test-util"))]

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use ate_ratelimit::testing::TestCluster;
use ate_ratelimit::{
    Fallback, LimitId, LimitSet, Limits, MonotonicClock, Policy, Quota, RedisConfig, Scope,
};

#[path = "common/relay.rs"]
mod relay;
use relay::Relay;

fn quota(n: u32, window: Duration) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), window).unwrap()
}

/// One replica: its own limit set and its own cluster client.
fn replica(cluster: &TestCluster, n: u32) -> (Limits, LimitId) {
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(n, Duration::from_secs(3_600)));
    let store = RedisConfig::cluster(cluster.urls())
        .prefix("c")
        .timeout(Duration::from_secs(1))
        .recheck_after(Duration::from_millis(100))
        .fallback(Fallback::Local)
        .connect()
        .unwrap();
    (Limits::redis(set, store), id)
}

/// Callers, four per master, keyed by the master that serves them.
fn callers_on_every_master(cluster: &TestCluster) -> BTreeMap<u16, Vec<String>> {
    let mut by_master: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        let caller = format!("caller{i}");
        let master = cluster.master_of(&format!("c:{{={caller}}}:notify"));
        let list = by_master.entry(master).or_default();
        if list.len() < 4 {
            list.push(caller);
        }
        if by_master.len() == 3 && by_master.values().all(|l| l.len() == 4) {
            break;
        }
    }
    by_master
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_each_callers_window_on_every_master() {
    const N: u32 = 5;
    let cluster = TestCluster::start();
    let replicas = [replica(&cluster, N), replica(&cluster, N)];
    let callers = callers_on_every_master(&cluster);
    assert_eq!(callers.len(), 3, "callers on three masters");
    for caller in callers.values().flatten() {
        let mut allowed = 0;
        for attempt in 0..12 {
            let (limits, id) = &replicas[attempt % 2];
            let d = limits.check(&[*id], caller).await;
            assert_eq!(d.scope(), Scope::Shared, "{caller}: {:?}", d.store_error());
            allowed += u32::from(d.is_allowed());
        }
        assert_eq!(allowed, N, "{caller}: 12 attempts over two replicas");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_costs_its_callers_the_fallback_until_failover() {
    let mut cluster = TestCluster::start();
    let (limits, id) = replica(&cluster, 1_000);
    let callers = callers_on_every_master(&cluster);
    let all: Vec<&String> = callers.values().flatten().collect();
    for caller in &all {
        assert_eq!(limits.check(&[id], caller).await.scope(), Scope::Shared);
    }
    let (&victim, theirs) = callers.iter().next().unwrap();
    cluster.kill(victim);
    let killed = Instant::now();
    let mut fell_back = false;
    let mut shared_again = None;
    while killed.elapsed() < Duration::from_secs(30) {
        for caller in &all {
            let d = limits.check(&[id], caller).await;
            // Never refused, never an error: shared or decided locally.
            assert!(
                matches!(d.scope(), Scope::Shared | Scope::Fallback),
                "{caller}: {:?}",
                d.scope()
            );
            assert!(d.is_allowed(), "{caller}: far under its limit");
            if theirs.contains(caller) && d.scope() == Scope::Fallback {
                fell_back = true;
            }
        }
        if fell_back {
            let mut shared = true;
            for caller in &all {
                shared &= limits.check(&[id], caller).await.scope() == Scope::Shared;
            }
            if shared {
                shared_again = Some(killed.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(fell_back, "the dead master's callers took the fallback");
    let took = shared_again.expect("shared again, without a restart, once the replica took over");
    cluster.wait_until_ok();
    assert_ne!(
        cluster.master_of(&format!("c:{{={}}}:notify", theirs[0])),
        victim
    );
    eprintln!("shared again {took:?} after the kill");
}

/// Sends `signal` (`STOP`, `CONT`) to the node on `port`.
fn signal(cluster: &TestCluster, port: u16, signal: &str) {
    let pid = cluster.pid(port).expect("a live node");
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// How many of the checks that failed with `errors` waited out the
/// timeout (rather than skipping a store found unreachable).
fn waited_out(errors: &[Option<String>]) -> usize {
    errors
        .iter()
        .filter(|e| e.as_deref().is_some_and(|e| e.contains("no answer within")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_cluster_costs_one_timeout_per_node_not_per_slot() {
    let cluster = TestCluster::start();
    let callers = callers_on_every_master(&cluster);
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(1_000, Duration::from_secs(3_600)));
    let store = RedisConfig::cluster(cluster.urls())
        .prefix("c")
        .timeout(Duration::from_millis(300))
        .recheck_after(Duration::from_secs(60))
        .fallback(Fallback::Local)
        .connect()
        .unwrap();
    // A cluster's ping reads the slot map: which slots share a node.
    store.ping().await.unwrap();
    let limits = Limits::redis(set, store);
    let all: Vec<&String> = callers.values().flatten().collect();
    for caller in &all {
        assert_eq!(limits.check(&[id], caller).await.scope(), Scope::Shared);
    }
    // Every master hangs (SIGSTOP: connections open, nothing answers; no
    // replica can be elected without a master's vote).
    for &master in callers.keys() {
        signal(&cluster, master, "STOP");
    }
    let mut decisions = Vec::new();
    for caller in &all {
        let d = limits.check(&[id], caller).await;
        assert_eq!(
            d.scope(),
            Scope::Fallback,
            "{caller}: {:?}",
            d.store_error()
        );
        assert!(d.is_allowed(), "{caller}: far under its limit");
        decisions.push(d.store_error().map(str::to_owned));
    }
    for &master in callers.keys() {
        signal(&cluster, master, "CONT");
    }
    // Before: each of the 12 slots waited out its own timeout.
    let waited = waited_out(&decisions);
    assert!(
        (1..=3).contains(&waited),
        "{waited} of {} checks waited out the timeout; one per node is the bound",
        all.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_to_a_node_that_died_without_a_word_is_replaced() {
    let cluster = TestCluster::start();
    // Callers first: once the masters announce their relays, the slot map
    // names the relays' ports.
    let callers = callers_on_every_master(&cluster);
    let mut relays = BTreeMap::new();
    for &master in callers.keys() {
        let relay = Relay::start(master).await;
        cluster.announce(master, relay.port());
        relays.insert(master, relay);
    }
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add("notify", quota(1_000, Duration::from_secs(3_600)));
    let seeds: Vec<String> = relays
        .values()
        .map(|r| format!("redis://127.0.0.1:{}", r.port()))
        .collect();
    let store = RedisConfig::cluster(seeds)
        .prefix("c")
        .timeout(Duration::from_millis(500))
        .recheck_after(Duration::from_secs(1))
        .fallback(Fallback::Refuse)
        .connect()
        .unwrap();
    let limits = Limits::redis(set, store);
    let all: Vec<&String> = callers.values().flatten().collect();
    for caller in &all {
        let d = limits.check(&[id], caller).await;
        assert_eq!(d.scope(), Scope::Shared, "{caller}: {:?}", d.store_error());
    }
    // The flows to one master die silently (a dropped NAT or load
    // balancer entry); new connections through its relay still work.
    let (&victim, theirs) = callers.iter().next().unwrap();
    relays[&victim].freeze();
    let frozen = Instant::now();
    let mut decisions = Vec::new();
    loop {
        let d = limits.check(&[id], &theirs[0]).await;
        if d.scope() == Scope::Shared {
            break;
        }
        assert_eq!(d.scope(), Scope::Unavailable, "{:?}", d.store_error());
        decisions.push(d.store_error().map(str::to_owned));
        // Before: 40 checks over 14 s all timed out on the dead flow.
        assert!(
            frozen.elapsed() < Duration::from_secs(20),
            "not shared again 20 s after the flow died: {} checks waited out the timeout",
            waited_out(&decisions)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waited = waited_out(&decisions);
    assert!(
        (1..=2).contains(&waited),
        "{waited} checks waited out the timeout before a new flow"
    );
    for caller in &all {
        let d = limits.check(&[id], caller).await;
        assert_eq!(d.scope(), Scope::Shared, "{caller}: {:?}", d.store_error());
    }
}
