//! The Redis backend of ate-ratelimit on a loopback `redis-server` of its
//! own, beside the floor (a bare `PING`) and the peer users would
//! otherwise write: the common sliding-log script (ZREMRANGEBYSCORE +
//! ZCARD + ZADD + PEXPIRE on a sorted set). Prints one JSON line per row:
//!
//! - `latency`: one client, one call at a time, µs per call (p10, median);
//! - `throughput`: 32 tasks on one multiplexed connection over the same
//!   1,000 keys, calls per second (p10 and median of rounds);
//! - `memory`: `MEMORY USAGE` of one key at N = 600 / 60 s after a minute
//!   at one request per second, bytes.
//!
//! Sides run interleaved, round after round, so a neighbour's load lands
//! on all of them. `redis_ab [ROUNDS]` (default 15).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ate_ratelimit::testing::TestRedis;
use ate_ratelimit::{
    Fallback, LimitId, LimitSet, Limits, MonotonicClock, Policy, Quota, RedisConfig, Scope,
    clock::Timestamp,
};
use redis::aio::ConnectionManager;

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

#[derive(Clone)]
struct Sides {
    ate: Arc<Limits>,
    id: LimitId,
    conn: ConnectionManager,
    log: Arc<redis::Script>,
}

impl Sides {
    async fn ate(&self, key: u64) -> bool {
        let d = self.ate.check(&[self.id], &key.to_string()).await;
        assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
        d.is_allowed()
    }

    async fn log(&self, key: u64, call: u64) -> bool {
        let mut conn = self.conn.clone();
        let allowed: i64 = self
            .log
            .key(format!("log:{key}"))
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

    async fn call(self, sides: &Sides, key: u64, call: u64) -> bool {
        match self {
            Side::Ate => sides.ate(key).await,
            Side::Log => sides.log(key, call).await,
            Side::Ping => sides.ping().await,
        }
    }
}

/// µs per call of `LATENCY_CALLS` calls one after another.
async fn latency(side: Side, sides: &Sides) -> f64 {
    let start = Instant::now();
    for i in 0..LATENCY_CALLS as u64 {
        std::hint::black_box(side.call(sides, i % KEYS, i).await);
    }
    start.elapsed().as_secs_f64() * 1e6 / LATENCY_CALLS as f64
}

/// Calls per second of `TASKS` tasks making `PER_TASK` calls each.
async fn throughput(side: Side, sides: &Sides) -> f64 {
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
async fn memory(sides: &Sides, server: &TestRedis) -> (i64, i64) {
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(15, |a| a.parse().expect("ROUNDS must be a number"));
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    // A limit no caller reaches: every check records (the common case).
    let id = set.add(
        "notify",
        Quota::new(NonZeroU32::new(1_000_000).unwrap(), Duration::from_secs(60)).unwrap(),
    );
    let client = redis::Client::open(server.url()).unwrap();
    let sides = Sides {
        ate: Arc::new(Limits::redis(set, store(&server))),
        id,
        conn: ConnectionManager::new(client).await.unwrap(),
        log: Arc::new(redis::Script::new(SLIDING_LOG)),
    };
    // Warm up: scripts loaded, connections open.
    for side in Side::ALL {
        for i in 0..200 {
            side.call(&sides, i % KEYS, i).await;
        }
    }
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut rate: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for _ in 0..rounds {
        for (i, side) in Side::ALL.into_iter().enumerate() {
            lat[i].push(latency(side, &sides).await);
            rate[i].push(throughput(side, &sides).await);
        }
    }
    let row = |what: &str, values: &[Vec<f64>], higher: bool| {
        let parts: Vec<String> = Side::ALL
            .iter()
            .zip(values)
            .map(|(side, v)| {
                let (p10, median) = spread(v.clone(), higher);
                format!("\"{}\":[{p10:.2},{median:.2}]", side.name())
            })
            .collect();
        println!("{{\"row\":\"{what}\",{}}}", parts.join(","));
    };
    row("latency_us", &lat, false);
    row("throughput_per_s", &rate, true);
    let (ate, log) = memory(&sides, &server).await;
    println!("{{\"row\":\"memory_bytes\",\"ate\":{ate},\"sliding_log\":{log}}}");
}
