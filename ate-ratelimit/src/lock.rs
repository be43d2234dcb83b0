//! The lock around the single window of a [`Limiter`](crate::Limiter): one
//! check at a time reads and writes the window, so two checks never both
//! take its last slot.
//!
//! A check holds it for a few nanoseconds, so the lock's own cost matters:
//! `parking_lot`'s mutex takes two atomic read-modify-writes per check (lock
//! and unlock); this spin lock takes one (its unlock is a plain release
//! store). A waiter spins with exponential backoff and then yields its time
//! slice, so a holder that was preempted mid-check gets the CPU back instead
//! of being starved by spinners. (Keyed limiters keep `parking_lot`: a
//! shard's critical section includes a table lookup that can miss the
//! cache, long enough that parking beats spinning.)

use spinning_top::RawSpinlock;
use spinning_top::lock_api;
use spinning_top::relax::Relax;

/// Spin `2^step` pause instructions per round for a few rounds, then yield.
#[derive(Debug, Default)]
pub(crate) struct Snooze {
    step: u32,
}

impl Snooze {
    const SPIN_ROUNDS: u32 = 6;
}

impl Relax for Snooze {
    #[inline]
    fn relax(&mut self) {
        if self.step < Self::SPIN_ROUNDS {
            for _ in 0..1u32 << self.step {
                std::hint::spin_loop();
            }
            self.step += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

pub(crate) type Lock<T> = lock_api::Mutex<RawSpinlock<Snooze>, T>;
