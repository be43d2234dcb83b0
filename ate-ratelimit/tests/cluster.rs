//! The Redis backend on a real Redis Cluster of 3 masters and 3 replicas
//! (feature `redis-cluster`): calls spread over every master share one
//! window across replicas, and a master killed mid-run costs the callers
//! of its slots the fallback only until its replica takes over.
#![cfg(all(feature = "redis-cluster", feature = "test-util"))]

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use ate_ratelimit::testing::TestCluster;
use ate_ratelimit::{
    Fallback, LimitId, LimitSet, Limits, MonotonicClock, Policy, Quota, RedisConfig, Scope,
};

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
