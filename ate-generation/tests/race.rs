//! Racing writers on the shared form never move observed backwards.

use std::sync::atomic::{AtomicBool, Ordering};

use ate_generation::{Latch, SharedLatch, Writer};

#[test]
fn racing_writers_never_move_observed_backwards() {
    const GENERATION: u64 = 1000;
    for round in 0..20u64 {
        let shared = SharedLatch::new(Latch::from_parts(GENERATION, 0).unwrap());
        let stop = AtomicBool::new(false);
        let max_accepted = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    seen.push(shared.get().observed_generation());
                }
                seen.push(shared.get().observed_generation());
                seen
            });
            let writers: Vec<_> = (0..4u64)
                .map(|w| {
                    let shared = shared.clone();
                    s.spawn(move || {
                        // A cheap deterministic pseudo-random walk per writer.
                        let mut x = round * 7919 + w * 104_729 + 1;
                        let mut accepted = 0;
                        for _ in 0..2000 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let target = x % (GENERATION + 50); // some overshoot
                            if shared.observe(Writer::ControlPlane, target).is_ok() {
                                accepted = accepted.max(target);
                            }
                        }
                        accepted
                    })
                })
                .collect();
            let max = writers
                .into_iter()
                .map(|h| h.join().unwrap())
                .max()
                .unwrap();
            stop.store(true, Ordering::Relaxed);
            let seen = reader.join().unwrap();
            assert!(
                seen.windows(2).all(|w| w[0] <= w[1]),
                "observed went backwards"
            );
            max
        });
        let end = shared.get();
        assert_eq!(end.observed_generation(), max_accepted);
        assert!(end.observed_generation() <= end.generation());
    }
}

#[test]
fn shared_and_value_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SharedLatch>();
    check::<Latch>();
    check::<ate_generation::ApplyTicket>();
    check::<ate_generation::Decision>();
    check::<ate_generation::Error>();
}
