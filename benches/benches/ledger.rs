//! ate-ledger: begin → dispatch → close on the in-memory and the durable
//! redb store, beside a bare fsync of a small file on the same disk.

use std::hint::black_box;
use std::io::Write;

use ate_ledger::{Begin, Close, Fingerprint, Key, Ledger, MemoryStore, RedbStore, store::Store};
use criterion::{Criterion, criterion_group, criterion_main};

fn cycle<S: Store>(ledger: &Ledger<S>, n: u64) {
    let key = Key::new("bench", format!("k{n}"));
    let fp = Fingerprint("fp".into());
    if let Ok(Begin::Started(lease)) = ledger.begin(&key, &fp, "bench") {
        ledger.mark_dispatched(&lease).unwrap();
        ledger.close(&lease, Close::Succeeded("ok".into())).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(std::env::var_os("ATE_BENCH_DIR").unwrap_or_else(|| ".".into()))
        .unwrap();
    let mut g = c.benchmark_group("ledger/begin_dispatch_close");
    let memory = Ledger::new(MemoryStore::new());
    let mut n = 0;
    g.bench_function("memory", |b| {
        b.iter(|| {
            n += 1;
            cycle(&memory, n)
        })
    });
    let durable = Ledger::new(RedbStore::open(dir.path().join("bench.redb")).unwrap());
    g.sample_size(20);
    g.bench_function("redb_durable", |b| {
        b.iter(|| {
            n += 1;
            cycle(&durable, n)
        })
    });
    g.finish();

    // One durable transition is one redb commit; compare with one fsync.
    let mut g = c.benchmark_group("ledger/durable_transition");
    g.sample_size(20);
    let mut file = std::fs::File::create(dir.path().join("fsync.bin")).unwrap();
    g.bench_function("floor_bare_fsync", |b| {
        b.iter(|| {
            file.write_all(black_box(b"0123456789abcdef")).unwrap();
            file.sync_all().unwrap();
        })
    });
    let key_fp = Fingerprint("fp".into());
    g.bench_function("redb_begin", |b| {
        b.iter(|| {
            n += 1;
            let _ = durable
                .begin(&Key::new("bench", format!("b{n}")), &key_fp, "bench")
                .unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
