//! The Redis backend of ate-ratelimit on a loopback `redis-server` of its
//! own, beside the floor (a bare `PING`) and the peer users would
//! otherwise write: the common sliding-log script (ZREMRANGEBYSCORE +
//! ZCARD + ZADD + PEXPIRE on a sorted set). Prints one JSON line per row:
//!
//! - `latency`: one client, one call at a time, µs per call (p10, median);
//! - `throughput`: 32 tasks on one multiplexed connection over the same
//!   1,000 keys, calls per second (p10 and median of rounds);
//! - `memory`: `MEMORY USAGE` of one key at N = 600 / 60 s after a minute
//!   at one request per second, bytes;
//! - `server_us`: Redis server time per decision (`INFO commandstats`,
//!   `EVALSHA`'s `usec_per_call`) for ate at cost 1 and cost 10^6, and the
//!   sliding log;
//! - `server_us_10k_runs`: server time per decision on keys holding
//!   10,000 runs: `live` (all in the window, a cost-1 check) and `trim`
//!   (all but the newest expired, so the check cuts 9,999 runs);
//! - `cluster_throughput_per_s`: the throughput row against a 3-master
//!   Redis Cluster (`TestCluster`), ate and the sliding log through the
//!   redis crate's cluster client.
//!
//! Sides run interleaved, round after round, so a neighbour's load lands
//! on all of them. `redis_ab [ROUNDS]` (default 15).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ate_ratelimit::testing::{TestCluster, TestRedis};
use ate_ratelimit::{
    Fallback, LimitId, LimitSet, Limits, MonotonicClock, Policy, Quota, RedisConfig, Scope,
    clock::Timestamp,
};
use redis::aio::{ConnectionLike, ConnectionManager};

const KEYS: u64 = 1_000;
const TASKS: usize = 32;
const PER_TASK: usize = 500;
const LATENCY_CALLS: usize = 2_000;

/// The sliding log as commonly written: trim, count, add if below, expire.
const SLIDING_LOG: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, now .. '-' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
  return 1
end
return 0
";

/// The three sides over one connection: one Redis or a cluster.
#[derive(Clone)]
struct Sides<C> {
    ate: Arc<Limits>,
    id: LimitId,
    conn: C,
    log: Arc<redis::Script>,
}

/// What a side's connection must be to be cloned into each task.
trait Conn: ConnectionLike + Clone + Send + Sync + 'static {}
impl<C: ConnectionLike + Clone + Send + Sync + 'static> Conn for C {}

impl<C: Conn> Sides<C> {
    async fn ate(&self, key: u64) -> bool {
        let d = self.ate.check(&[self.id], &key.to_string()).await;
        assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
        d.is_allowed()
    }

    async fn log(&self, key: u64, call: u64) -> bool {
        let mut conn = self.conn.clone();
        let allowed: i64 = self
            .log
            .key(format!("log:{{{key}}}"))
            .arg(60_000_000u64)
            .arg(1_000_000u32)
            .arg(call)
            .invoke_async(&mut conn)
            .await
            .expect("sliding-log script");
        allowed == 1
    }

    async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        pong == "PONG"
    }
}

#[derive(Clone, Copy)]
enum Side {
    Ate,
    Log,
    Ping,
}

impl Side {
    const ALL: [Side; 3] = [Side::Ate, Side::Log, Side::Ping];

    fn name(self) -> &'static str {
        match self {
            Side::Ate => "ate",
            Side::Log => "sliding_log",
            Side::Ping => "ping",
        }
    }

    async fn call<C: Conn>(self, sides: &Sides<C>, key: u64, call: u64) -> bool {
        match self {
            Side::Ate => sides.ate(key).await,
            Side::Log => sides.log(key, call).await,
            Side::Ping => sides.ping().await,
        }
    }
}

/// µs per call of `LATENCY_CALLS` calls one after another.
async fn latency<C: Conn>(side: Side, sides: &Sides<C>) -> f64 {
    let start = Instant::now();
    for i in 0..LATENCY_CALLS as u64 {
        std::hint::black_box(side.call(sides, i % KEYS, i).await);
    }
    start.elapsed().as_secs_f64() * 1e6 / LATENCY_CALLS as f64
}

/// Calls per second of `TASKS` tasks making `PER_TASK` calls each.
async fn throughput<C: Conn>(side: Side, sides: &Sides<C>) -> f64 {
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let sides = sides.clone();
            tokio::spawn(async move {
                for i in 0..PER_TASK as u64 {
                    let call = (t as u64) * 1_000_000 + i;
                    std::hint::black_box(side.call(&sides, (call * 7_919) % KEYS, call).await);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (TASKS * PER_TASK) as f64 / start.elapsed().as_secs_f64()
}

/// (p10, median) of `v`, low to high for latency, high to low for rates.
fn spread(mut v: Vec<f64>, higher_is_better: bool) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    if higher_is_better {
        v.reverse();
    }
    (v[v.len() / 10], v[v.len() / 2])
}

/// `MEMORY USAGE` of a key holding a minute at 1 request/s, N = 600.
async fn memory(sides: &Sides<ConnectionManager>, server: &TestRedis) -> (i64, i64) {
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = set.add(
        "mem",
        Quota::new(NonZeroU32::new(600).unwrap(), Duration::from_secs(60)).unwrap(),
    );
    let limits = Limits::redis(set, store(server));
    let one = NonZeroU32::MIN;
    let mut conn = sides.conn.clone();
    for s in 0..60u64 {
        let at = Timestamp::from_secs(1_000 + s);
        let d = limits.check_n_at(&[id], "mem", one, at).await.unwrap();
        assert!(d.is_allowed());
        // The sliding log's key, written as its script writes it.
        let us = (1_000 + s) * 1_000_000;
        let _: () = redis::cmd("ZADD")
            .arg("log:mem")
            .arg(us)
            .arg(format!("{us}-{s}"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let usage = |key: &'static str| {
        let mut conn = sides.conn.clone();
        async move {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
                .unwrap()
        }
    };
    (usage("bench:{=mem}:mem").await, usage("log:mem").await)
}

fn store(server: &TestRedis) -> ate_ratelimit::RedisStore {
    RedisConfig::new(server.url())
        .prefix("bench")
        .timeout(Duration::from_secs(5))
        .fallback(Fallback::Refuse)
        .connect()
        .expect("store")
}

/// Server µs per `EVALSHA` over `calls` calls of `f`.
async fn server_us<F, Fut>(conn: &ConnectionManager, calls: u64, f: F) -> f64
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut c = conn.clone();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c)
        .await
        .unwrap();
    for i in 0..calls {
        std::hint::black_box(f(i).await);
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .expect("evalsha ran");
    let usec: f64 = line
        .split(',')
        .find_map(|kv| kv.strip_prefix("usec="))
        .unwrap()
        .parse()
        .unwrap();
    let n: f64 = line
        .split(',')
        .find_map(|kv| kv.split(':').nth(1)?.strip_prefix("calls="))
        .unwrap()
        .parse()
        .unwrap();
    usec / n
}

/// The server's clock, in microseconds.
async fn server_now_us(conn: &ConnectionManager) -> u64 {
    let mut c = conn.clone();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
    secs * 1_000_000 + micros
}

/// Writes `key` as the script keeps a window of `runs` runs of one
/// attempt each: the newest at `newest_us`, the others one µs apart from
/// `older_from_us` back (microsecond ticks: a 60 s window).
async fn fill(conn: &ConnectionManager, key: &str, runs: u64, newest_us: u64, older_from_us: u64) {
    let ex = (newest_us + 120_000_000) as f64;
    let run = |t: u64, cum: u64| {
        let mut r = Vec::with_capacity(28);
        r.extend_from_slice(&(t as f64).to_be_bytes());
        r.extend_from_slice(&1u32.to_be_bytes());
        r.extend_from_slice(&(cum as f64).to_be_bytes());
        r.extend_from_slice(&ex.to_be_bytes());
        r
    };
    let mut push = redis::cmd("RPUSH");
    push.arg(key).arg(run(newest_us, runs));
    for i in 1..runs {
        push.arg(run(older_from_us - i, runs - i));
    }
    let mut c = conn.clone();
    let () = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap();
    let () = push.query_async(&mut c).await.unwrap();
    let () = redis::cmd("PEXPIRE")
        .arg(key)
        .arg(120_000)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// Server µs per check on keys of 10,000 runs: (live, trim).
async fn ten_thousand_runs(sides: &Sides<ConnectionManager>, round: u64) -> (f64, f64) {
    const RUNS: u64 = 10_000;
    let now = server_now_us(&sides.conn).await;
    // Live: 20 keys whose runs are all in the window.
    for k in 0..20u64 {
        fill(
            &sides.conn,
            &format!("bench:{{=live{k}}}:notify"),
            RUNS,
            now,
            now,
        )
        .await;
    }
    let live = server_us(&sides.conn, 1_000, |i| async move {
        let d = sides
            .ate
            .check(&[sides.id], &format!("live{}", i % 20))
            .await;
        assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
        d.is_allowed()
    })
    .await;
    // Trim: each check on its own key, all of whose runs but the newest
    // left the window a second ago (filled before the timed calls: RPUSH
    // is not EVALSHA, so it is not counted).
    let now = server_now_us(&sides.conn).await;
    let keys = 50u64;
    for k in 0..keys {
        let key = format!("bench:{{=trim{round}-{k}}}:notify");
        fill(&sides.conn, &key, RUNS, now, now - 61_000_000).await;
    }
    let trim = server_us(&sides.conn, keys, |i| async move {
        let d = sides
            .ate
            .check(&[sides.id], &format!("trim{round}-{i}"))
            .await;
        assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
        d.is_allowed()
    })
    .await;
    (live, trim)
}

fn limits(store: ate_ratelimit::RedisStore) -> (Arc<Limits>, LimitId, LimitId) {
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    // A limit no caller reaches: every check records (the common case).
    let id = set.add(
        "notify",
        Quota::new(NonZeroU32::new(1_000_000).unwrap(), Duration::from_secs(60)).unwrap(),
    );
    let bulk = set.add(
        "bulk",
        Quota::new(
            NonZeroU32::new(4_000_000_000).unwrap(),
            Duration::from_secs(60),
        )
        .unwrap(),
    );
    (Arc::new(Limits::redis(set, store)), id, bulk)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(15, |a| a.parse().expect("ROUNDS must be a number"));
    let redis_server = TestRedis::start();
    let (ate, id, bulk) = limits(store(&redis_server));
    let client = redis::Client::open(redis_server.url()).unwrap();
    let sides = Sides {
        ate,
        id,
        conn: ConnectionManager::new(client).await.unwrap(),
        log: Arc::new(redis::Script::new(SLIDING_LOG)),
    };
    let cluster = TestCluster::start();
    let cluster_store = RedisConfig::cluster(cluster.urls())
        .prefix("bench")
        .timeout(Duration::from_secs(5))
        .fallback(Fallback::Refuse)
        .connect()
        .expect("cluster store");
    let (cluster_ate, cluster_id, _) = limits(cluster_store);
    let cluster_client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let on_cluster = Sides {
        ate: cluster_ate,
        id: cluster_id,
        conn: cluster_client.get_async_connection().await.unwrap(),
        log: sides.log.clone(),
    };
    // Warm up: scripts loaded, connections open.
    for side in Side::ALL {
        for i in 0..200 {
            side.call(&sides, i % KEYS, i).await;
            side.call(&on_cluster, i % KEYS, i).await;
        }
    }
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut rate: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut cluster_rate: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut server_time: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut many_runs: Vec<Vec<f64>> = vec![Vec::new(); 2];
    for fresh in 0..rounds as u64 {
        for (i, side) in Side::ALL.into_iter().enumerate() {
            lat[i].push(latency(side, &sides).await);
            rate[i].push(throughput(side, &sides).await);
            cluster_rate[i].push(throughput(side, &on_cluster).await);
        }
        let s = &sides;
        server_time[0].push(server_us(&s.conn, 2_000, |i| s.ate(i % KEYS)).await);
        server_time[1].push(
            server_us(&s.conn, 2_000, |i| async move {
                // Fresh keys: each check records 10^6 attempts at once.
                let key = format!("bulk{}", fresh * 10_000 + i);
                let d = s
                    .ate
                    .check_n(&[bulk], &key, NonZeroU32::new(1_000_000).unwrap())
                    .await
                    .unwrap();
                assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
                d.is_allowed()
            })
            .await,
        );
        server_time[2].push(server_us(&s.conn, 2_000, |i| s.log(i % KEYS, i)).await);
        let (live, trim) = ten_thousand_runs(s, fresh).await;
        many_runs[0].push(live);
        many_runs[1].push(trim);
    }
    let row = |what: &str, values: &[Vec<f64>], higher: bool, names: [&str; 3]| {
        let parts: Vec<String> = names
            .iter()
            .zip(values)
            .map(|(name, v)| {
                let (p10, median) = spread(v.clone(), higher);
                format!("\"{name}\":[{p10:.2},{median:.2}]")
            })
            .collect();
        println!("{{\"row\":\"{what}\",{}}}", parts.join(","));
    };
    let sides_names = Side::ALL.map(Side::name);
    row("latency_us", &lat, false, sides_names);
    row("throughput_per_s", &rate, true, sides_names);
    row("cluster_throughput_per_s", &cluster_rate, true, sides_names);
    row(
        "server_us",
        &server_time,
        false,
        ["ate_cost_1", "ate_cost_1e6", "sliding_log"],
    );
    let parts: Vec<String> = ["live", "trim"]
        .iter()
        .zip(&many_runs)
        .map(|(name, v)| {
            let (p10, median) = spread(v.clone(), false);
            format!("\"{name}\":[{p10:.2},{median:.2}]")
        })
        .collect();
    println!("{{\"row\":\"server_us_10k_runs\",{}}}", parts.join(","));
    let (ate, log) = memory(&sides, &redis_server).await;
    println!("{{\"row\":\"memory_bytes\",\"ate\":{ate},\"sliding_log\":{log}}}");
}
