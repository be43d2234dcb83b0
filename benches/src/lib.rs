//! Helpers shared by the benchmark binaries: a small keep-alive HTTP/1.1
//! load generator (loopback only, bounded in time) and latency statistics.
// Not a library anyone depends on: its errors are documented where
// it serves them, not per function.
#![allow(clippy::missing_errors_doc)]

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Allow-heavy, as ate's quota and governor's: a limit the benchmark can
/// never reach in its window (10^6 per 1 ms; `u32::MAX` per second).
pub fn allowed_quotas() -> (ate_ratelimit::Quota, governor::Quota) {
    let million = NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MAX);
    (
        ate_ratelimit::Quota::new(million, Duration::from_millis(1)).unwrap(),
        governor::Quota::per_second(NonZeroU32::MAX),
    )
}

/// Deny-heavy, as ate's quota and governor's: one attempt per minute, so
/// everything after the first is denied.
pub fn denied_quotas() -> (ate_ratelimit::Quota, governor::Quota) {
    (
        ate_ratelimit::Quota::new(NonZeroU32::MIN, Duration::from_secs(60)).unwrap(),
        governor::Quota::per_minute(NonZeroU32::MIN),
    )
}

/// The two paths every limiter row is measured on, named as the rows are:
/// the criterion groups and `direct_ab` measure the same ones.
pub fn limiter_paths() -> [(&'static str, ate_ratelimit::Quota, governor::Quota); 2] {
    let ((allow, gov_allow), (deny, gov_deny)) = (allowed_quotas(), denied_quotas());
    [("allowed", allow, gov_allow), ("denied", deny, gov_deny)]
}

/// Interleaved A/B timing, for rows where criterion's one-after-the-other
/// runs are too noisy on a shared VM (`direct_ab`, `keyed_ab`): batches of
/// `checks` calls, `a` then `b`, `batches` times over, so a neighbour's
/// burst lands on both. Returns each side's `(min, p10, median)` ns per
/// call over the batches; the p10 is what a quiet machine gives.
#[inline(always)]
pub fn interleaved(
    batches: usize,
    checks: u32,
    mut a: impl FnMut() -> bool,
    mut b: impl FnMut() -> bool,
) -> (Spread, Spread) {
    let (mut x, mut y) = (Vec::with_capacity(batches), Vec::with_capacity(batches));
    for _ in 0..batches {
        x.push(batch(checks, &mut a));
        y.push(batch(checks, &mut b));
    }
    (Spread::of(x), Spread::of(y))
}

/// ns per call of one batch of `checks` calls. Always inlined, with the
/// closure inlined into its loop: left to the inliner, a change elsewhere
/// in the binary once left one side's closure behind a call (0.4 ns a
/// check) and not the other's.
#[inline(always)]
fn batch(checks: u32, mut f: impl FnMut() -> bool) -> f64 {
    let start = Instant::now();
    for _ in 0..checks {
        std::hint::black_box(f());
    }
    start.elapsed().as_nanos() as f64 / f64::from(checks)
}

/// The min, fastest tenth (p10) and median of some batches' ns per call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The fastest batch.
    pub min: f64,
    /// The batch a tenth of the way up.
    pub p10: f64,
    /// The middle batch.
    pub median: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self {
            min: v.first().copied().unwrap_or(f64::NAN),
            p10: v.get(v.len() / 10).copied().unwrap_or(f64::NAN),
            median: v.get(v.len() / 2).copied().unwrap_or(f64::NAN),
        }
    }

    /// `[min,p10,median]`, as the A/B binaries print it.
    pub fn json(&self) -> String {
        format!("[{:.2},{:.2},{:.2}]", self.min, self.p10, self.median)
    }
}

/// The middleware a service mounts, as both HTTP benches wire it: a
/// serving gate and a limit no loopback run can reach, checked per peer
/// address on `/hello`.
#[derive(Debug, Clone)]
pub struct Wiring {
    /// The readiness gate (serving).
    pub gate: ate_readiness::Gate,
    /// The limits, in process.
    pub limits: Arc<ate_ratelimit::Limits>,
    /// The one limit `/hello` checks.
    pub hello: ate_ratelimit::LimitId,
}

impl Wiring {
    /// A serving gate and a limit no loopback run can reach.
    pub fn new() -> Self {
        let mut set = ate_ratelimit::LimitSet::new(
            ate_ratelimit::Policy::CountDenied,
            ate_ratelimit::MonotonicClock::new(),
        );
        // The window stays small, so the ring does too.
        let hello = set.add(
            "hello",
            ate_ratelimit::Quota::new(NonZeroU32::MAX, Duration::from_millis(100)).unwrap(),
        );
        Self {
            gate: ate_readiness::Gate::new(),
            limits: Arc::new(ate_ratelimit::Limits::local(set)),
            hello,
        }
    }

    /// The rate-limit layer alone on an axum router, keyed by the peer
    /// from axum's `ConnectInfo`.
    pub fn axum_ratelimit(&self, router: axum::Router) -> axum::Router {
        use axum::extract::ConnectInfo;
        let caller = ate_ratelimit::tower::Caller::peer().peer_from(|parts| {
            parts
                .extensions
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip())
        });
        router.layer(
            ate_ratelimit::tower::RateLimitLayer::new(self.limits.clone())
                .route("/hello", &[self.hello], NonZeroU32::MIN)
                .caller(caller),
        )
    }

    /// The readiness and rate-limit layers on an axum router, keyed by the
    /// peer from axum's `ConnectInfo`.
    pub fn axum(&self, router: axum::Router) -> axum::Router {
        use axum::extract::ConnectInfo;
        let caller = ate_ratelimit::tower::Caller::peer().peer_from(|parts| {
            parts
                .extensions
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip())
        });
        router
            .layer(
                ate_ratelimit::tower::RateLimitLayer::new(self.limits.clone())
                    .route("/hello", &[self.hello], NonZeroU32::MIN)
                    .caller(caller),
            )
            .layer(ate_readiness::tower::ReadinessLayer::new(self.gate.clone()))
    }

    /// The same middleware for actix-web (wrap the rate limit first).
    pub fn actix(
        &self,
    ) -> (
        ate_ratelimit::actix::RateLimit,
        ate_readiness::actix::Readiness,
    ) {
        (
            ate_ratelimit::actix::RateLimit::new(self.limits.clone()).route(
                "/hello",
                &[self.hello],
                NonZeroU32::MIN,
            ),
            ate_readiness::actix::Readiness::new(self.gate.clone()),
        )
    }
}

impl Default for Wiring {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `f` `iters` times on each of `threads` threads at once; returns
/// the wall time (criterion's `iter_custom` divides it by `iters`, giving
/// the time per operation per thread).
pub fn threaded(threads: usize, iters: u64, f: impl Fn() + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..iters {
                    f();
                }
            });
        }
    });
    start.elapsed()
}

/// Requests per second and latency percentiles of one load run.
#[derive(Debug, Clone, Copy)]
pub struct LoadResult {
    /// Completed requests per second.
    pub rps: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Requests completed.
    pub requests: u64,
}

/// Drives `GET path` on `addr` over `connections` keep-alive connections for
/// `duration` (after `warmup`), stopping by itself. Loopback only.
pub async fn load(
    addr: SocketAddr,
    path: &str,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> std::io::Result<LoadResult> {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nX-Caller: bench\r\n\r\n").into_bytes();
    load_with(addr, connections, warmup, duration, move |_, _| {
        request.clone()
    })
    .await
}

/// As [`load`], with each request's bytes from `request(connection, n)`
/// (the `n`th request of that connection), and only `2xx` answers
/// counted: any other status is an error that ends the run.
pub async fn load_with(
    addr: SocketAddr,
    connections: usize,
    warmup: Duration,
    duration: Duration,
    request: impl Fn(usize, u64) -> Vec<u8> + Clone + Send + 'static,
) -> std::io::Result<LoadResult> {
    assert!(
        addr.ip().is_loopback(),
        "the load generator only targets loopback"
    );
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let mut tasks = Vec::new();
    for connection in 0..connections {
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut buf = vec![0u8; 4096];
            for n in 0_u64.. {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                stream.write_all(&request(connection, n)).await?;
                read_response(&mut stream, &mut buf).await?;
                if t0 >= measure_from {
                    latencies.push(t0.elapsed());
                }
            }
            Ok::<_, std::io::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(std::io::Error::other)??);
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Ok(LoadResult {
        rps: all.len() as f64 / duration.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        requests: all.len() as u64,
    })
}

/// Reads one response with a `Content-Length` body.
pub async fn read_response(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut have = 0;
    loop {
        let n = stream.read(&mut buf[have..]).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "server closed",
            ));
        }
        have += n;
        let text = &buf[..have];
        if let Some(end) = text.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&text[..end]).unwrap_or("");
            let status = head.split(' ').nth(1).unwrap_or("");
            if !status.starts_with('2') {
                return Err(std::io::Error::other(format!("answered {head:?}")));
            }
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if have >= end + 4 + len {
                return Ok(());
            }
        }
        if have == buf.len() {
            return Err(std::io::Error::other("response too large"));
        }
    }
}
