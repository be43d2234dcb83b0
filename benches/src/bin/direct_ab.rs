//! The direct `check()` rows again, with ate and governor interleaved:
//! batches of 200,000 checks, ate then governor, 300 times over, so a
//! neighbour's burst on this shared VM lands on both. Criterion runs one
//! function after the other, and their medians have moved by up to 1.5x
//! between runs of the same code here. The fastest tenth of batches (p10)
//! is what a quiet machine gives; its ratio is the row to read. Prints one
//! JSON line per path (ns per check).

use std::hint::black_box;
use std::time::Instant;

use ate_ratelimit::Limiter;

const BATCHES: usize = 300;
const CHECKS: u32 = 200_000;

/// ns per check of one batch.
fn batch(mut check: impl FnMut() -> bool) -> f64 {
    let start = Instant::now();
    for _ in 0..CHECKS {
        black_box(check());
    }
    start.elapsed().as_nanos() as f64 / f64::from(CHECKS)
}

/// `(min, p10, median)` of the batches.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 10], v[v.len() / 2])
}

fn main() {
    for (path, ate_q, gov_q) in ate_benches::limiter_paths() {
        let ate = Limiter::new(ate_q);
        let gov = governor::RateLimiter::direct(gov_q);
        let _ = (ate.check(), gov.check());
        let (mut a, mut g) = (Vec::new(), Vec::new());
        for _ in 0..BATCHES {
            a.push(batch(|| ate.check().is_allowed()));
            g.push(batch(|| gov.check().is_ok()));
        }
        let (a, g) = (spread(a), spread(g));
        println!(
            "{{\"path\":\"{path}\",\"ate\":[{:.2},{:.2},{:.2}],\"governor\":[{:.2},{:.2},{:.2}]}}",
            a.0, a.1, a.2, g.0, g.1, g.2
        );
    }
}
