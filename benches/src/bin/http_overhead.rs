//! HTTP overhead of the middleware over loopback sockets: the same
//! trivial route served bare, with tower_governor (with and without its
//! headers), with each of ate's layers alone and with both, on axum (and
//! bare and both on actix-web). Every variant keeps its keep-alive
//! connections open for the whole run, and the variants take turns in
//! short slices (250 ms each), so a neighbour's burst on this shared
//! machine lands on all of them; each slice's throughput is compared with
//! the bare server's of the same framework in the same round. Prints one
//! JSON line per variant: requests per second, and the median and range of
//! its per-round ratio to bare.
//!
//! `cargo run --release -p ate-benches --bin http_overhead -- [ROUNDS] [CONNECTIONS]`

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ate_benches::{Wiring, read_response};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What an axum server mounts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Axum {
    Bare,
    Governor,
    GovernorHeaders,
    RateLimit,
    Readiness,
    Both,
}

fn axum_server(variant: Axum) -> SocketAddr {
    use axum::routing::get;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let bare = axum::Router::new().route("/hello", get(|| async { "ok" }));
            let w = Wiring::new();
            let app = match variant {
                Axum::Bare => bare,
                Axum::Governor | Axum::GovernorHeaders => {
                    use tower_governor::GovernorLayer;
                    use tower_governor::governor::GovernorConfigBuilder;
                    let mut builder = GovernorConfigBuilder::default();
                    builder.per_millisecond(1).burst_size(u32::MAX);
                    if variant == Axum::GovernorHeaders {
                        let config = builder.use_headers().finish().unwrap();
                        bare.layer(GovernorLayer::new(Arc::new(config)))
                    } else {
                        let config = builder.finish().unwrap();
                        bare.layer(GovernorLayer::new(Arc::new(config)))
                    }
                }
                Axum::RateLimit => w.axum_ratelimit(bare),
                Axum::Readiness => {
                    bare.layer(ate_readiness::tower::ReadinessLayer::new(w.gate.clone()))
                }
                Axum::Both => w.axum(bare),
            };
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            // Both served with the peer address, as a limited service is.
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

fn actix_server(wired: bool) -> SocketAddr {
    use actix_web::middleware::Condition;
    use actix_web::{App, HttpServer, web};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let (limits, readiness) = Wiring::new().actix();
            let server = HttpServer::new(move || {
                App::new()
                    .wrap(Condition::new(wired, limits.clone()))
                    .wrap(Condition::new(wired, readiness.clone()))
                    .route("/hello", web::get().to(|| async { "ok" }))
            })
            .workers(1)
            .disable_signals()
            .bind("127.0.0.1:0")
            .unwrap();
            tx.send(server.addrs()[0]).unwrap();
            server.run().await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// A variant's open connections and what they ask.
struct Persistent {
    name: &'static str,
    framework: &'static str,
    streams: Vec<TcpStream>,
    request: Arc<Vec<u8>>,
}

impl Persistent {
    async fn open(
        name: &'static str,
        framework: &'static str,
        addr: SocketAddr,
        conns: usize,
    ) -> Self {
        assert!(addr.ip().is_loopback(), "loopback only");
        let mut streams = Vec::new();
        for _ in 0..conns {
            let s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            streams.push(s);
        }
        let request = Arc::new(
            format!("GET /hello HTTP/1.1\r\nHost: {addr}\r\nX-Caller: bench\r\n\r\n").into_bytes(),
        );
        Self {
            name,
            framework,
            streams,
            request,
        }
    }

    /// Requests answered on every connection at once during `slice`.
    async fn drive(&mut self, slice: Duration) -> u64 {
        let end = Instant::now() + slice;
        let mut tasks = Vec::new();
        for mut stream in self.streams.drain(..) {
            let request = self.request.clone();
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut n = 0u64;
                while Instant::now() < end {
                    stream.write_all(&request).await.unwrap();
                    read_response(&mut stream, &mut buf).await.unwrap();
                    n += 1;
                }
                (stream, n)
            }));
        }
        let mut total = 0;
        for t in tasks {
            let (stream, n) = t.await.unwrap();
            self.streams.push(stream);
            total += n;
        }
        total
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let conns: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let slice = Duration::from_millis(250);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let servers = [
        ("bare", "axum", axum_server(Axum::Bare)),
        ("tower_governor", "axum", axum_server(Axum::Governor)),
        (
            "tower_governor_headers",
            "axum",
            axum_server(Axum::GovernorHeaders),
        ),
        ("ate_ratelimit", "axum", axum_server(Axum::RateLimit)),
        ("ate_readiness", "axum", axum_server(Axum::Readiness)),
        ("ate_both", "axum", axum_server(Axum::Both)),
        ("bare", "actix", actix_server(false)),
        ("ate_both", "actix", actix_server(true)),
    ];
    client.block_on(async move {
        let mut variants = Vec::new();
        for (name, framework, addr) in servers {
            variants.push(Persistent::open(name, framework, addr, conns).await);
        }
        // A warm-up round, then the measured ones.
        for v in &mut variants {
            v.drive(slice).await;
        }
        let mut counts = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (i, v) in variants.iter_mut().enumerate() {
                counts[i].push(v.drive(slice).await as f64);
            }
        }
        for (i, v) in variants.iter().enumerate() {
            let bare = variants
                .iter()
                .position(|b| b.framework == v.framework && b.name == "bare")
                .unwrap();
            let mut ratios: Vec<f64> = counts[i]
                .iter()
                .zip(&counts[bare])
                .map(|(n, b)| n / b)
                .collect();
            let rps = counts[i].iter().sum::<f64>() / (rounds as f64 * slice.as_secs_f64());
            let (lo, hi) = (
                ratios.iter().copied().fold(f64::INFINITY, f64::min),
                ratios.iter().copied().fold(0.0, f64::max),
            );
            println!(
                "{{\"framework\":\"{}\",\"variant\":\"{}\",\"rps\":{rps:.0},\"ratio_to_bare_median\":{:.3},\"ratio_min\":{lo:.3},\"ratio_max\":{hi:.3}}}",
                v.framework,
                v.name,
                median(&mut ratios)
            );
        }
    });
}
