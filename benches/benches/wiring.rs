//! The per-request cost of the middleware a service mounts (the readiness
//! layer + the rate-limit layer, with its RateLimit fields), measured
//! directly on axum without sockets: the HTTP run cannot resolve a few
//! percent on a 2-core machine, this can. The layers' cost is the wired
//! router's time less the bare router's; compare it with the time a bare
//! request takes over HTTP (1 / bare req/s per server core) in
//! BENCHMARKS.md.

use std::hint::black_box;
use std::net::SocketAddr;

use ate_benches::Wiring;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use tower::ServiceExt;

fn request() -> axum::http::Request<Body> {
    let mut req = axum::http::Request::get("/hello")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo("10.0.0.7:4000".parse::<SocketAddr>().unwrap()));
    req
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let bare = axum::Router::new().route("/hello", get(|| async { "ok" }));
    let w = Wiring::new();
    let wired = w.axum(bare.clone());
    let mut g = c.benchmark_group("http/wiring_per_request");
    // As `axum::serve` does: with the state given, each route's service is
    // built once (with its layers), not per request.
    for (name, app) in [("axum_bare", bare), ("axum_layers", wired)] {
        let app = app.with_state::<()>(());
        g.bench_function(name, |b| {
            b.iter(|| {
                let res = rt.block_on(app.clone().oneshot(request())).unwrap();
                black_box(res.status())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
