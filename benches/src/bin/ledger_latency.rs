//! Latency distribution of one durable ledger transition (a redb commit
//! with fsync) beside a bare fsync of a small file on the same disk, the
//! begin→dispatch→close throughput of both stores, and transitions per
//! second on redb with 1, 8 and 32 concurrent writers (group commit)
//! beside the bare fsync floor (fsyncs per second, one after another).
//! Prints JSON lines.
//!
//! `cargo run --release -p ate-benches --bin ledger_latency -- [N] [DIR]`

use std::io::Write;
use std::time::{Duration, Instant};

use ate_ledger::{Begin, Close, Fingerprint, Key, Ledger, MemoryStore, RedbStore, store::Store};

fn pct(mut v: Vec<Duration>, p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1e6
}

fn report(name: &str, samples: Vec<Duration>) {
    println!(
        "{{\"what\":\"{name}\",\"n\":{},\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
        samples.len(),
        pct(samples.clone(), 0.50),
        pct(samples, 0.99)
    );
}

fn cycles<S: Store>(ledger: &Ledger<S>, prefix: &str, n: usize) -> f64 {
    let fp = Fingerprint("fp".into());
    let start = Instant::now();
    for i in 0..n {
        let key = Key::new("bench", format!("{prefix}{i}"));
        if let Ok(Begin::Started(lease)) = ledger.begin(&key, &fp, "bench") {
            ledger.mark_dispatched(&lease).expect("dispatch");
            ledger
                .close(&lease, Close::Succeeded("ok".into()))
                .expect("close");
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Bare fsyncs per second, one after another, for `time`.
fn fsyncs_per_sec(file: &mut std::fs::File, time: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < time {
        file.write_all(b"0123456789abcdef").expect("write");
        file.sync_all().expect("fsync");
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Transitions per second (begin, dispatch, close: three each cycle) of
/// `writers` threads on one ledger, for `time`.
fn concurrent<S: Store + 'static>(
    ledger: &std::sync::Arc<Ledger<S>>,
    writers: usize,
    time: Duration,
) -> f64 {
    let start = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                let fp = Fingerprint("fp".into());
                let mut transitions = 0u64;
                let mut i = 0u64;
                while start.elapsed() < time {
                    let key = Key::new("bench", format!("w{writers}-{w}-{i}"));
                    i += 1;
                    if let Ok(Begin::Started(lease)) = ledger.begin(&key, &fp, "bench") {
                        ledger.mark_dispatched(&lease).expect("dispatch");
                        ledger
                            .close(&lease, Close::Succeeded("ok".into()))
                            .expect("close");
                        transitions += 3;
                    }
                }
                transitions
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().expect("writer")).sum();
    total as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let dir = args.next().unwrap_or_else(|| ".".into());
    let tmp = tempfile::tempdir_in(&dir).expect("temp dir");

    let mut file = std::fs::File::create(tmp.path().join("fsync.bin")).expect("file");
    let fsyncs: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            file.write_all(b"0123456789abcdef").expect("write");
            file.sync_all().expect("fsync");
            t.elapsed()
        })
        .collect();
    report("bare_fsync", fsyncs);

    let durable = Ledger::new(RedbStore::open(tmp.path().join("l.redb")).expect("redb"));
    let fp = Fingerprint("fp".into());
    let begins: Vec<Duration> = (0..n)
        .map(|i| {
            let t = Instant::now();
            let _ = durable
                .begin(&Key::new("bench", format!("b{i}")), &fp, "bench")
                .expect("begin");
            t.elapsed()
        })
        .collect();
    report("redb_durable_transition", begins);

    let redb_rate = cycles(&durable, "c", n / 3);
    let floor = fsyncs_per_sec(&mut file, Duration::from_secs(2));
    let durable = std::sync::Arc::new(durable);
    for writers in [1, 8, 32] {
        let rate = concurrent(&durable, writers, Duration::from_secs(2));
        println!(
            "{{\"what\":\"redb_transitions_per_sec\",\"writers\":{writers},\"rate\":{rate:.0},\"bare_fsyncs_per_sec\":{floor:.0},\"ratio\":{:.2}}}",
            rate / floor
        );
    }
    let memory = Ledger::new(MemoryStore::new());
    let mem_rate = cycles(&memory, "m", 100_000);
    println!("{{\"what\":\"cycles_per_sec\",\"redb\":{redb_rate:.0},\"memory\":{mem_rate:.0}}}");
}
