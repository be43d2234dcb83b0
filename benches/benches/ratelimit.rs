//! ate-ratelimit beside governor, measured in the same groups: direct and
//! keyed (1k and 100k keys), allow-heavy and deny-heavy, 1 and 2 threads.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use ate_benches::{allowed_quotas, denied_quotas, limiter_paths, threaded};
use ate_ratelimit::{
    KeyedLimiter, LimitSet, Limiter, MonotonicClock, Policy, Quota, clock::Timestamp,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn direct(c: &mut Criterion) {
    for (path, ate_q, gov_q) in limiter_paths() {
        let mut g = c.benchmark_group(format!("ratelimit/direct_{path}"));
        let ate = Limiter::new(ate_q);
        let gov = governor::RateLimiter::direct(gov_q);
        let _ = (ate.check(), gov.check());
        g.bench_function("ate_check", |b| {
            b.iter(|| black_box(ate.check().is_allowed()))
        });
        g.bench_function("governor_check", |b| {
            b.iter(|| black_box(gov.check().is_ok()))
        });
        g.finish();
    }
    // With a caller-supplied timestamp (no clock read): steady state where
    // every attempt is allowed (100 per second, one every 10 ms).
    let mut g = c.benchmark_group("ratelimit/check_at");
    let ate = Limiter::new(Quota::new(nz(100), Duration::from_secs(1)).unwrap());
    // A plain counter (not an atomic): the row measures the check alone.
    let mut t = 0u64;
    g.bench_function("ate_check_at_allowed", |b| {
        b.iter(|| {
            t += 10_000_000;
            black_box(ate.check_at(Timestamp::from_nanos(t)).is_allowed())
        })
    });
    let deny = Limiter::new(denied_quotas().0);
    let _ = deny.check_at(Timestamp::ZERO);
    g.bench_function("ate_check_at_denied", |b| {
        b.iter(|| {
            black_box(
                deny.check_at(Timestamp::from_nanos(black_box(1_000)))
                    .is_allowed(),
            )
        })
    });
    g.finish();
}

fn keyed(c: &mut Criterion) {
    // The smoke run (`cargo test --benches`, unoptimized) uses 1k keys only.
    let sizes: &[u64] = if std::env::args().any(|a| a == "--bench") {
        &[1_000, 100_000]
    } else {
        &[1_000]
    };
    for &keys in sizes {
        for (path, ate_q, gov_q) in limiter_paths() {
            let mut g = c.benchmark_group(format!("ratelimit/keyed_{path}"));
            let ate = KeyedLimiter::new(ate_q);
            let gov = governor::RateLimiter::keyed(gov_q);
            for k in 0..keys {
                let _ = (ate.check(&k), gov.check_key(&k));
            }
            let mut i = 0u64;
            g.bench_with_input(BenchmarkId::new("ate", keys), &keys, |b, &n| {
                b.iter(|| {
                    i = (i + 7919) % n;
                    black_box(ate.check(&i).is_allowed())
                })
            });
            let mut i = 0u64;
            g.bench_with_input(BenchmarkId::new("governor", keys), &keys, |b, &n| {
                b.iter(|| {
                    i = (i + 7919) % n;
                    black_box(gov.check_key(&i).is_ok())
                })
            });
            g.finish();
        }
    }
}

fn two_threads(c: &mut Criterion) {
    for (path, ate_q, gov_q) in limiter_paths() {
        let mut g = c.benchmark_group(format!("ratelimit/one_key_2_threads_{path}"));
        let ate = Limiter::new(ate_q);
        let gov = governor::RateLimiter::direct(gov_q);
        let _ = (ate.check(), gov.check());
        g.bench_function("ate_check", |b| {
            b.iter_custom(|n| {
                threaded(2, n, || {
                    let _ = black_box(ate.check());
                })
            })
        });
        g.bench_function("governor_check", |b| {
            b.iter_custom(|n| threaded(2, n, || drop(black_box(gov.check()))))
        });
        g.finish();
    }
}

/// One call against two limits (a route limit and a shared bucket, as the
/// examples wire them): a `LimitSet` check, beside what a governor user
/// writes, two keyed checks. 1k callers, every attempt allowed.
fn combined(c: &mut Criterion) {
    let keys = 1_000u64;
    let mut g = c.benchmark_group("ratelimit/two_limits_allowed");
    let (allow, gov_allow) = allowed_quotas();
    let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
    let (route, bucket) = (set.add("route", allow), set.add("bucket", allow));
    let (gov_route, gov_bucket) = (
        governor::RateLimiter::keyed(gov_allow),
        governor::RateLimiter::keyed(gov_allow),
    );
    for k in 0..keys {
        let _ = set.check(&[route, bucket], &k);
        let _ = (gov_route.check_key(&k), gov_bucket.check_key(&k));
    }
    let mut i = 0u64;
    g.bench_function("ate_limit_set", |b| {
        b.iter(|| {
            i = (i + 7919) % keys;
            black_box(set.check(&[route, bucket], &i).is_allowed())
        })
    });
    let mut i = 0u64;
    g.bench_function("governor_two_keyed", |b| {
        b.iter(|| {
            i = (i + 7919) % keys;
            black_box(gov_route.check_key(&i).is_ok() & gov_bucket.check_key(&i).is_ok())
        })
    });
    g.finish();
}

criterion_group!(benches, direct, keyed, two_threads, combined);
criterion_main!(benches);
