//! HTTP overhead of the ate wiring: the same trivial route served bare and
//! with the wiring (readiness admission guard + a keyed rate-limit check
//! that never denies), on axum and actix-web, driven over loopback
//! keep-alive connections. Prints one JSON line per run.
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
            let app = if wired {
                let w = Wiring::new();
                axum::Router::new().route(
                    "/hello",
                    // The request itself, not a `HeaderMap` extractor: that
                    // clones every header, a cost of the handler's choice,
                    // not of the wiring (actix's `HttpRequest` clones none).
                    get(move |req: axum::extract::Request| {
                        let w = w.clone();
                        async move {
                            w.body(req.headers().get("x-caller").and_then(|v| v.to_str().ok()))
                        }
                    }),
                )
            } else {
                axum::Router::new().route("/hello", get(|| async { "ok" }))
            };
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

fn actix_server(wired: bool) -> SocketAddr {
    use actix_web::{App, HttpRequest, HttpServer, web};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let w = Wiring::new();
            let server = HttpServer::new(move || {
                let w = w.clone();
                let app = App::new();
                if wired {
                    app.route(
                        "/hello",
                        web::get().to(move |req: HttpRequest| {
                            let w = w.clone();
                            async move {
                                w.body(req.headers().get("x-caller").and_then(|v| v.to_str().ok()))
                            }
                        }),
                    )
                } else {
                    app.route("/hello", web::get().to(|| async { "ok" }))
                }
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
