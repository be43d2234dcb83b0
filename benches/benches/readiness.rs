//! Placeholder bench.
use criterion::{Criterion, criterion_group, criterion_main};
fn bench(c: &mut Criterion) {
    c.bench_function("noop", |b| b.iter(|| 1));
}
criterion_group!(benches, bench);
criterion_main!(benches);
