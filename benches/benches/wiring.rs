//! The per-request cost of the example services' wiring (admission guard +
//! keyed rate-limit check), measured directly: the HTTP run cannot resolve
//! a few percent on a 2-core machine, this can. Compare it with the time a
//! bare request takes (1 / bare req/s per server core) in BENCHMARKS.md.

use std::hint::black_box;

use ate_benches::Wiring;
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let w = Wiring::new();
    let mut g = c.benchmark_group("http/wiring_per_request");
    g.bench_function("admit_and_keyed_check", |b| {
        b.iter(|| black_box(w.check(black_box("bench"))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
