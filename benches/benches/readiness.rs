//! ate-readiness: the state check and admit+drop, beside a bare atomic and
//! an uncontended mutex (the physical floor), 1 and 2 threads.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use ate_benches::threaded;
use ate_readiness::Gate;
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let gate = Gate::new();
    let atomic = AtomicU64::new(0);
    let mutex = parking_lot::Mutex::new(0u64);

    let mut g = c.benchmark_group("readiness/state_check");
    g.bench_function("ate_gate_is_serving", |b| {
        b.iter(|| black_box(&gate).is_serving())
    });
    g.bench_function("floor_atomic_load_relaxed", |b| {
        b.iter(|| black_box(&atomic).load(Ordering::Relaxed))
    });
    g.finish();

    let mut g = c.benchmark_group("readiness/admit_drop");
    g.bench_function("ate_admit_drop", |b| {
        b.iter(|| drop(black_box(&gate).admit()))
    });
    g.bench_function("floor_two_fetch_add", |b| {
        b.iter(|| {
            black_box(&atomic).fetch_add(1, Ordering::AcqRel);
            black_box(&atomic).fetch_sub(1, Ordering::AcqRel);
        })
    });
    g.bench_function("floor_mutex_lock_unlock", |b| {
        b.iter(|| *black_box(&mutex).lock() += 1)
    });
    g.finish();

    let mut g = c.benchmark_group("readiness/admit_drop_2_threads");
    g.bench_function("ate_admit_drop", |b| {
        b.iter_custom(|iters| threaded(2, iters, || drop(black_box(&gate).admit())))
    });
    g.bench_function("floor_two_fetch_add", |b| {
        b.iter_custom(|iters| {
            threaded(2, iters, || {
                black_box(&atomic).fetch_add(1, Ordering::AcqRel);
                black_box(&atomic).fetch_sub(1, Ordering::AcqRel);
            })
        })
    });
    g.bench_function("floor_mutex_lock_unlock", |b| {
        b.iter_custom(|iters| threaded(2, iters, || *black_box(&mutex).lock() += 1))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
