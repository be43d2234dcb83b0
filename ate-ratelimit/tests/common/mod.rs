//! The stepping-clock harness the concurrency tests share.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use ate_ratelimit::clock::{ManualClock, Timestamp};

/// Runs `threads` threads through `steps` steps of `clock`. In each step
/// every thread calls `attempt` with the step's time and its own log; then,
/// between two barriers, thread 0 advances the clock by `pause(step)`. So
/// no caller holds a time from before a step: a stale time would be
/// recorded as the newest one, not as itself, and the caller's log would
/// then misplace it. Returns every thread's log.
///
/// A panic in `attempt` fails the test instead of hanging it: the thread
/// keeps meeting the barriers (attempting nothing more) so the others can
/// finish, and the panic is raised again at the end.
pub(crate) fn stepped<T: Send>(
    threads: usize,
    steps: u64,
    clock: &ManualClock,
    pause: impl Fn(u64) -> Duration + Sync,
    attempt: impl Fn(Timestamp, &mut Vec<T>) + Sync,
) -> Vec<T> {
    let logs = Mutex::new(Vec::new());
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (logs, barrier, pause, attempt) = (&logs, &barrier, &pause, &attempt);
            s.spawn(move || {
                let mut mine = Vec::new();
                let mut failed = None;
                for step in 0..steps {
                    if failed.is_none() {
                        let now = clock.now_for_model();
                        failed = catch_unwind(AssertUnwindSafe(|| attempt(now, &mut mine))).err();
                    }
                    barrier.wait();
                    if t == 0 {
                        clock.advance(pause(step));
                    }
                    barrier.wait();
                }
                if let Some(panic) = failed {
                    resume_unwind(panic);
                }
                logs.lock().unwrap().extend(mine);
            });
        }
    });
    logs.into_inner().unwrap()
}
