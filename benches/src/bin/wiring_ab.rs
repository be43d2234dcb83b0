//! The per-request cost of each middleware on a trivial axum route, in
//! process (no sockets), interleaved in short slices so a neighbour's
//! burst lands on every variant: bare; tower_governor without and with
//! its headers; ate's rate-limit layer alone (with its IETF fields), and
//! without `Checked` in the request; the
//! readiness layer alone, and without `Admitted` in the request; a route
//! bound to a ready capability; both. Prints ns and allocations per request
//! (a counting allocator), medians over the rounds, and the ratios the
//! goals are stated in.
//!
//! `cargo run --release -p ate-benches --bin wiring_ab -- [ROUNDS] [REQUESTS_PER_SLICE]`

use std::alloc::System;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ate_benches::Wiring;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower::ServiceExt;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn request() -> axum::http::Request<Body> {
    let mut req = axum::http::Request::get("/hello")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo("10.0.0.7:4000".parse::<SocketAddr>().unwrap()));
    req
}

fn bare() -> Router {
    Router::new().route("/hello", get(|| async { "ok" }))
}

/// A governor that never denies in a run (a burst far past it).
fn governor(headers: bool) -> Router {
    let mut builder = GovernorConfigBuilder::default();
    builder.per_millisecond(1).burst_size(u32::MAX);
    if headers {
        let config = builder.use_headers().finish().unwrap();
        bare().layer(GovernorLayer::new(Arc::new(config)))
    } else {
        let config = builder.finish().unwrap();
        bare().layer(GovernorLayer::new(Arc::new(config)))
    }
}

fn ratelimit_layer(w: &Wiring) -> ate_ratelimit::tower::RateLimitLayer {
    let caller = ate_ratelimit::tower::Caller::peer().peer_from(|parts| {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    });
    ate_ratelimit::tower::RateLimitLayer::new(w.limits.clone())
        .route("/hello", &[w.hello], std::num::NonZeroU32::MIN)
        .caller(caller)
}

fn ratelimit_only(w: &Wiring) -> Router {
    bare().layer(ratelimit_layer(w))
}

/// The rate-limit layer without `Checked` in the request's extensions.
fn ratelimit_without_checked(w: &Wiring) -> Router {
    bare().layer(ratelimit_layer(w).without_checked())
}

/// A route bound to a capability that is ready (ate-readiness's
/// `CapabilityLayer`): its cost is one atomic load and a branch.
fn capability_only() -> Router {
    let caps = ate_readiness::Capabilities::builder()
        .ready_capability("hello")
        .build()
        .unwrap();
    let layer = ate_readiness::tower::CapabilityLayer::new(&caps, "hello").unwrap();
    Router::new().route("/hello", get(|| async { "ok" }).layer(layer))
}

/// The same route with a layer that does nothing (`tower`'s `Identity`):
/// what axum's per-route layer costs by itself (it boxes the route), the
/// floor the capability row is read against.
fn route_layer_noop() -> Router {
    Router::new().route(
        "/hello",
        get(|| async { "ok" }).layer(tower::layer::util::Identity::new()),
    )
}

fn readiness_only(w: &Wiring) -> Router {
    bare().layer(ate_readiness::tower::ReadinessLayer::new(w.gate.clone()))
}

/// The readiness layer without `Admitted` in the request's extensions.
fn readiness_without_admitted(w: &Wiring) -> Router {
    bare().layer(ate_readiness::tower::ReadinessLayer::new(w.gate.clone()).without_admitted())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(40);
    let per_slice: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let w = Wiring::new();
    let variants: Vec<(&str, Router)> = vec![
        ("bare", bare()),
        ("tower_governor", governor(false)),
        ("tower_governor_headers", governor(true)),
        ("ate_ratelimit", ratelimit_only(&w)),
        (
            "ate_ratelimit_without_checked",
            ratelimit_without_checked(&w),
        ),
        ("ate_readiness", readiness_only(&w)),
        (
            "ate_readiness_without_admitted",
            readiness_without_admitted(&w),
        ),
        ("route_layer_noop", route_layer_noop()),
        ("ate_capability", capability_only()),
        ("ate_both", w.axum(bare())),
    ];
    // `WIRING_ONLY=name` runs one variant (for a profiler).
    let only = std::env::var("WIRING_ONLY").ok();
    let variants: Vec<(&str, Router)> = variants
        .into_iter()
        .filter(|(n, _)| only.as_deref().is_none_or(|o| o == *n || *n == "bare"))
        .map(|(n, r)| (n, r.with_state::<()>(())))
        .collect();
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut allocs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 0..=rounds {
        for (i, (_, app)) in variants.iter().enumerate() {
            let region = Region::new(GLOBAL);
            let start = Instant::now();
            for _ in 0..per_slice {
                let res = rt.block_on(app.clone().oneshot(request())).unwrap();
                assert!(res.status().is_success());
                black_box(res);
            }
            let elapsed = start.elapsed();
            let stats = region.change();
            // Round 0 warms up.
            if round > 0 {
                ns[i].push(elapsed.as_nanos() as f64 / per_slice as f64);
                allocs[i].push(stats.allocations as f64 / per_slice as f64);
            }
        }
    }
    let results: Vec<(&str, f64, f64)> = variants
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (*name, median(&mut ns[i]), median(&mut allocs[i])))
        .collect();
    let bare_ns = results[0].1;
    let bare_allocs = results[0].2;
    for (name, n, a) in &results {
        println!(
            "{{\"variant\":\"{name}\",\"ns_per_request\":{n:.0},\"added_ns\":{:.0},\"allocs_per_request\":{a:.1},\"added_allocs\":{:.1}}}",
            n - bare_ns,
            a - bare_allocs
        );
    }
    let added = |name: &str| {
        results
            .iter()
            .find(|r| r.0 == name)
            .map(|r| r.1 - bare_ns)
            .unwrap_or(f64::NAN)
    };
    println!(
        "{{\"ratelimit_vs_governor_headers\":{:.2},\"both_vs_governor_headers\":{:.2}}}",
        added("ate_ratelimit") / added("tower_governor_headers"),
        added("ate_both") / added("tower_governor_headers")
    );
}
