//! Bytes per key of the keyed limiters, measured with a counting allocator:
//! ate at N = 600 / 60 s for a key with one attempt in its window, a key at
//! 1 request/s and a saturated key, and governor's keyed limiter, at 100k
//! keys. Prints one JSON line each.

use std::alloc::System;
use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::{
    KeyedLimiter, Quota,
    clock::{ManualClock, Timestamp},
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: u64 = 100_000;

fn measure<T>(name: &str, build: impl FnOnce() -> T) {
    let region = Region::new(GLOBAL);
    let value = build();
    let stats = region.change();
    let net = stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
        + stats.bytes_reallocated as i64;
    println!(
        "{{\"limiter\":\"{name}\",\"keys\":{KEYS},\"bytes_per_key\":{:.1}}}",
        net as f64 / KEYS as f64
    );
    drop(value);
}

fn ate(per_key_attempts: u64, spacing: Duration) -> KeyedLimiter<u64, ManualClock> {
    let quota = Quota::new(NonZeroU32::new(600).unwrap(), Duration::from_secs(60)).unwrap();
    let l = KeyedLimiter::with_clock(quota, ManualClock::default());
    for step in 0..per_key_attempts {
        let now = Timestamp::from_nanos(step * spacing.as_nanos() as u64);
        for k in 0..KEYS {
            let _ = l.check_at(&k, now);
        }
    }
    l
}

fn main() {
    // A key with one attempt in its window, held inline in its table entry:
    // what most keys of a large table cost.
    measure("ate_one_attempt_key", || ate(1, Duration::from_secs(1)));
    measure("ate_1_rps_key", || ate(120, Duration::from_secs(1)));
    measure("ate_saturated_key", || ate(700, Duration::from_millis(10)));
    measure("governor_keyed", || {
        let g = governor::RateLimiter::keyed(governor::Quota::per_minute(
            NonZeroU32::new(600).unwrap(),
        ));
        for k in 0..KEYS {
            let _ = g.check_key(&k);
        }
        g
    });
}
