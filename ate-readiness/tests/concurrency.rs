//! Admission racing drain and wait: nothing admitted before the drain can be
//! missed by a wait that starts after it, and counts never go negative.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use ate_readiness::{Gate, WaitOutcome};

/// Sets its flag when dropped, on a panic too: workers that would loop
/// until the gate says it drains stop then, so a gate that never says so
/// fails the test's assertion instead of hanging it.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn wait_after_drain_never_misses_work_admitted_before_it() {
    for _ in 0..300 {
        let gate = Gate::new();
        // Guards admitted before the drain and not yet dropped. Incremented
        // after admission, decremented just before the drop.
        let pre_drain_outstanding = AtomicI64::new(0);
        let total_admitted = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let _stop = StopOnDrop(&stop);
            for _ in 0..3 {
                s.spawn(|| {
                    loop {
                        let guard = gate.admit().unwrap();
                        total_admitted.fetch_add(1, Ordering::Relaxed);
                        if guard.admitted_while_draining() || stop.load(Ordering::SeqCst) {
                            // A server stops taking new work once draining.
                            break;
                        }
                        pre_drain_outstanding.fetch_add(1, Ordering::SeqCst);
                        assert!(gate.in_flight() >= 1, "own guard not counted");
                        std::thread::yield_now();
                        pre_drain_outstanding.fetch_sub(1, Ordering::SeqCst);
                        drop(guard);
                    }
                });
            }
            std::thread::yield_now();
            let _ = gate.begin_drain();
            let outcome = gate.wait_idle(Duration::from_secs(30));
            assert_eq!(outcome, WaitOutcome::Completed);
            // The count reached zero after the drain, so every guard admitted
            // before the drain had already been dropped.
            assert_eq!(pre_drain_outstanding.load(Ordering::SeqCst), 0);
        });
        assert_eq!(gate.in_flight(), 0, "count went negative or leaked");
        assert!(total_admitted.load(Ordering::Relaxed) >= 3);
    }
}

#[test]
fn wait_started_after_drain_sees_pre_drain_guards() {
    for _ in 0..500 {
        let gate = Gate::new();
        let guards: Vec<_> = (0..4).map(|_| gate.admit().unwrap()).collect();
        let _ = gate.begin_drain();
        assert_eq!(
            gate.wait_idle(Duration::ZERO),
            WaitOutcome::TimedOut { in_flight: 4 }
        );
        std::thread::scope(|s| {
            let waiter = s.spawn(|| gate.wait_idle(Duration::from_secs(30)));
            for g in guards {
                s.spawn(move || drop(g));
            }
            assert_eq!(waiter.join().unwrap(), WaitOutcome::Completed);
        });
        assert_eq!(gate.in_flight(), 0);
    }
}
