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
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ate_ratelimit::testing::TestRedis;
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

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .status();
}

fn find_bin(name: &str, extra: &[&str]) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .or_else(|| {
            extra
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
}

fn pg_bin(name: &str) -> PathBuf {
    let mut dirs: Vec<String> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin").display().to_string())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    find_bin(name, &dirs).unwrap_or_else(|| {
        panic!("{name} not found: install PostgreSQL (Debian: apt-get install postgresql)")
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A PostgreSQL server of the suite's own that it can restart and stall.
struct Pg {
    dir: PathBuf,
    root: bool,
    child: Option<Child>,
}

impl Pg {
    fn start() -> Self {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        let dir = PathBuf::from("/tmp").join(format!("ate-chaos-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if root {
            let _ = Command::new("chown").arg("postgres:").arg(&dir).status();
        }
        let out = Self::as_server(root, &pg_bin("initdb"))
            .args(["-A", "trust", "-U", "ate", "--no-sync", "-D"])
            .arg(dir.join("data"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Self {
            dir,
            root,
            child: None,
        };
        pg.spawn();
        pg
    }

    fn as_server(root: bool, program: &Path) -> Command {
        if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn spawn(&mut self) {
        let child = Self::as_server(self.root, &pg_bin("postgres"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-k")
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=100",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ready() {
            assert!(Instant::now() < deadline, "postgres did not start in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `postmaster.pid` says ready.
    fn ready(&self) -> bool {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .is_ok_and(|s| s.lines().nth(7).is_some_and(|l| l.trim() == "ready"))
    }

    fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn url(&self) -> String {
        format!(
            "host={} port=5432 user=ate dbname=postgres",
            self.dir.display()
        )
    }

    /// Fast shutdown (SIGINT), then a start.
    fn restart(&mut self) {
        let pid = self.pid();
        signal(pid, "INT");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "postgres did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.spawn();
    }

    /// Stalls every process of the server for `pause`. `runuser` (the
    /// server's parent when the suite runs as root) stops itself when its
    /// child stops, so it is continued too.
    fn stall(&self, pause: Duration) {
        let stalled = self.processes();
        for &p in &stalled {
            signal(p, "STOP");
        }
        std::thread::sleep(pause);
        for &p in &stalled {
            signal(p, "CONT");
        }
        if let Some(child) = &self.child {
            signal(child.id(), "CONT");
        }
    }

    /// The postmaster and every process it started.
    fn processes(&self) -> Vec<u32> {
        let master = self.pid();
        let mut out = vec![master];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces, so after ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(master) {
                out.push(pid);
            }
        }
        out
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            && let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok())
        {
            for p in self.processes() {
                signal(p, "CONT");
            }
            signal(pid, "QUIT");
        }
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "CONT");
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// HAProxy in front of the replicas, health-checking `/ready`.
struct Haproxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(backends: &[u16]) -> Self {
        let bin = find_bin("haproxy", &["/usr/sbin", "/usr/local/sbin"]).unwrap_or_else(|| {
            panic!("haproxy not found: install it (Debian: apt-get install haproxy); .ci/run does")
        });
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, p)| format!("  server r{i} 127.0.0.1:{p} check\n"))
            .collect();
        let config = format!(
            "global\n  maxconn 2000\n  log stderr format raw local0 info\n\
             defaults\n  mode http\n  log global\n  option httplog\n  timeout connect 1s\n  timeout client 30s\n  \
             timeout server 30s\n  retries 3\n  option redispatch\n\
             frontend front\n  bind 127.0.0.1:{port}\n  default_backend replicas\n\
             backend replicas\n  option httpchk GET /ready\n  http-check expect status 200\n  \
             default-server inter 100ms fall 2 rise 2\n{servers}"
        );
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(bin)
            .arg("-f")
            .arg(&path)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create("/tmp/chaos-haproxy.log").unwrap())
            .spawn()
            .unwrap();
        let front = Self {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        front
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
        let delay = if n % 10 == 0 { SLOW_MS } else { n % 40 };
        let body = format!("{{\"status\":200,\"delay_ms\":{delay}}}");
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
    let mut pg = Pg::start();
    let mut redis = TestRedis::start();
    let provider = CountingProvider::start().await;
    let env = |worker: &str| -> Vec<(String, String)> {
        [
            ("ATE_LEDGER_POSTGRES_URL", pg.url()),
            ("ATE_RATELIMIT_REDIS_URL", redis.url()),
            ("ATE_PROVIDER_URL", provider.url()),
            ("ATE_LEDGER_LEASE_SECS", LEASE_SECS.to_owned()),
            ("ATE_DRAIN_TIMEOUT_SECS", "5".to_owned()),
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
    let c = client();
    eventually(Duration::from_secs(10), || async {
        c.get(front.url("/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

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
        let row = |a: &Attempt| if a.overlaps(kill) { KILL_PHASE } else { a.phase };
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
            .body(format!(
                "{{\"status\":200,\"delay_ms\":{}}}",
                if key.rsplit('-').next().unwrap().parse::<u64>().unwrap() % 10 == 0 {
                    SLOW_MS
                } else {
                    key.rsplit('-').next().unwrap().parse::<u64>().unwrap() % 40
                }
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
