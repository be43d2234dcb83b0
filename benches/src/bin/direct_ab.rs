//! The direct `check()` rows again, with ate and governor interleaved:
//! batches of 200,000 checks, ate then governor, 300 times over, so a
//! neighbour's burst on this shared VM lands on both. Criterion runs one
//! function after the other, and their medians have moved by up to 1.5x
//! between runs of the same code here. The fastest tenth of batches (p10)
//! is what a quiet machine gives; its ratio is the row to read. Prints one
//! JSON line per path (ns per check).
//!
//! Beside the criterion rows' two paths it measures a third, `allowed_few`:
//! allowed again, but under a quota whose window holds a few hundred
//! attempts at this rate, as a service's limiter does, where the `allowed`
//! row's holds 50,000-80,000 (a ring of 512 KB or 1 MB). Each of ate's
//! batches follows one of governor's, a pause longer than the `allowed`
//! row's window (1 ms) but not `allowed_few`'s (10 µs): that row's window
//! drains and refills every batch, as a burst after a pause does. And a
//! batch of bare reads of the clock both limiters read (quanta's TSC), the
//! floor under every direct row, printed as governor's column of a `clock`
//! line with ate's column the same reads through ate's `MonotonicClock`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use ate_benches::{Spread, interleaved};
use ate_ratelimit::{Limiter, MonotonicClock, Quota, clock::Clock};

const BATCHES: usize = 300;
const CHECKS: u32 = 200_000;

fn print(path: &str, (a, g): (Spread, Spread)) {
    println!(
        "{{\"path\":\"{path}\",\"ate\":{},\"governor\":{}}}",
        a.json(),
        g.json()
    );
}

fn ab(a: impl FnMut() -> bool, b: impl FnMut() -> bool) -> (Spread, Spread) {
    interleaved(BATCHES, CHECKS, a, b)
}

fn main() {
    let mut paths = ate_benches::limiter_paths().to_vec();
    // 10,000 per 10 µs: never reached at one check per 10-20 ns, and the
    // window holds 500-1,000 attempts (4-8 KB of ring).
    let few = Quota::new(
        NonZeroU32::new(10_000).unwrap_or(NonZeroU32::MIN),
        Duration::from_micros(10),
    )
    .unwrap();
    paths.push(("allowed_few", few, ate_benches::allowed_quotas().1));
    for (path, ate_q, gov_q) in paths {
        let ate = Limiter::new(ate_q);
        let gov = governor::RateLimiter::direct(gov_q);
        let _ = (ate.check(), gov.check());
        print(
            path,
            ab(|| ate.check().is_allowed(), || gov.check().is_ok()),
        );
    }
    let (ours, quanta) = (MonotonicClock::new(), quanta::Clock::new());
    print(
        "clock",
        ab(
            || ours.now().as_nanos() != 0,
            || {
                black_box(quanta.now());
                true
            },
        ),
    );
}
