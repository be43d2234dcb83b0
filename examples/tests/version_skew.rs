//! Version skew: the previous release (the commit `compat/baseline`
//! names, built from the git history) and this build, side by side and
//! back, on loopback from the machine's binaries: HAProxy, PostgreSQL,
//! Redis and a counting provider, as in the chaos suite.
//!
//! 1. **mixed**: two replicas of each build behind HAProxy, one
//!    PostgreSQL ledger and one Redis, under `/invoke` and `/notify` load:
//!    no request id reaches the provider twice, every answer replays
//!    identically on every replica of either build, and one caller's
//!    limit is shared exactly (150 of 300 sent at once, 150 of 160 in a
//!    row).
//! 2. **roll**: the baseline, then this build, then the baseline again,
//!    over the same Redis, PostgreSQL and redb data dir: every key
//!    answered, records written by either build replay under the other, a
//!    call cut by a SIGKILL mid-flight is answered by the next build
//!    without a second call, and the limit still counts across the three
//!    (150 of 160).
//! 3. **redb**: each build opens the file the other wrote (part of 2).
//!
//! It prints one table (scenario, promise, result) and fails with a line
//! per broken promise. Run it alone with
//! `cargo test -p ate-examples --test version_skew -- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ate_ledger::testing::TestPostgres;
use ate_ratelimit::testing::TestRedis;
use common::baseline::baseline;
use common::fault::Haproxy;
use common::provider::CountingProvider;
use common::*;

/// The lease: short, so a call cut by a SIGKILL is decided soon.
const LEASE_SECS: &str = "1";
/// How long a key may take to get a final answer, retries included.
const KEY_BOUND: Duration = Duration::from_secs(20);

/// One build's two services.
#[derive(Clone)]
struct Build {
    name: String,
    /// `axum-service`, `actix-service`.
    services: [String; 2],
}

fn builds() -> (Build, Build) {
    let b = baseline();
    let old = Build {
        name: b.release.clone(),
        services: b.services.clone().map(|p| p.to_str().unwrap().to_owned()),
    };
    let new = Build {
        name: "current".to_owned(),
        services: SERVICES.map(str::to_owned),
    };
    (old, new)
}

/// The promises checked, in order, for the table.
#[derive(Default)]
struct Table {
    rows: Vec<(String, String, Result<String, String>)>,
}

impl Table {
    fn check(&mut self, scenario: &str, promise: &str, held: bool, detail: String) {
        let result = if held { Ok(detail) } else { Err(detail) };
        self.rows
            .push((scenario.to_owned(), promise.to_owned(), result));
    }

    fn finish(self) {
        eprintln!("{:<10} {:<66} result", "scenario", "promise");
        for (s, p, r) in &self.rows {
            match r {
                Ok(d) => eprintln!("{s:<10} {p:<66} ok ({d})"),
                Err(d) => eprintln!("{s:<10} {p:<66} BROKEN ({d})"),
            }
        }
        let broken: Vec<String> = self
            .rows
            .iter()
            .filter_map(|(s, p, r)| r.as_ref().err().map(|d| format!("BROKEN: {s}: {p}: {d}")))
            .collect();
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }
}

/// The environment every replica gets; `pg` puts the ledger in
/// PostgreSQL (else redb in the data dir).
fn env(
    redis: &TestRedis,
    provider: &CountingProvider,
    pg: Option<&str>,
    worker: &str,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("ATE_RATELIMIT_REDIS_URL", redis.url()),
        ("ATE_PROVIDER_URL", provider.url()),
        ("ATE_LEDGER_LEASE_SECS", LEASE_SECS.to_owned()),
        ("ATE_DRAIN_TIMEOUT_SECS", "5".to_owned()),
        // The load shares one client address: /invoke's per-caller limit
        // (this build only) is not what is checked here.
        ("ATE_INVOKE_PER_MIN", "1000000".to_owned()),
        (EDGE.0, EDGE.1.to_owned()),
        ("ATE_WORKER_ID", worker.to_owned()),
    ];
    if let Some(url) = pg {
        env.push(("ATE_LEDGER_POSTGRES_URL", url.to_owned()));
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn start(bin: &str, env: &[(String, String)], dir: &Path) -> Service {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Service::start_in(bin, &env, dir.to_path_buf())
}

/// The provider's answer for a body: 200, `delay_ms` late.
fn body(delay_ms: u64) -> String {
    format!("{{\"status\":200,\"delay_ms\":{delay_ms}}}")
}

/// Sends `key` to `url` until it has a final answer (409, 503, 502 and a
/// cut connection are retried): the final status and body, or the first
/// status that is neither final nor retryable.
async fn invoke(c: &reqwest::Client, url: &str, key: &str, body: &str) -> (u16, String) {
    let start = Instant::now();
    loop {
        let res = c
            .post(url)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await;
        let (status, text) = match res {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.text().await.unwrap_or_default())
            }
            Err(_) => (0, String::new()),
        };
        match status {
            409 | 503 | 502 | 0 if start.elapsed() < KEY_BOUND => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => return (status, text),
        }
    }
}

/// `n` notifications for `caller` at `urls` in turn: how many were
/// allowed, and any status other than 200 and 429.
async fn notify(c: &reqwest::Client, urls: &[String], caller: &str, n: usize) -> (u32, Vec<u16>) {
    let mut allowed = 0;
    let mut odd = Vec::new();
    for i in 0..n {
        let status = c
            .post(&urls[i % urls.len()])
            .header("x-caller", caller)
            .send()
            .await
            .map_or(0, |r| r.status().as_u16());
        match status {
            200 => allowed += 1,
            429 => {}
            other => odd.push(other),
        }
    }
    (allowed, odd)
}

/// Replays every `(key, body)` answered before on each of `services`:
/// the keys that did not answer 200 with the same body, and how many
/// provider calls the replays made.
async fn replay(
    c: &reqwest::Client,
    provider: &CountingProvider,
    services: &[&Service],
    answered: &BTreeMap<String, (String, String)>,
) -> (Vec<String>, usize) {
    let before = provider.total();
    let mut wrong = Vec::new();
    for s in services {
        for (key, (sent, got)) in answered {
            let (status, text) = invoke(c, &s.url("/invoke"), key, sent).await;
            if status != 200 || &text != got {
                wrong.push(format!("{key} at {}: {status} {text}", s.base));
            }
        }
    }
    (wrong, provider.total() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_n_minus_1_and_n_serve_together_and_roll_both_ways() {
    let (old, new) = tokio::task::spawn_blocking(builds).await.unwrap();
    let mut table = Table::default();
    let started = Instant::now();
    mixed(&old, &new, &mut table).await;
    roll(&old, &new, &mut table).await;
    eprintln!(
        "baseline {} ({}); {:.1} s",
        old.name,
        baseline().commit,
        started.elapsed().as_secs_f64()
    );
    table.finish();
}

/// Scenario 1: both builds behind one front.
async fn mixed(old: &Build, new: &Build, table: &mut Table) {
    const S: &str = "mixed";
    let pg = TestPostgres::start();
    let redis = TestRedis::start();
    let provider = CountingProvider::start().await;
    let c = client();
    // This build first: it migrates the schema, and the old writers then
    // work on the migrated tables.
    let mut replicas = Vec::new();
    let mut dirs = Vec::new();
    for build in [new, old] {
        for (bin, fw) in build.services.iter().zip(["axum", "actix"]) {
            let dir = tempfile::tempdir().unwrap();
            let worker = format!("{}-{fw}", build.name);
            let s = start(
                bin,
                &env(&redis, &provider, Some(&pg.url()), &worker),
                dir.path(),
            );
            s.wait_ready().await;
            replicas.push(s);
            dirs.push(dir);
        }
    }
    let front = Haproxy::start(&replicas.iter().map(|r| r.port).collect::<Vec<_>>());
    front.wait_in_rotation().await;

    // The load: /invoke with fresh keys, and one caller's /notify from
    // two tasks at once, all through the front.
    let stop = Arc::new(AtomicBool::new(false));
    let notified = Arc::new(AtomicU32::new(0));
    let notify_odd = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut notifiers = Vec::new();
    for _ in 0..2 {
        let (url, notified, odd) = (front.url("/notify"), notified.clone(), notify_odd.clone());
        notifiers.push(tokio::spawn(async move {
            let (allowed, bad) = notify(&client(), &[url], "skew-load", 150).await;
            notified.fetch_add(allowed, Ordering::SeqCst);
            odd.lock().unwrap().extend(bad);
        }));
    }
    let mut clients = Vec::new();
    for id in 0..6 {
        let (url, stop) = (front.url("/invoke"), stop.clone());
        clients.push(tokio::spawn(async move {
            let c = client();
            let mut out = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let key = format!("mixed-{id}-{n}");
                let sent = body(n % 40);
                let (status, text) = invoke(&c, &url, &key, &sent).await;
                out.push((key, sent, status, text));
            }
            out
        }));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let mut answered = BTreeMap::new();
    let mut not_200 = Vec::new();
    for h in clients {
        for (key, sent, status, text) in h.await.unwrap() {
            if status == 200 {
                answered.insert(key, (sent, text));
            } else {
                not_200.push(format!("{key}: {status} {text}"));
            }
        }
    }
    for h in notifiers {
        h.await.unwrap();
    }
    table.check(
        S,
        "every /invoke key answered 200 under load",
        not_200.is_empty() && answered.len() > 20,
        if not_200.is_empty() {
            format!("{} keys", answered.len())
        } else {
            not_200.join("; ")
        },
    );
    let repeated = provider.repeated();
    table.check(
        S,
        "no request id reaches the provider twice",
        repeated.is_empty(),
        format!("{} calls, repeated {repeated:?}", provider.total()),
    );
    let all: Vec<&Service> = replicas.iter().collect();
    let (wrong, calls) = replay(&c, &provider, &all, &answered).await;
    table.check(
        S,
        "every answer replays identically on all four replicas",
        wrong.is_empty() && calls == 0,
        if wrong.is_empty() {
            format!(
                "{} replays, {calls} provider calls",
                answered.len() * all.len()
            )
        } else {
            wrong.join("; ")
        },
    );
    let odd = notify_odd.lock().unwrap().clone();
    let allowed = notified.load(Ordering::SeqCst);
    table.check(
        S,
        "one limit across builds: 150 of 300 sent at once",
        allowed == 150 && odd.is_empty(),
        format!("{allowed} allowed, other statuses {odd:?}"),
    );
    let (allowed, odd) = notify(&c, &[front.url("/notify")], "skew-row", 160).await;
    table.check(
        S,
        "one limit across builds: 150 of 160 in a row",
        allowed == 150 && odd.is_empty(),
        format!("{allowed} allowed, other statuses {odd:?}"),
    );
    drop(front);
}

/// One phase of the roll: a build's two replicas, the PostgreSQL one (A,
/// axum) and the redb one (B, actix), on the data dirs every phase uses.
struct Phase {
    pg: Service,
    redb: Service,
}

/// Scenario 2 (and 3): baseline, this build, baseline again.
async fn roll(old: &Build, new: &Build, table: &mut Table) {
    const S: &str = "roll";
    let pg = TestPostgres::start();
    let redis = TestRedis::start();
    let provider = CountingProvider::start().await;
    let c = client();
    let pg_dir = tempfile::tempdir().unwrap();
    let redb_dir = tempfile::tempdir().unwrap();
    // Answered keys per ledger: key -> (body sent, answer).
    let mut on_pg = BTreeMap::new();
    let mut on_redb = BTreeMap::new();
    // The key cut mid-call by the previous phase's SIGKILL, per ledger.
    let mut cut: Option<(String, String)> = None;
    let mut notified = 0;
    let order = [old, new, old];
    for (i, build) in order.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| order[p].name.as_str());
        let phase = Phase {
            pg: start(
                &build.services[0],
                &env(
                    &redis,
                    &provider,
                    Some(&pg.url()),
                    &format!("{}-pg", build.name),
                ),
                pg_dir.path(),
            ),
            redb: start(
                &build.services[1],
                &env(&redis, &provider, None, &format!("{}-redb", build.name)),
                redb_dir.path(),
            ),
        };
        phase.pg.wait_ready().await;
        phase.redb.wait_ready().await;
        if let Some(prev) = prev {
            // Everything the earlier builds answered replays here.
            let (wrong_pg, calls_pg) = replay(&c, &provider, &[&phase.pg], &on_pg).await;
            let (wrong_redb, calls_redb) = replay(&c, &provider, &[&phase.redb], &on_redb).await;
            table.check(
                S,
                &format!(
                    "{} replays what {prev} and before answered (pg)",
                    build.name
                ),
                wrong_pg.is_empty() && calls_pg == 0,
                format!("{} keys, {calls_pg} calls {wrong_pg:?}", on_pg.len()),
            );
            table.check(
                "redb",
                &format!("{} opens and replays a file {prev} wrote", build.name),
                wrong_redb.is_empty() && calls_redb == 0,
                format!("{} keys, {calls_redb} calls {wrong_redb:?}", on_redb.len()),
            );
            // The key the previous build was cut in the middle of.
            if let Some((key, sent)) = cut.take() {
                let (status, text) = invoke(&c, &phase.pg.url("/invoke"), &key, &sent).await;
                let calls = provider.calls(&key).len();
                table.check(
                    S,
                    &format!(
                        "{} decides a call {prev} was killed in, without a second call",
                        build.name
                    ),
                    status == 504 && calls == 1,
                    format!("{key}: {status} {text}, {calls} provider call(s)"),
                );
            }
        }
        // New keys on both ledgers.
        let mut failed = Vec::new();
        for (svc, into, ledger) in [
            (&phase.pg, &mut on_pg, "pg"),
            (&phase.redb, &mut on_redb, "redb"),
        ] {
            for n in 0..10 {
                let key = format!("roll-{i}-{ledger}-{n}");
                let sent = body(n);
                let (status, text) = invoke(&c, &svc.url("/invoke"), &key, &sent).await;
                if status == 200 && provider.calls(&key).len() == 1 {
                    into.insert(key, (sent, text));
                } else {
                    failed.push(format!("{key}: {status} {text}"));
                }
            }
        }
        table.check(
            S,
            &format!("{} answers new keys on both ledgers", build.name),
            failed.is_empty(),
            if failed.is_empty() {
                "20 keys".to_owned()
            } else {
                failed.join("; ")
            },
        );
        // The shared limit, counted on from the previous builds.
        let urls = [phase.pg.url("/notify"), phase.redb.url("/notify")];
        let n = if i + 1 == order.len() { 60 } else { 50 };
        let (allowed, odd) = notify(&c, &urls, "skew-roll", n).await;
        notified += allowed;
        if !odd.is_empty() {
            table.check(
                S,
                &format!("{} answers /notify 200 or 429", build.name),
                false,
                format!("{odd:?}"),
            );
        }
        // Leave: the PostgreSQL replica is SIGKILLed in the middle of a
        // call (not in the last phase); the redb one drains and stops.
        let Phase {
            pg: mut a,
            redb: mut b,
        } = phase;
        if i + 1 < order.len() {
            let key = format!("roll-{i}-cut");
            let sent = body(3_000);
            let url = a.url("/invoke");
            let (k, s) = (key.clone(), sent.clone());
            let pending = tokio::spawn(async move {
                let _ = client()
                    .post(url)
                    .header("idempotency-key", k)
                    .header("content-type", "application/json")
                    .body(s)
                    .send()
                    .await;
            });
            eventually(Duration::from_secs(5), || async {
                provider.calls(&key).len() == 1
            })
            .await;
            a.signal("KILL");
            let _ = a.wait_exit(Duration::from_secs(5));
            pending.abort();
            cut = Some((key, sent));
        }
        drop(a);
        b.sigterm();
        let exited = b.wait_exit(Duration::from_secs(15));
        table.check(
            S,
            &format!("{} stops on SIGTERM", build.name),
            exited.is_some_and(|s| s.success()),
            format!("{exited:?}"),
        );
    }
    table.check(
        S,
        "one limit across the three builds: 150 of 160",
        notified == 150,
        format!("{notified} allowed"),
    );
    let repeated = provider.repeated();
    table.check(
        S,
        "no request id reaches the provider twice",
        repeated.is_empty(),
        format!("{} calls, repeated {repeated:?}", provider.total()),
    );
}
