//! ate-generation: observe, the gate decision, and the shared form under 2
//! threads, beside an uncontended mutex.

use std::hint::black_box;

use ate_benches::threaded;
use ate_generation::{Decision, Latch, SharedLatch, Writer};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("generation/latch");
    g.bench_function("observe_noop", |b| {
        let mut latch = Latch::backfilled(10);
        b.iter(|| black_box(latch.observe(Writer::ControlPlane, black_box(10))))
    });
    g.bench_function("gate_decision", |b| {
        let latch = Latch::from_parts(10, 9).unwrap();
        b.iter(|| matches!(black_box(&latch).gate(), Decision::Apply(_)))
    });
    g.bench_function("gate_apply_record", |b| {
        let mut latch = Latch::new();
        b.iter(|| {
            latch.bump().unwrap();
            if let Decision::Apply(t) = latch.gate() {
                let _ = black_box(latch.record(t));
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("generation/shared_2_threads");
    g.bench_function("ate_shared_observe", |b| {
        let shared = SharedLatch::new(Latch::backfilled(u64::MAX / 2));
        b.iter_custom(|iters| {
            threaded(2, iters, || {
                let _ = black_box(shared.observe(Writer::ControlPlane, u64::MAX / 2));
            })
        })
    });
    g.bench_function("floor_mutex_lock_unlock", |b| {
        let m = parking_lot::Mutex::new(0u64);
        b.iter_custom(|iters| threaded(2, iters, || *black_box(&m).lock() += 1))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
