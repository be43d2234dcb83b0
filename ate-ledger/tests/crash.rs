//! Crash safety with real processes: a child drives the redb store from
//! several threads (so its group commits hold several writes) and prints
//! every acknowledged transition; the parent SIGKILLs it at random
//! moments, reopens the store, and checks that every acknowledged
//! transition is there, nothing is half-applied, and recovery classifies
//! open attempts by the dispatch rule.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use ate_ledger::{
    Begin, Close, Config, Fingerprint, Key, Ledger, RedbStore, State, clock::ManualClock,
    store::Store,
};

const CHILD_ENV: &str = "ATE_LEDGER_CRASH_CHILD";
const EXIT_CHILD_ENV: &str = "ATE_LEDGER_EXIT_CHILD";

fn fp() -> Fingerprint {
    Fingerprint("crash".into())
}

/// Writer threads in the child: concurrent transitions share the redb
/// store's group commits, so a kill lands inside batches of several.
const WRITERS: u64 = 4;

/// The child: runs only when spawned by the parent test. `WRITERS` threads
/// drive one ledger, each its own keys, printing each acknowledged
/// transition as it returns.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // not a child run
    };
    let (path, first) = spec.split_once('|').unwrap();
    let first: u64 = first.parse().unwrap();
    let ledger = std::sync::Arc::new(Ledger::new(RedbStore::open(path).unwrap()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                for i in (first + w..).step_by(WRITERS as usize) {
                    drive(&ledger, i);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
}

/// Prints one acknowledgement line, whole.
fn ack(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Key `i`'s attempt, by `i % 4`: failed before the provider, succeeded,
/// unanswered, or left dispatched and open.
fn drive(ledger: &Ledger<RedbStore>, i: u64) {
    let key = Key::new("crash", format!("k{i}"));
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "child").unwrap() else {
        panic!("fresh key replayed");
    };
    ack(format_args!("begun {i}"));
    match i % 4 {
        0 => {
            ledger
                .close(&lease, Close::PreProvider("no creds".into()))
                .unwrap();
            ack(format_args!("closed {i} failed_pre_provider"));
        }
        1 => {
            ledger.mark_dispatched(&lease).unwrap();
            ack(format_args!("dispatched {i}"));
            ledger
                .close(&lease, Close::Succeeded(format!("out-{i}")))
                .unwrap();
            ack(format_args!("closed {i} succeeded"));
        }
        2 => {
            ledger.mark_dispatched(&lease).unwrap();
            ack(format_args!("dispatched {i}"));
            ledger
                .close(&lease, Close::ProviderUnavailable("timeout".into()))
                .unwrap();
            ack(format_args!("closed {i} provider_unavailable"));
        }
        _ => {
            ledger.mark_dispatched(&lease).unwrap();
            // Left open on purpose: a crash here is the interesting case.
            ack(format_args!("dispatched {i}"));
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Acked {
    begun: bool,
    dispatched: bool,
    closed: Option<String>,
}

#[test]
fn acknowledged_transitions_survive_sigkill_and_recovery_follows_the_dispatch_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked: HashMap<u64, Acked> = HashMap::new();
    let mut next = 0u64;
    // A deterministic pseudo-random kill schedule.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for _kill in 0..24 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let lines_before_kill = 5 + (seed % 120) as usize;
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{}|{next}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let mut seen = 0;
        // One acknowledgement line into `acked`; false at EOF.
        let mut read_ack = |reader: &mut BufReader<_>, seen: &mut usize| {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 {
                return false;
            }
            let mut parts = line.split_whitespace();
            let (Some(what), Some(i)) = (
                parts.next(),
                parts.next().and_then(|i| i.parse::<u64>().ok()),
            ) else {
                return true; // libtest chatter
            };
            let entry = acked.entry(i).or_default();
            match what {
                "begun" => entry.begun = true,
                "dispatched" => entry.dispatched = true,
                "closed" => entry.closed = parts.next().map(str::to_owned),
                _ => return true,
            }
            next = next.max(i + 1);
            *seen += 1;
            true
        };
        while seen < lines_before_kill && read_ack(&mut reader, &mut seen) {}
        // Let it run a moment past the last line we read, then SIGKILL.
        std::thread::sleep(Duration::from_micros(seed % 3000));
        child.kill().unwrap();
        // Read to EOF: the acknowledgements closest to the kill, written
        // before it and still in the pipe, are the ones most worth checking.
        while read_ack(&mut reader, &mut seen) {}
        let _ = child.wait().unwrap();
        // Start the next child past anything this one could have begun
        // without acknowledging it.
        next += 200;
    }

    // Reopen: every acknowledged transition is there, nothing half-applied.
    let clock = ManualClock::default();
    let store = RedbStore::open(&path).unwrap();
    let ledger =
        Ledger::with_clock(store, Config::default(), clock.clone()).expect("a valid config");
    assert!(
        acked.len() > 40,
        "the children made progress: {}",
        acked.len()
    );
    for (i, a) in &acked {
        let key = Key::new("crash", format!("k{i}"));
        let r = ledger
            .get(&key)
            .unwrap()
            .unwrap_or_else(|| panic!("acked begin of k{i} lost"));
        r.check_invariants().unwrap();
        if a.dispatched {
            assert!(r.ever_dispatched(), "acked dispatch of k{i} lost");
        }
        if let Some(state) = &a.closed {
            assert_eq!(r.state.name(), state, "acked close of k{i} lost");
        }
    }
    // Recovery (leases long expired by the manual clock's date).
    clock.advance(Duration::from_secs(3600 * 24 * 365 * 100));
    let open_before: Vec<_> = acked
        .keys()
        .map(|i| Key::new("crash", format!("k{i}")))
        .filter_map(|k| ledger.get(&k).unwrap())
        .filter(|r| r.state == State::InFlight)
        .collect();
    let recovered = ledger.recover().unwrap();
    assert!(recovered.len() >= open_before.len());
    for before in open_before {
        let after = ledger.get(&before.key).unwrap().unwrap();
        after.check_invariants().unwrap();
        if before.ever_dispatched() {
            assert!(matches!(after.state, State::ProviderUnavailable { .. }));
            assert!(!after.is_revivable());
        } else {
            assert!(matches!(after.state, State::FailedPreProvider { .. }));
            assert!(after.is_revivable());
        }
    }
}

/// Two keys: `a` dispatched and open, `b` succeeded; the store is still
/// open.
fn two_records(path: &std::path::Path) -> Ledger<RedbStore> {
    let ledger = Ledger::new(RedbStore::open(path).unwrap());
    for (key, close) in [("a", false), ("b", true)] {
        let Begin::Started(l) = ledger.begin(&Key::new("t", key), &fp(), "w").unwrap() else {
            panic!("fresh key replayed")
        };
        ledger.mark_dispatched(&l).unwrap();
        if close {
            ledger
                .close(&l, Close::Succeeded("out-123".into()))
                .unwrap();
        }
    }
    ledger
}

/// The child: writes two records and exits without closing the store (no
/// destructor runs), leaving the file as a crash right after an
/// acknowledged commit would.
#[test]
fn exit_child() {
    let Ok(path) = std::env::var(EXIT_CHILD_ENV) else {
        return; // not a child run
    };
    let _open = two_records(path.as_ref());
    std::process::exit(0);
}

/// Every digit of the file changed in turn (record values, lengths, page
/// numbers, checksums): each open reads exactly what was written or is
/// `Corrupt`, never another state and never a panic.
fn every_digit_change_is_corrupt_or_unchanged(path: &std::path::Path) {
    let (a, b) = (Key::new("t", "a"), Key::new("t", "b"));
    let read = |path: &std::path::Path| {
        let store = RedbStore::open(path)?;
        let open = store.open()?.len();
        Ok::<_, ate_ledger::Error>((store.get(&a)?, store.get(&b)?, open))
    };
    let bytes = std::fs::read(path).unwrap();
    let written = read(path).unwrap();
    assert!(written.0.is_some() && written.1.is_some() && written.2 == 1);
    // The reads above may have rewritten the file (a recovery): start from
    // the bytes as left.
    std::fs::write(path, &bytes).unwrap();
    let digits: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i].is_ascii_digit())
        .collect();
    assert!(digits.len() > 50, "the records' JSON holds digits");
    let mut corrupt = 0;
    for i in digits {
        let mut changed = bytes.clone();
        changed[i] = if changed[i] == b'9' {
            b'0'
        } else {
            changed[i] + 1
        };
        std::fs::write(path, &changed).unwrap();
        let got = std::panic::catch_unwind(|| read(path))
            .unwrap_or_else(|_| panic!("offset {i}: the open panicked"));
        match got {
            Ok(same) => assert_eq!(same, written, "offset {i}: read as another state"),
            Err(ate_ledger::Error::Corrupt { .. }) => corrupt += 1,
            Err(other) => panic!("offset {i}: {other:?}, not Corrupt"),
        }
    }
    assert!(corrupt > 50, "{corrupt} changes found");
}

#[test]
fn a_digit_changed_anywhere_in_the_file_is_corruption_never_another_state() {
    // Bit rot or an edit in a file closed cleanly...
    let dir = tempfile::tempdir().unwrap();
    let closed = dir.path().join("closed.redb");
    drop(two_records(&closed));
    every_digit_change_is_corrupt_or_unchanged(&closed);
    // ...and in one left by a crash right after its last acknowledged
    // commit, where a commit whose pages fail their checksums could pass
    // for one torn by the crash and be rolled back to the one before.
    let crashed = dir.path().join("crashed.redb");
    let exe = std::env::current_exe().unwrap();
    let status = Command::new(&exe)
        .args(["--exact", "exit_child", "--nocapture", "--test-threads=1"])
        .env(EXIT_CHILD_ENV, &crashed)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    every_digit_change_is_corrupt_or_unchanged(&crashed);
}
