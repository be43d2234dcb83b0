//! HTTP overhead of the ate middleware: the same trivial route served bare
//! and with both layers (the readiness layer and the rate-limit layer, a
//! per-peer check that never denies, with its RateLimit fields), on axum
//! and actix-web, driven over loopback keep-alive connections. Prints one
//! JSON line per run.
//!
//! `cargo run --release -p ate-benches --bin http_overhead -- [SECONDS] [CONNECTIONS]`

use std::net::SocketAddr;
use std::time::Duration;

use ate_benches::{Wiring, load};

fn axum_server(wired: bool) -> SocketAddr {
    use axum::routing::get;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let bare = axum::Router::new().route("/hello", get(|| async { "ok" }));
            let app = if wired {
                Wiring::new().axum(bare)
            } else {
                bare
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

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let conns: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let servers = [
        ("axum", false, axum_server(false)),
        ("axum", true, axum_server(true)),
        ("actix", false, actix_server(false)),
        ("actix", true, actix_server(true)),
    ];
    // Three rounds, alternating, so drift on a noisy machine hits both sides.
    for round in 0..3 {
        for (framework, wired, addr) in servers {
            let r = client
                .block_on(load(
                    addr,
                    "/hello",
                    conns,
                    Duration::from_millis(500),
                    Duration::from_secs(secs),
                ))
                .unwrap();
            println!(
                "{{\"framework\":\"{framework}\",\"wired\":{wired},\"round\":{round},\"rps\":{:.0},\"p50_us\":{:.1},\"p99_us\":{:.1},\"requests\":{}}}",
                r.rps,
                r.p50.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.requests
            );
        }
    }
}
