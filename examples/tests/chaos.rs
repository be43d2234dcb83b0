//! The chaos suite: the whole system under steady `/invoke` load while
//! every dependency breaks, one after another.
//!
//! On loopback, from the machine's binaries: HAProxy (health check on
//! `/ready`) in front of the axum and the actix example as two replicas,
//! sharing one PostgreSQL ledger and one Redis, calling a counting
//! provider over HTTP. Clients send fresh keys and retry each on 409, 503
//! and a cut connection until it is final; one call in ten is slower than
//! the lease, so renewals must carry it. The faults, in order:
//!
//! 1. a rolling restart of one replica (preStop `drain`, then SIGTERM);
//! 2. Redis SIGKILLed and restarted;
//! 3. Redis stalled (SIGSTOP for 3 s, then SIGCONT);
//! 4. PostgreSQL restarted (fast shutdown);
//! 5. PostgreSQL stalled (SIGSTOP of all its processes for 3 s);
//! 6. one replica SIGKILLed and started again.
//!
//! It prints one table (fault, requests during it, statuses, p50/p99) and
//! fails with a line naming the broken promise. Run it alone with
//! `cargo test -p ate-examples --test chaos -- --nocapture`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ate_ledger::testing::TestPostgres;
use ate_ratelimit::testing::TestRedis;
use common::fault::{Haproxy, free_port, signal};
use common::provider::CountingProvider;
use common::*;

/// Phase names, in order; 0 is the steady start.
const PHASES: [&str; 8] = [
    "steady",
    "rolling restart",
    "redis SIGKILL+restart",
    "redis SIGSTOP 3s",
    "postgres fast restart",
    "postgres SIGSTOP 3s",
    "replica SIGKILL+start",
    "steady (after)",
];
/// The phase in which a replica is SIGKILLed. Only requests in flight
/// while it lasts may be cut (502) or left ambiguous (504), whichever
/// phase they were sent in.
const KILL_PHASE: usize = 6;
const CLIENTS: usize = 8;
const LEASE_SECS: &str = "1";
/// A call slower than the lease (renewals must carry it).
const SLOW_MS: u64 = 1_500;
/// No request may take longer than this (the ledger's call timeout, 5 s,
/// plus a slow call and slack): every wait in the path is bounded.
const BOUND: Duration = Duration::from_secs(12);

/// One replica: its binary, port and data dir, to start it again.
struct Replica {
    bin: &'static str,
    port: u16,
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
    service: Option<Service>,
}

impl Replica {
    fn start(&mut self) {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.service = Some(Service::start_listening(
            self.bin,
            &env,
            self.dir.path().to_path_buf(),
            &format!("127.0.0.1:{}", self.port),
        ));
    }

    fn service(&mut self) -> &mut Service {
        self.service.as_mut().unwrap()
    }
}

/// One attempt: the phase it started in, its status (0: the socket was
/// dropped), whether a 503 carried `Retry-After`, when it was sent and
/// when it ended.
#[derive(Debug, Clone)]
struct Attempt {
    phase: usize,
    status: u16,
    retry_after: bool,
    sent: Instant,
    ended: Instant,
}

impl Attempt {
    fn took(&self) -> Duration {
        self.ended - self.sent
    }

    /// Whether it was in flight while `window` (from the SIGKILL until
    /// the replica was back) lasted: the only requests the kill may cut
    /// or leave ambiguous, whatever phase they were sent in.
    fn overlaps(&self, window: (Instant, Instant)) -> bool {
        self.sent <= window.1 && self.ended >= window.0
    }
}

/// How a key ended.
#[derive(Debug, Clone)]
struct Outcome {
    key: String,
    status: u16,
    body: String,
    attempts: Vec<Attempt>,
}

#[derive(Default)]
struct Log {
    attempts: Vec<Attempt>,
    outcomes: Vec<Outcome>,
}

/// The body of a client's `n`th key, which the counting provider reads:
/// answer 200, every tenth call slower than the lease.
fn request_body(n: u64) -> String {
    let delay = if n.is_multiple_of(10) {
        SLOW_MS
    } else {
        n % 40
    };
    format!("{{\"status\":200,\"delay_ms\":{delay}}}")
}

async fn client_loop(
    id: usize,
    front: String,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
) {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("chaos-{id}-{n}");
        let body = request_body(n);
        let mut attempts = Vec::new();
        let outcome = loop {
            let p = phase.load(Ordering::Relaxed);
            let sent = Instant::now();
            let res = c
                .post(&front)
                .header("idempotency-key", &key)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            let (status, retry_after, text) = match res {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let retry_after = r.headers().contains_key("retry-after");
                    (status, retry_after, r.text().await.unwrap_or_default())
                }
                Err(e) => {
                    eprintln!(
                        "chaos: {key} cut after {:?} (sent in phase {}): {e}",
                        sent.elapsed(),
                        PHASES[p]
                    );
                    (0, false, String::new())
                }
            };
            let attempt = Attempt {
                phase: p,
                status,
                retry_after,
                sent,
                ended: Instant::now(),
            };
            attempts.push(attempt.clone());
            log.lock().unwrap().attempts.push(attempt);
            match status {
                409 | 503 | 502 | 0 => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => {
                    break Outcome {
                        key: key.clone(),
                        status,
                        body: text,
                        attempts,
                    };
                }
            }
        };
        log.lock().unwrap().outcomes.push(outcome);
    }
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_keeps_its_promises_while_every_dependency_breaks() {
    let started = Instant::now();
    let mut pg = TestPostgres::start();
    let mut redis = TestRedis::start();
    let provider = CountingProvider::start().await;
    let env = |worker: &str| -> Vec<(String, String)> {
        [
            ("ATE_LEDGER_POSTGRES_URL", pg.url()),
            ("ATE_RATELIMIT_REDIS_URL", redis.url()),
            ("ATE_PROVIDER_URL", provider.url()),
            ("ATE_LEDGER_LEASE_SECS", LEASE_SECS.to_owned()),
            ("ATE_DRAIN_TIMEOUT_SECS", "5".to_owned()),
            // The clients share one address: /invoke's per-caller limit
            // is not what this suite checks. HAProxy is the edge whose
            // X-Caller the replicas believe.
            ("ATE_INVOKE_PER_MIN", "1000000".to_owned()),
            ("ATE_TRUSTED_PROXIES", "127.0.0.1/32".to_owned()),
            ("ATE_WORKER_ID", worker.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    };
    let mut replicas: Vec<Replica> = SERVICES
        .iter()
        .zip(["axum", "actix"])
        .map(|(bin, worker)| Replica {
            bin,
            port: free_port(),
            env: env(worker),
            dir: tempfile::tempdir().unwrap(),
            service: None,
        })
        .collect();
    for r in &mut replicas {
        r.start();
    }
    let front = Haproxy::start(&replicas.iter().map(|r| r.port).collect::<Vec<_>>());
    // Both replicas in rotation before the load starts.
    front.wait_in_rotation().await;
    let c = client();

    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Log::default()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            tokio::spawn(client_loop(
                id,
                front.url("/invoke"),
                phase.clone(),
                stop.clone(),
                log.clone(),
            ))
        })
        .collect();
    let settle = Duration::from_secs(2);
    tokio::time::sleep(settle).await;

    // 1. Rolling restart of the axum replica: preStop drain, SIGTERM.
    phase.store(1, Ordering::Relaxed);
    {
        let r = &mut replicas[0];
        let (bin, port) = (r.bin, r.port.to_string());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(bin)
                .args(["drain", "--port", &port, "--sleep", "1"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(out.status.success(), "the preStop drain hook failed");
        r.service().sigterm();
        let exited = r.service().wait_exit(Duration::from_secs(15));
        assert!(exited.is_some(), "the drained replica did not exit");
        r.start();
    }
    tokio::time::sleep(settle).await;

    // 2. Redis SIGKILLed and restarted.
    phase.store(2, Ordering::Relaxed);
    redis.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.restart();
    tokio::time::sleep(settle).await;

    // 3. Redis stalled for 3 s.
    phase.store(3, Ordering::Relaxed);
    let pid = redis.pid().unwrap();
    signal(pid, "STOP");
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(pid, "CONT");
    tokio::time::sleep(settle).await;

    // 4. PostgreSQL restarted (fast shutdown).
    phase.store(4, Ordering::Relaxed);
    tokio::task::block_in_place(|| pg.restart());
    tokio::time::sleep(settle).await;

    // 5. PostgreSQL stalled: every process of it, for 3 s.
    phase.store(5, Ordering::Relaxed);
    tokio::task::block_in_place(|| pg.stall(Duration::from_secs(3)));
    tokio::time::sleep(settle).await;

    // 6. One replica SIGKILLed, then started again.
    phase.store(KILL_PHASE, Ordering::Relaxed);
    let killed = Instant::now();
    {
        let r = &mut replicas[1];
        r.service().signal("KILL");
        let _ = r.service().wait_exit(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(500)).await;
        r.start();
    }
    let kill = (killed, Instant::now());
    tokio::time::sleep(settle).await;
    phase.store(7, Ordering::Relaxed);
    tokio::time::sleep(settle).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("every client's last key ended within 30 s")
            .unwrap();
    }

    let log = std::mem::take(&mut *log.lock().unwrap());
    // The table.
    eprintln!(
        "{:<24} {:>6}  {:<40} {:>8} {:>8}",
        "fault", "reqs", "statuses", "p50", "p99"
    );
    for (i, name) in PHASES.iter().enumerate() {
        // A request in flight when the replica was killed counts there,
        // whichever phase it was sent in.
        let row = |a: &Attempt| {
            if a.overlaps(kill) {
                KILL_PHASE
            } else {
                a.phase
            }
        };
        let these: Vec<&Attempt> = log.attempts.iter().filter(|a| row(a) == i).collect();
        let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
        for a in &these {
            *statuses.entry(a.status).or_default() += 1;
        }
        let statuses: Vec<String> = statuses
            .iter()
            .map(|(s, n)| {
                if *s == 0 {
                    format!("cut:{n}")
                } else {
                    format!("{s}:{n}")
                }
            })
            .collect();
        let took: Vec<Duration> = these.iter().map(|a| a.took()).collect();
        eprintln!(
            "{:<24} {:>6}  {:<40} {:>7.0}ms {:>7.0}ms",
            name,
            these.len(),
            statuses.join(" "),
            percentile(took.clone(), 0.5).as_secs_f64() * 1e3,
            percentile(took, 0.99).as_secs_f64() * 1e3,
        );
    }
    eprintln!(
        "{} keys, {} attempts, {} provider calls, {:.1} s",
        log.outcomes.len(),
        log.attempts.len(),
        provider.total(),
        started.elapsed().as_secs_f64()
    );

    // The promises.
    let repeated = provider.repeated();
    assert!(
        repeated.is_empty(),
        "BROKEN: a request id reached the provider twice: {repeated:?}"
    );
    for a in &log.attempts {
        match a.status {
            200 | 409 | 504 => {}
            503 => assert!(
                a.retry_after,
                "BROKEN: a 503 without Retry-After in phase {:?}",
                PHASES[a.phase]
            ),
            502 | 0 => assert!(
                a.overlaps(kill),
                "BROKEN: the front dropped or cut a request ({}) sent in phase {:?}, \
                 not in flight during the SIGKILL",
                a.status,
                PHASES[a.phase]
            ),
            other => panic!(
                "BROKEN: undocumented status {other} in phase {:?}",
                PHASES[a.phase]
            ),
        }
        assert!(
            a.took() <= BOUND,
            "BROKEN: a request took {:?} (bound {BOUND:?}) in phase {:?}",
            a.took(),
            PHASES[a.phase]
        );
    }
    let mut bodies: HashMap<String, String> = HashMap::new();
    for o in &log.outcomes {
        match o.status {
            200 => {
                let calls = provider.calls(&o.key).len();
                assert_eq!(
                    calls, 1,
                    "BROKEN: {} answered 200 after {calls} provider calls",
                    o.key
                );
                bodies.insert(o.key.clone(), o.body.clone());
            }
            504 => assert!(
                o.attempts.iter().any(|a| a.overlaps(kill)),
                "BROKEN: {} ended ambiguous (504) though none of its attempts was in \
                 flight during the SIGKILL (sent in {:?})",
                o.key,
                o.attempts
                    .iter()
                    .map(|a| PHASES[a.phase])
                    .collect::<Vec<_>>()
            ),
            other => panic!("BROKEN: {} ended {other}, not answered", o.key),
        }
    }
    assert!(
        bodies.len() > 100,
        "the load ran: {} keys answered 200",
        bodies.len()
    );
    // Every 200 replays the same body, without calling the provider again.
    let before = provider.total();
    for (key, body) in bodies.iter().take(200) {
        let r = c
            .post(front.url("/invoke"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(request_body(
                key.rsplit('-').next().unwrap().parse().unwrap(),
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "BROKEN: {key} did not replay");
        assert_eq!(
            &r.text().await.unwrap(),
            body,
            "BROKEN: {key} replayed another body"
        );
    }
    assert_eq!(
        provider.total(),
        before,
        "BROKEN: a replay called the provider"
    );
    // Limits are shared across the replicas while Redis answers: one
    // caller through the front gets 150 notifications in all.
    let mut allowed = 0;
    for _ in 0..160 {
        let r = c
            .post(front.url("/notify"))
            .header("x-caller", "chaos-limit")
            .send()
            .await
            .unwrap();
        allowed += u32::from(r.status() == 200);
    }
    assert_eq!(
        allowed, 150,
        "BROKEN: limits not shared across the replicas with Redis up"
    );
    drop(front);
    drop(replicas);
}
