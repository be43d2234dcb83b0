//! The single window under threads: exact counts, exact `remaining` and
//! `retry_after`, and never more than N in any window.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

mod common;

use ate_ratelimit::testing::max_in_any_window;
use ate_ratelimit::{Decision, Limiter, Policy, Quota, clock::ManualClock};

fn quota(n: u32, window: Duration) -> Quota {
    Quota::new(NonZeroU32::new(n).unwrap(), window).unwrap()
}

/// Threads racing at one frozen instant, round after round: exactly N are
/// allowed per round, their `remaining` values are exactly N-1, ..., 0 (no
/// two checks saw the same count), and every denial says exactly W.
fn rounds_are_exact(policy: Policy, n: u32, threads: usize, per_thread: usize) {
    const W: Duration = Duration::from_millis(100);
    let clock = ManualClock::default();
    let l = Limiter::with_policy(quota(n, W), policy, clock.clone());
    for round in 0..20 {
        let decisions = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mine: Vec<Decision> = (0..per_thread).map(|_| l.check()).collect();
                    decisions.lock().unwrap().extend(mine);
                });
            }
        });
        let decisions = decisions.into_inner().unwrap();
        let mut remaining: Vec<u32> = decisions
            .iter()
            .filter(|d| d.is_allowed())
            .map(Decision::remaining)
            .collect();
        remaining.sort_unstable();
        let want: Vec<u32> = (0..n).collect();
        assert_eq!(remaining, want, "round {round}, {policy:?}");
        for d in decisions.iter().filter(|d| !d.is_allowed()) {
            assert_eq!(d.retry_after(), Some(W), "round {round}, {policy:?}");
        }
        // Everything recorded this round leaves the window exactly now.
        clock.advance(W);
    }
}

#[test]
fn racing_threads_get_exactly_n_with_exact_remaining_count_denied() {
    rounds_are_exact(Policy::CountDenied, 37, 4, 500);
    rounds_are_exact(Policy::CountDenied, 1, 4, 200);
}

#[test]
fn racing_threads_get_exactly_n_with_exact_remaining_allowed_only() {
    rounds_are_exact(Policy::AllowedOnly, 37, 4, 500);
    rounds_are_exact(Policy::AllowedOnly, 1, 4, 200);
}

/// Threads race inside each step of a stepping clock (see
/// [`common::stepped`]). Any N+1 allowed attempts span at least W.
#[test]
fn racing_threads_never_get_more_than_n_in_any_window() {
    const N: u32 = 50;
    const THREADS: usize = 4;
    for policy in [Policy::CountDenied, Policy::AllowedOnly] {
        let clock = ManualClock::default();
        let l = Limiter::with_policy(quota(N, Duration::from_secs(1)), policy, clock.clone());
        // Now and then a pause long enough to drain the window, so even
        // counted denials let bursts in.
        let pause =
            |step: u64| Duration::from_millis(if step.is_multiple_of(200) { 1_500 } else { 3 });
        let times = common::stepped(THREADS, 2_000, &clock, pause, |now, mine| {
            for _ in 0..10 {
                if l.check_at(now).is_allowed() {
                    mine.push(now);
                }
            }
        });
        assert!(times.len() > N as usize, "the test must reach the limit");
        let most = max_in_any_window(&times, Duration::from_secs(1));
        assert_eq!(most, N as usize, "{most} allowed in 1 s under {policy:?}");
    }
}

/// Peeks racing with checks never see a torn state: every peek is a
/// decision some sequential history could give (remaining within 0..=N; a
/// denial's wait at most the window, plus however far the recorded
/// history is ahead of the peek's own time, which is taken as the newest
/// recorded time).
#[test]
fn peeks_racing_with_checks_stay_consistent() {
    const N: u32 = 8;
    let clock = ManualClock::default();
    let l = Limiter::with_clock(quota(N, Duration::from_secs(1)), clock.clone());
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..50_000u32 {
                let _ = l.check();
                if i % 100 == 0 {
                    clock.advance(Duration::from_millis(50));
                }
            }
        });
        s.spawn(|| {
            for _ in 0..50_000 {
                let before = clock.now_for_model();
                let peek = l.peek_at(before);
                let ahead = clock.now_for_model().duration_since(before);
                match peek {
                    Decision::Allowed { remaining } => assert!(remaining <= N),
                    Decision::Denied { retry_after } => {
                        let most = Duration::from_secs(1) + ahead;
                        assert!(retry_after <= most, "{retry_after:?} > {most:?}");
                    }
                    d => panic!("{d:?}"),
                }
            }
        });
    });
}

/// A limit of 10,000 with bursts well above it: the ring grows to the
/// limit, wraps many times and shrinks in the pauses, checked against a
/// plain deque.
#[test]
fn a_large_limit_matches_a_deque() {
    use std::collections::VecDeque;
    const N: u32 = 10_000;
    const W: u64 = 1_000_000_000;
    let clock = ManualClock::default();
    let l = Limiter::with_clock(quota(N, Duration::from_nanos(W)), clock.clone());
    let mut log: VecDeque<u64> = VecDeque::new();
    let mut now = 0u64;
    for i in 0..60_000u64 {
        // Bursts well above the limit, then pauses.
        now += if i % 20_000 < 15_000 { 37_000 } else { 400_000 };
        clock.set(ate_ratelimit::clock::Timestamp::from_nanos(now));
        while log.front().is_some_and(|&a| a + W <= now) {
            log.pop_front();
        }
        let allowed = (log.len() as u32) < N;
        // Every attempt is recorded; only the last N can matter.
        log.push_back(now);
        if log.len() > N as usize {
            log.pop_front();
        }
        let got = l.check();
        assert_eq!(got.is_allowed(), allowed, "attempt {i} at {now}");
        if !allowed {
            let wait = log.front().unwrap() + W - now;
            assert_eq!(got.retry_after(), Some(Duration::from_nanos(wait)));
        }
    }
}
