//! The async wait (feature `tokio`), on paused tokio time.
#![cfg(feature = "tokio")]

use std::time::Duration;

use ate_readiness::{Gate, WaitOutcome};

#[tokio::test(start_paused = true)]
async fn async_wait_completes_when_the_last_guard_drops() {
    let gate = Gate::new();
    let guard = gate.admit().unwrap();
    let _ = gate.begin_drain();
    let g = gate.clone();
    let waiter = tokio::spawn(async move { g.wait_idle_async(Duration::from_secs(3600)).await });
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    drop(guard);
    assert_eq!(waiter.await.unwrap(), WaitOutcome::Completed);
    // Woken by the drop, not by the 1 h timeout.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn async_wait_times_out_with_the_count_still_in_flight() {
    let gate = Gate::new();
    let _a = gate.admit().unwrap();
    let _ = gate.begin_drain();
    let started = tokio::time::Instant::now();
    let outcome = gate.wait_idle_async(Duration::from_secs(20)).await;
    assert_eq!(outcome, WaitOutcome::TimedOut { in_flight: 1 });
    assert_eq!(started.elapsed(), Duration::from_secs(20));
    assert_eq!(gate.snapshot().last_wait, Some(outcome));
}

/// The last guard drops and the deadline passes before the waiter looks
/// again: whichever of the two it sees first, nothing is in flight, so the
/// wait completed (a timeout says how many were still in flight, and none
/// were). Repeated: `select!` picks between the two ready wake-ups at
/// random.
#[tokio::test(start_paused = true)]
async fn a_wait_whose_deadline_passes_as_the_last_guard_drops_completed() {
    for _ in 0..64 {
        let gate = Gate::new();
        let guard = gate.admit().unwrap();
        let wait = gate.wait_idle_async(Duration::from_secs(1));
        tokio::pin!(wait);
        // One poll: the waiter registers and parks.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(wait.as_mut().poll(cx))).await;
        assert!(first.is_pending());
        drop(guard);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(wait.await, WaitOutcome::Completed);
        assert_eq!(gate.snapshot().last_wait, Some(WaitOutcome::Completed));
    }
}

#[tokio::test(start_paused = true)]
async fn async_wait_with_nothing_in_flight_completes_at_once() {
    let gate = Gate::new();
    let _ = gate.begin_drain();
    assert!(
        gate.wait_idle_async(Duration::from_secs(1))
            .await
            .is_completed()
    );
}

#[tokio::test(start_paused = true)]
async fn drain_begun_resolves_when_the_drain_begins_with_its_time() {
    let gate = Gate::new();
    let g = gate.clone();
    let waiter = tokio::spawn(async move { g.drain_begun().await });
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!waiter.is_finished(), "no drain yet");
    let at = gate.begin_drain().since();
    let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    assert_eq!(woken.expect("woken by the drain").unwrap(), at);
    // Already draining: at once, with the first call's time.
    assert_eq!(gate.drain_begun().await, at);
    let _ = gate.begin_drain();
    assert_eq!(gate.drain_begun().await, at);
}

#[tokio::test]
async fn drain_begun_in_a_select_loop_leaves_nothing_behind() {
    // Many short-lived waits (a select! that loses each time) and then the
    // drain: every live wait wakes, none of the dropped ones matters.
    let gate = Gate::new();
    for _ in 0..10_000 {
        tokio::select! {
            biased;
            _ = std::future::ready(()) => {}
            _ = gate.drain_begun() => unreachable!("not draining"),
        }
    }
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let g = gate.clone();
            tokio::spawn(async move { g.drain_begun().await })
        })
        .collect();
    tokio::task::yield_now().await;
    let at = gate.begin_drain().since();
    for w in waiters {
        let woken = tokio::time::timeout(Duration::from_secs(5), w).await;
        assert_eq!(woken.expect("woken by the drain").unwrap(), at);
    }
}
