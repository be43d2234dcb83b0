//! Crash safety with real processes: a child drives the redb store and
//! prints every acknowledged transition; the parent SIGKILLs it at random
//! moments, reopens the store, and checks that every acknowledged
//! transition is there, nothing is half-applied, and recovery classifies
//! open attempts by the dispatch rule.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use ate_ledger::{Begin, Close, Config, Fingerprint, Key, Ledger, ManualClock, RedbStore, State};

const CHILD_ENV: &str = "ATE_LEDGER_CRASH_CHILD";

fn fp() -> Fingerprint {
    Fingerprint("crash".into())
}

/// The child: runs only when spawned by the parent test.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // not a child run
    };
    let (path, first) = spec.split_once('|').unwrap();
    let first: u64 = first.parse().unwrap();
    let ledger = Ledger::new(RedbStore::open(path).unwrap());
    let mut out = std::io::stdout().lock();
    for i in first.. {
        let key = Key::new("crash", format!("k{i}"));
        let Begin::Started(lease) = ledger.begin(&key, &fp(), "child").unwrap() else {
            panic!("fresh key replayed");
        };
        writeln!(out, "begun {i}").unwrap();
        out.flush().unwrap();
        match i % 4 {
            0 => {
                ledger
                    .close(&lease, Close::PreProvider("no creds".into()))
                    .unwrap();
                writeln!(out, "closed {i} failed_pre_provider").unwrap();
            }
            1 => {
                ledger.mark_dispatched(&lease).unwrap();
                writeln!(out, "dispatched {i}").unwrap();
                out.flush().unwrap();
                ledger
                    .close(&lease, Close::Succeeded(format!("out-{i}")))
                    .unwrap();
                writeln!(out, "closed {i} succeeded").unwrap();
            }
            2 => {
                ledger.mark_dispatched(&lease).unwrap();
                writeln!(out, "dispatched {i}").unwrap();
                out.flush().unwrap();
                ledger
                    .close(&lease, Close::ProviderUnavailable("timeout".into()))
                    .unwrap();
                writeln!(out, "closed {i} provider_unavailable").unwrap();
            }
            _ => {
                ledger.mark_dispatched(&lease).unwrap();
                writeln!(out, "dispatched {i}").unwrap();
                // Left open on purpose: a crash here is the interesting case.
            }
        }
        out.flush().unwrap();
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
        while seen < lines_before_kill {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            let mut parts = line.split_whitespace();
            let (Some(what), Some(i)) = (
                parts.next(),
                parts.next().and_then(|i| i.parse::<u64>().ok()),
            ) else {
                continue; // libtest chatter
            };
            let entry = acked.entry(i).or_default();
            match what {
                "begun" => entry.begun = true,
                "dispatched" => entry.dispatched = true,
                "closed" => entry.closed = parts.next().map(str::to_owned),
                _ => continue,
            }
            next = next.max(i + 1);
            seen += 1;
        }
        // Let it run a moment past the last line we read, then SIGKILL.
        std::thread::sleep(Duration::from_micros(seed % 3000));
        child.kill().unwrap();
        // Keep reading whatever it acknowledged before dying.
        drop(reader);
        let _ = child.wait().unwrap();
        // The child may have acked lines we did not read: they are simply
        // not checked. Start the next child past anything it could have used.
        next += 200;
    }

    // Reopen: every acknowledged transition is there, nothing half-applied.
    let clock = ManualClock::default();
    let store = RedbStore::open(&path).unwrap();
    let ledger = Ledger::with_clock(store, Config::default(), clock.clone());
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
