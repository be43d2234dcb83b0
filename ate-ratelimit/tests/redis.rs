//! The Redis backend (feature `redis`) against the same reference model as
//! the in-process limiter, over a throwaway `redis-server` of each test's
//! own: both policies, combined and weighted checks, replicas sharing one
//! window, and the runs a window is kept as. (The store failing under it:
//! `redis_faults.rs`.)
#![cfg(all(feature = "redis", feature = "test-util"))]

use std::sync::Arc;
use std::time::Duration;

use ate_ratelimit::testing::{Model, TestRedis, traffic};
use ate_ratelimit::{
    Decision, Fallback, LimitId, LimitSet, Limits, MonotonicClock, Policy, Scope,
    clock::{ManualClock, Timestamp},
};
use proptest::prelude::*;

#[path = "common/redis_store.rs"]
mod redis_store;
use redis_store::{nz, quota, raw, store};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Three limits, two routes and a shared bucket, as in the in-process
/// model test.
fn three_limits(
    policy: Policy,
    na: u32,
    nb: u32,
    w: Duration,
    clock: ManualClock,
) -> (LimitSet<String, ManualClock>, [LimitId; 3]) {
    let mut set = LimitSet::new(policy, clock);
    let a = set.add("route_a", quota(na, w));
    let b = set.add("route_b", quota(na + 1, w));
    let shared = set.add("shared", quota(nb, w));
    (set, [a, b, shared])
}

/// Drives `limits` (kept in Redis, times given explicitly) and the models
/// through `steps`; every decision and wait must agree.
async fn against_models(
    limits: &Limits<ManualClock>,
    ids: [LimitId; 3],
    models: &mut [Model<u8>; 3],
    policy: Policy,
    steps: Vec<(Duration, u8, u8, u32)>,
) -> Result<(), TestCaseError> {
    let clock = limits.set().clock().clone();
    let limit_of = |i: usize| limits.set().limiter(ids[i]).quota().limit().get();
    for (advance, key, route, cost) in steps {
        clock.advance(advance);
        let now = clock.now_for_model();
        let idx: Vec<usize> = match route {
            0 => vec![0, 2],
            1 => vec![1, 2],
            _ => vec![2],
        };
        let these: Vec<LimitId> = idx.iter().map(|&i| ids[i]).collect();
        let smallest = idx.iter().map(|&i| limit_of(i)).min().unwrap();
        let cost = cost.min(smallest);
        let got = limits
            .check_n_at(&these, &key.to_string(), nz(cost), now)
            .await
            .unwrap();
        prop_assert_eq!(got.scope(), Scope::Shared, "{:?}", got.store_error());
        let peeks: Vec<Decision> = idx
            .iter()
            .map(|&i| models[i].peek_n(&key, now, cost))
            .collect();
        let all_allow = peeks.iter().all(Decision::is_allowed);
        let want: Vec<Decision> = match policy {
            Policy::AllowedOnly if !all_allow => peeks,
            _ => idx
                .iter()
                .map(|&i| models[i].check_n(key, now, cost))
                .collect(),
        };
        let got_decisions: Vec<Decision> = got.decisions().iter().map(|(_, d)| *d).collect();
        prop_assert_eq!(
            &got_decisions,
            &want,
            "key {} at {:?}, cost {}",
            key,
            now,
            cost
        );
        if !got.is_allowed() {
            let wait = idx
                .iter()
                .map(|&i| models[i].wait_n(&key, now, cost))
                .max()
                .unwrap();
            prop_assert_eq!(got.retry_after(), Some(wait));
        }
    }
    Ok(())
}

fn steps() -> impl Strategy<Value = Vec<(Duration, u8, u8, u32)>> {
    traffic(3, 60).prop_flat_map(|t| {
        let len = t.len();
        (
            Just(t),
            proptest::collection::vec(0u8..3, len),
            proptest::collection::vec(prop_oneof![3 => Just(1u32), 1 => 2u32..5], len),
        )
            .prop_map(|(t, routes, costs)| {
                t.into_iter()
                    .zip(routes)
                    .zip(costs)
                    .map(|((s, r), c)| (s.advance, s.key, r, c))
                    .collect()
            })
    })
}

#[test]
fn redis_limits_match_the_full_log_models() {
    let server = TestRedis::start();
    let rt = runtime();
    let _in_runtime = rt.enter();
    let case = std::sync::atomic::AtomicU32::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(48));
    runner
        .run(
            &(
                prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
                1u32..5,
                1u32..8,
                // Short windows make attempts exactly a window apart common.
                prop_oneof![1u64..40, 100u64..10_000],
                steps(),
            ),
            |(policy, na, nb, w, steps)| {
                let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let w = Duration::from_millis(w);
                let (set, ids) = three_limits(policy, na, nb, w, ManualClock::default());
                let limits = Limits::redis(
                    set,
                    store(&server, &format!("model{case}"), Fallback::Refuse),
                );
                let mut models = [
                    Model::new(quota(na, w), policy),
                    Model::new(quota(na + 1, w), policy),
                    Model::new(quota(nb, w), policy),
                ];
                rt.block_on(against_models(&limits, ids, &mut models, policy, steps))
            },
        )
        .unwrap();
}

/// An attempt exactly a window old no longer counts; one a microsecond
/// younger still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_a_whole_window_old_no_longer_counts() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
    let id = set.add("edge", quota(1, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "edge", Fallback::Refuse));
    let at = |us: u64| Timestamp::from_nanos(us * 1_000);
    let one = nz(1);
    let start = 5_000_000;
    assert!(
        limits
            .check_n_at(&[id], "k", one, at(start))
            .await
            .unwrap()
            .is_allowed()
    );
    let just_before = limits
        .check_n_at(&[id], "k", one, at(start + 60_000_000 - 1))
        .await
        .unwrap();
    assert_eq!(
        just_before.retry_after(),
        Some(Duration::from_secs(60)),
        "its own denial counts now"
    );
    let exactly = limits
        .check_n_at(&[id], "k", one, at(start + 120_000_000 - 1))
        .await
        .unwrap();
    assert!(
        exactly.is_allowed(),
        "the denial a window ago has left: {exactly:?}"
    );
}

/// The same calls checked in process and in Redis answer the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_in_process_answer_alike() {
    let server = TestRedis::start();
    for policy in [Policy::CountDenied, Policy::AllowedOnly] {
        let w = Duration::from_secs(10);
        let (set_a, ids) = three_limits(policy, 2, 3, w, ManualClock::default());
        let (set_b, ids_b) = three_limits(policy, 2, 3, w, ManualClock::default());
        let local = Limits::local(set_a);
        let shared = Limits::redis(
            set_b,
            store(&server, &format!("alike{policy:?}"), Fallback::Refuse),
        );
        for step in 0..40u64 {
            let now = Timestamp::from_millis(step * 700);
            let pick = |ids: [LimitId; 3]| [ids[(step % 2) as usize], ids[2]];
            let cost = nz(1 + u32::from(step % 3 == 0));
            let a = local.check_n_at(&pick(ids), "k", cost, now).await.unwrap();
            let b = shared
                .check_n_at(&pick(ids_b), "k", cost, now)
                .await
                .unwrap();
            assert_eq!(a.decisions(), b.decisions(), "{policy:?} step {step}");
            assert_eq!(a.retry_after(), b.retry_after(), "{policy:?} step {step}");
            assert_eq!(
                a.resets(),
                b.resets(),
                "{policy:?} step {step}: reset times"
            );
            assert_eq!((a.scope(), b.scope()), (Scope::Process, Scope::Shared));
        }
    }
}

/// Replicas share one window: several tasks on two connections (two
/// stores, as two replicas) hammering one caller within one window get
/// exactly N allowed in total, never more, under both policies; with the
/// server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_hammering_one_key_get_exactly_n_in_total() {
    const N: u32 = 50;
    let server = TestRedis::start();
    for policy in [Policy::CountDenied, Policy::AllowedOnly] {
        let prefix = format!("race{policy:?}");
        let replica = |server: &TestRedis| {
            let mut set = LimitSet::new(policy, MonotonicClock::new());
            let id = set.add("notify", quota(N, Duration::from_secs(3_600)));
            (
                Arc::new(Limits::redis(set, store(server, &prefix, Fallback::Refuse))),
                id,
            )
        };
        let replicas = [replica(&server), replica(&server)];
        let mut tasks = Vec::new();
        for t in 0..8 {
            let (limits, id) = replicas[t % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut allowed = 0u32;
                for _ in 0..20 {
                    let d = limits.check(&[id], "caller").await;
                    assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
                    allowed += u32::from(d.is_allowed());
                }
                allowed
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        assert_eq!(total, N, "{policy:?}: 160 attempts within one window");
        // The window holds N attempts, in at most N runs (28 bytes: the
        // time, then the count as a big-endian u32).
        let runs: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(format!("{prefix}:{{=caller}}:notify"))
            .arg(0)
            .arg(-1)
            .query_async(&mut raw(&server).await)
            .await
            .unwrap();
        let held: u32 = runs
            .iter()
            .map(|r| u32::from_be_bytes(r[8..12].try_into().unwrap()))
            .sum();
        assert_eq!(held, N, "{policy:?}");
        assert!(runs.len() <= N as usize, "{policy:?}");
    }
}

/// A key expires by itself at most two windows after its newest attempt
/// (its expiry is pushed to two windows ahead once a window, not on every
/// call), so idle callers cost nothing and nothing sweeps; the keys of one
/// call share
/// a hash tag (one Redis Cluster slot) and carry the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_carry_the_prefix_share_a_hash_tag_and_expire_a_window_on() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let notify = set.add("notify", quota(5, Duration::from_millis(1_500)));
    let bucket = set.add("bucket", quota(5, Duration::from_secs(90)));
    let limits = Limits::redis(set, store(&server, "svc", Fallback::Refuse));
    assert!(limits.check(&[notify, bucket], "alice").await.is_allowed());
    let mut conn = raw(&server).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(keys, ["svc:{=alice}:bucket", "svc:{=alice}:notify"]);
    for (key, window_ms) in [
        ("svc:{=alice}:notify", 1_500),
        ("svc:{=alice}:bucket", 90_000),
    ] {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            ttl > 2 * window_ms - 1_000 && ttl <= 2 * window_ms,
            "{key}: TTL {ttl} ms, window {window_ms} ms"
        );
    }
    // Another prefix (another service) has windows of its own.
    let mut other = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let id = other.add("notify", quota(1, Duration::from_secs(60)));
    let other = Limits::redis(other, store(&server, "other", Fallback::Refuse));
    assert!(other.check(&[id], "alice").await.is_allowed());
    assert!(!other.check(&[id], "alice").await.is_allowed());
    assert!(limits.check(&[notify], "alice").await.is_allowed());
}

/// The server killed mid-run: under `Fallback::Local` checks go on in
/// process (scope Fallback, the reason given), never panic or hang; once it
/// is back (empty), checks are shared again.
/// One tick rule on both backends: for windows from a minute to a day
/// (1 µs ticks below ~35.8 minutes, 1 ms above), the same attempts at the
/// same nanosecond times get the same decisions, waits and resets in
/// process and in Redis, so a replica that falls back changes nothing.
#[test]
fn both_backends_round_alike_for_windows_up_to_a_day() {
    let server = TestRedis::start();
    let rt = runtime();
    let case = std::sync::atomic::AtomicU32::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(40));
    runner
        .run(
            &(
                prop_oneof![Just(Policy::CountDenied), Just(Policy::AllowedOnly)],
                1u32..6,
                prop_oneof![60u64..3_600, 2_100u64..2_200, 3_600u64..=86_400],
                // Offsets within the window with sub-millisecond parts, so
                // rounding to the tick matters.
                proptest::collection::vec((0u64..2_000_000_000, 1u32..4), 1..40),
            ),
            |(policy, n, secs, steps)| {
                let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let w = Duration::from_secs(secs) + Duration::from_nanos(u64::from(case) * 777);
                let mut a = LimitSet::new(policy, ManualClock::default());
                let ia = a.add("day", quota(n, w));
                let mut b = LimitSet::new(policy, ManualClock::default());
                let ib = b.add("day", quota(n, w));
                let local = Limits::local(a);
                let _in_runtime = rt.enter();
                let shared =
                    Limits::redis(b, store(&server, &format!("tick{case}"), Fallback::Refuse));
                let mut now = 1_000_000_000_000u64;
                rt.block_on(async {
                    for (advance, cost) in steps {
                        // Jumps of up to ~2 s and, now and then, most of a
                        // window.
                        now += advance % 2_000_000_000
                            + (advance % 7 == 0) as u64 * w.as_nanos() as u64 * 9 / 10;
                        let at = Timestamp::from_nanos(now);
                        let cost = nz(cost.min(n));
                        let x = local.check_n_at(&[ia], "k", cost, at).await.unwrap();
                        let y = shared.check_n_at(&[ib], "k", cost, at).await.unwrap();
                        prop_assert_eq!(y.scope(), Scope::Shared, "{:?}", y.store_error());
                        prop_assert_eq!(
                            x.decisions(),
                            y.decisions(),
                            "at {} ns, window {:?}",
                            now,
                            w
                        );
                        prop_assert_eq!(x.retry_after(), y.retry_after(), "at {} ns", now);
                        prop_assert_eq!(x.resets(), y.resets(), "at {} ns", now);
                    }
                    Ok(())
                })
            },
        )
        .unwrap();
}

/// A weighted check costs one run, whatever its cost: a check of cost
/// 10^6 stores one list entry (before: 10^6 entries, ~10 MB), and the next
/// attempt is told exactly when the window has room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_check_stores_one_run_whatever_its_cost() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
    let id = set.add("bulk", quota(1_000_000, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "weighted", Fallback::Refuse));
    let t0 = Timestamp::from_secs(1_000);
    let d = limits
        .check_n_at(&[id], "k", nz(1_000_000), t0)
        .await
        .unwrap();
    assert!(d.is_allowed(), "{:?}", d.store_error());
    let len: usize = redis::cmd("LLEN")
        .arg("weighted:{=k}:bulk")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert_eq!(len, 1, "one run");
    let later = Timestamp::from_secs(1_010);
    let d = limits.check_n_at(&[id], "k", nz(1), later).await.unwrap();
    assert_eq!(d.retry_after(), Some(Duration::from_secs(50)));
    let memory: Option<usize> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("weighted:{=k}:bulk")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert!(memory.unwrap() < 500, "{memory:?} bytes");
}

/// A window an earlier release kept (a list of microsecond times, newest
/// first) is read, not lost, on the first check after an upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_kept_by_an_earlier_release_still_counts() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
    let id = set.add("notify", quota(3, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "upgrade", Fallback::Refuse));
    let now = Timestamp::from_secs(10_000);
    let us = now.as_nanos() / 1_000;
    let _: () = redis::cmd("RPUSH")
        .arg("upgrade:{=k}:notify")
        .arg(us - 1_000_000)
        .arg(us - 2_000_000)
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    let d = limits.check_n_at(&[id], "k", nz(1), now).await.unwrap();
    assert_eq!(d.decisions()[0].1, Decision::Allowed { remaining: 0 });
    let ttl: i64 = redis::cmd("PTTL")
        .arg("upgrade:{=k}:notify")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert!(ttl > 0, "the converted window still expires: {ttl}");
    let d = limits.check_n_at(&[id], "k", nz(1), now).await.unwrap();
    // Denied, and recorded (CountDenied): the window keeps the newest
    // three, so the one recorded 1 s before is the oldest, and leaves in
    // 59 s.
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_secs(59)));
}

/// An earlier release's window of 10,000 distinct times (more than Lua's
/// `unpack` takes at once) converts whole, and expires by itself even under
/// a policy that records nothing on a denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_window_kept_by_an_earlier_release_converts_whole() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::AllowedOnly, ManualClock::default());
    let id = set.add("notify", quota(10_000, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "bigup", Fallback::Refuse));
    let now = Timestamp::from_secs(10_000);
    let us = now.as_nanos() / 1_000;
    let mut push = redis::cmd("RPUSH");
    push.arg("bigup:{=k}:notify");
    for i in 1..=10_000u64 {
        push.arg(us - i);
    }
    let _: () = push.query_async(&mut raw(&server).await).await.unwrap();
    let d = limits.check_n_at(&[id], "k", nz(1), now).await.unwrap();
    assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
    assert!(!d.is_allowed(), "10,000 held of 10,000");
    let runs: usize = redis::cmd("LLEN")
        .arg("bigup:{=k}:notify")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert_eq!(runs, 10_000);
    let ttl: i64 = redis::cmd("PTTL")
        .arg("bigup:{=k}:notify")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
}

/// A limit's window moved across a tick boundary under the same name
/// (5/s to 5/h: microseconds to milliseconds): the stored times are in
/// the old tick. Before, they were read in the new one: microseconds read
/// as milliseconds locked the caller out (Retry-After 1.79e12 s, a TTL of
/// 1.79e15 ms), milliseconds read as microseconds forgot the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_moved_across_a_tick_boundary_keeps_its_attempts() {
    let server = TestRedis::start();
    // One window of each tick: µs (under ~35.8 min), ms, s (over ~24.8 days).
    let windows = [
        Duration::from_secs(30 * 60),
        Duration::from_secs(3_600),
        Duration::from_secs(30 * 86_400),
    ];
    for (a, from) in windows.iter().enumerate() {
        for (b, to) in windows.iter().enumerate() {
            if a == b {
                continue;
            }
            let prefix = format!("tick{a}{b}");
            let limits = |window: Duration| {
                let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
                let id = set.add("notify", quota(5, window));
                (
                    Limits::redis(set, store(&server, &prefix, Fallback::Refuse)),
                    id,
                )
            };
            let (before, id) = limits(*from);
            for _ in 0..5 {
                let d = before.check(&[id], "k").await;
                assert!(d.is_allowed(), "{from:?}: {:?}", d.store_error());
            }
            let (after, id) = limits(*to);
            let d = after.check(&[id], "k").await;
            assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
            assert!(
                !d.is_allowed(),
                "{from:?} -> {to:?}: the five attempts were lost"
            );
            // Attempts are stamped at the next tick (as in process): a
            // wait may pass the window by up to one tick of either size.
            let ticks = [
                Duration::from_micros(1),
                Duration::from_millis(1),
                Duration::from_secs(1),
            ];
            let retry = d.retry_after().unwrap();
            assert!(
                retry <= *to + ticks[a].max(ticks[b]) && retry + Duration::from_secs(60) > *to,
                "{from:?} -> {to:?}: retry after {retry:?}"
            );
            let ttl: i64 = redis::cmd("PTTL")
                .arg(format!("{prefix}:{{=k}}:notify"))
                .query_async(&mut raw(&server).await)
                .await
                .unwrap();
            // Two of the new windows at most: the old, longer expiry is cut.
            let most = (2 * *to + ticks[a].max(ticks[b])).as_millis() as i64;
            assert!(ttl > 0 && ttl <= most, "{from:?} -> {to:?}: TTL {ttl} ms");
            // And back: still held, in the first tick again.
            let (back, id) = limits(*from);
            let d = back.check(&[id], "k").await;
            assert!(!d.is_allowed(), "{to:?} -> {from:?}");
            assert!(d.retry_after().unwrap() <= *from + ticks[a].max(ticks[b]));
        }
    }
}

/// Redis calls a script made since the last `CONFIG RESETSTAT` to the
/// commands named (from `INFO commandstats`).
async fn calls(conn: &mut redis::aio::MultiplexedConnection, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| commands.iter().any(|c| l.starts_with(&format!("{c}:"))))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A window of `runs` runs of one attempt each, one microsecond apart,
/// the newest at `now_us`, as the script writes them.
async fn window_of(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    runs: u64,
    now_us: u64,
) {
    let ex = (now_us + 120_000_000) as f64;
    let mut push = redis::cmd("RPUSH");
    push.arg(key);
    for i in 0..runs {
        // Newest first: run i is `i` µs old, its running total runs - i.
        let mut run = Vec::with_capacity(28);
        run.extend_from_slice(&((now_us - i) as f64).to_be_bytes());
        run.extend_from_slice(&1u32.to_be_bytes());
        run.extend_from_slice(&((runs - i) as f64).to_be_bytes());
        run.extend_from_slice(&ex.to_be_bytes());
        push.arg(run);
    }
    let _: () = push.query_async(conn).await.unwrap();
}

/// Each check reads and writes O(log runs) list entries, not O(runs):
/// the trim of expired runs, the drop of the oldest under CountDenied and
/// the walk to the attempt a retry waits for were one call per run (at
/// 20,000 runs a check of cost 10,000 took 67 ms of Redis time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_touches_log_many_runs_however_many_there_are() {
    const RUNS: u64 = 8_000;
    const BOUND: u64 = 64;
    let server = TestRedis::start();
    let mut conn = raw(&server).await;
    let now = Timestamp::from_secs(10_000);
    let now_us = now.as_nanos() / 1_000;
    let window = Duration::from_secs(60);
    let list_calls = ["lindex", "rpop", "lrange", "lset", "ltrim", "llen"];
    for (case, policy, at, cost) in [
        // Half the runs expired by then: the trim.
        (
            "trim",
            Policy::CountDenied,
            now.saturating_add(window - Duration::from_micros(RUNS / 2)),
            1,
        ),
        // Full: the oldest half dropped to make room.
        ("drop", Policy::CountDenied, now, RUNS as u32 / 2),
        // Full, nothing recorded: the walk to the attempt a retry waits for.
        ("wait", Policy::AllowedOnly, now, RUNS as u32 / 2),
    ] {
        let mut set = LimitSet::new(policy, ManualClock::default());
        let id = set.add("notify", quota(RUNS as u32, window));
        let limits = Limits::redis(set, store(&server, case, Fallback::Refuse));
        window_of(&mut conn, &format!("{case}:{{=k}}:notify"), RUNS, now_us).await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .unwrap();
        let d = limits.check_n_at(&[id], "k", nz(cost), at).await.unwrap();
        assert_eq!(d.scope(), Scope::Shared, "{case}: {:?}", d.store_error());
        let used = calls(&mut conn, &list_calls).await;
        assert!(used <= BOUND, "{case}: {used} list calls for {RUNS} runs");
        let held = RUNS - u64::from(d.decisions()[0].1.remaining());
        match case {
            "trim" => {
                assert!(d.is_allowed(), "{case}");
                assert_eq!(held, RUNS / 2 + 1, "{case}");
            }
            "drop" => {
                assert!(!d.is_allowed(), "{case}");
                // The oldest half left for the new attempts, which joined
                // the newest run (the same microsecond).
                let runs: u64 = redis::cmd("LLEN")
                    .arg(format!("{case}:{{=k}}:notify"))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(runs, RUNS / 2, "{case}");
            }
            _ => {
                assert!(!d.is_allowed(), "{case}");
                // The 4,000th oldest of 8,000 attempts one µs apart leaves
                // a window after it was made: 3,999 µs before the newest.
                let wait = d.retry_after().unwrap();
                assert_eq!(wait, window - Duration::from_micros(RUNS / 2), "{case}");
            }
        }
    }
}

/// A limit over 2^31: a run's count is a u32, and a head that took
/// more than it holds wrapped: the drop then read the wrapped count and
/// popped the head too, so the window was lost and the next 4e9 allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_holds_more_than_the_limit() {
    let server = TestRedis::start();
    let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
    let id = set.add("bytes", quota(4_000_000_000, Duration::from_secs(60)));
    let limits = Limits::redis(set, store(&server, "big", Fallback::Refuse));
    let t1 = Timestamp::from_secs(10_000);
    let t2 = Timestamp::from_secs(10_001);
    let check = |cost: u32, at: Timestamp| {
        let limits = &limits;
        async move {
            let d = limits.check_n_at(&[id], "k", nz(cost), at).await.unwrap();
            assert_eq!(d.scope(), Scope::Shared, "{:?}", d.store_error());
            d.is_allowed()
        }
    };
    assert!(check(1_000_000_000, t1).await);
    assert!(check(3_000_000_000, t2).await);
    // Denied, and recorded (CountDenied): 5e9 at t2 in one run, over u32.
    assert!(!check(2_000_000_000, t2).await);
    assert!(!check(4_000_000_000, t2).await, "the window was lost");
}
