//! Rate limits kept in a Redis Cluster (`ATE_RATELIMIT_REDIS_CLUSTER`), on
//! a real cluster of 3 masters and 3 replicas: callers on every master get
//! their limit once across two replicas, and a master SIGKILLed mid-run
//! changes only the scope of its callers' limits until its replica takes
//! over (never a 5xx under `local`), after which they are shared again.

mod common;

use std::time::{Duration, Instant};

use ate_ratelimit::testing::TestCluster;
use common::*;

async fn notify(c: &reqwest::Client, s: &Service, caller: &str) -> u16 {
    c.post(s.url("/notify"))
        .header("x-caller", caller)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn replicas(bin: &str, cluster: &TestCluster) -> [Service; 2] {
    let seeds = cluster.urls().join(",");
    let env = [
        ("ATE_RATELIMIT_REDIS_CLUSTER", seeds.as_str()),
        ("ATE_RATELIMIT_REDIS_FALLBACK", "local"),
        EDGE,
    ];
    [Service::start(bin, &env), Service::start(bin, &env)]
}

/// `n` callers per master, by master port.
fn callers(cluster: &TestCluster, tag: &str, n: usize) -> Vec<(u16, String)> {
    let masters = cluster.masters();
    let mut out: Vec<(u16, String)> = Vec::new();
    for i in 0.. {
        let caller = format!("{tag}{i}");
        let master = cluster.master_of(&format!("ate-example:{{={caller}}}:notifications"));
        if out.iter().filter(|(m, _)| *m == master).count() < n {
            out.push((master, caller));
        }
        if out.len() == n * masters.len() {
            return out;
        }
    }
    unreachable!()
}

/// Callers on each of the three masters, alternating between two
/// replicas: exactly 150 notifications each, not 150 per replica.
#[tokio::test]
async fn two_replicas_share_limits_on_every_master() {
    let cluster = TestCluster::start();
    for bin in SERVICES {
        let pods = replicas(bin, &cluster);
        let c = client();
        for (master, caller) in callers(&cluster, &format!("spread{}-", bin.len()), 2) {
            let mut allowed = 0;
            for i in 0..160 {
                match notify(&c, &pods[i % 2], &caller).await {
                    200 => allowed += 1,
                    429 => {}
                    other => panic!("{bin}: status {other}"),
                }
            }
            assert_eq!(allowed, 150, "{bin}: {caller} on master {master}");
        }
        for pod in &pods {
            pod.wait_for_metric("ate_ratelimit_store_up 1").await;
        }
    }
}

/// A master SIGKILLed: every answer stays 200 or 429 (its callers are
/// decided from each replica's own windows meanwhile), and once its
/// replica is promoted the same replicas share the limit again, without a
/// restart.
#[tokio::test]
async fn a_killed_master_never_costs_a_5xx_and_sharing_resumes() {
    let mut cluster = TestCluster::start();
    let bin = SERVICES[0];
    let pods = replicas(bin, &cluster);
    let c = client();
    let all = callers(&cluster, "victim-", 1);
    for (_, caller) in &all {
        assert_eq!(notify(&c, &pods[0], caller).await, 200);
    }
    let (victim, _) = all[0].clone();
    cluster.kill(victim);
    let killed = Instant::now();
    // Traffic across the failover: never anything but 200/429.
    while killed.elapsed() < Duration::from_secs(4) {
        for (i, (_, caller)) in all.iter().enumerate() {
            let status = notify(&c, &pods[i % 2], caller).await;
            assert!(status == 200 || status == 429, "{bin}: status {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.wait_until_ok();
    // Shared again: a fresh caller on the promoted master gets 150 in
    // total across the two replicas.
    let key = |caller: &str| format!("ate-example:{{={caller}}}:notifications");
    let promoted = cluster.master_of(&key(&all[0].1));
    assert_ne!(promoted, victim, "a replica took over the victim's slots");
    let fresh = (0..)
        .map(|i| format!("after-{i}"))
        .find(|c| cluster.master_of(&key(c)) == promoted)
        .unwrap();
    let mut allowed = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut shared = false;
    while !shared && Instant::now() < deadline {
        for pod in &pods {
            shared = has_sample(&pod.metrics().await, "ate_ratelimit_store_up 1");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..160 {
        match notify(&c, &pods[i % 2], &fresh).await {
            200 => allowed += 1,
            429 => {}
            other => panic!("{bin}: status {other}"),
        }
    }
    assert_eq!(allowed, 150, "{bin}: shared again after the failover");
}

/// One Redis and a cluster at once is a start error naming both; a seed
/// that is not a Redis URL is one naming it.
#[test]
fn a_single_redis_and_a_cluster_at_once_stop_the_start() {
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("ATE_RATELIMIT_REDIS_URL", "redis://127.0.0.1:1/0")
            .env("ATE_RATELIMIT_REDIS_CLUSTER", "redis://127.0.0.1:2")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bin}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("ATE_RATELIMIT_REDIS_URL") && err.contains("ATE_RATELIMIT_REDIS_CLUSTER"),
            "{bin}: {err}"
        );
        let err = start_refused(
            bin,
            "ATE_RATELIMIT_REDIS_CLUSTER",
            "redis://127.0.0.1:7000,10.0.0.2:7001",
        );
        assert!(
            err.contains("ATE_RATELIMIT_REDIS_CLUSTER") && err.contains("\"10.0.0.2:7001\""),
            "{bin}: {err}"
        );
    }
}
