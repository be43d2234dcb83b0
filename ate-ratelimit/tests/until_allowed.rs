//! The async wait (feature `tokio`), on paused tokio time.
#![cfg(feature = "tokio")]

use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::{
    KeyedLimiter, Limiter, MonotonicClock, Quota,
    clock::{Clock, TokioClock},
};

#[tokio::test(start_paused = true)]
async fn until_allowed_sleeps_exactly_and_records_only_the_final_attempt() {
    let quota = Quota::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(10)).unwrap();
    let l = KeyedLimiter::with_clock(quota, TokioClock::new());
    assert!(l.check(&1).is_allowed());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(l.check(&1).is_allowed());
    let start = tokio::time::Instant::now();
    let d = l.until_allowed(&1).await;
    assert!(d.is_allowed());
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(7),
        "slept until t = 10 s"
    );
    // Waiting recorded nothing extra: at t = 13 s the one at 3 s has left.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(l.check(&1).is_allowed());
}

#[tokio::test(start_paused = true)]
async fn a_single_window_waits_the_same_way() {
    let quota = Quota::new(NonZeroU32::new(1).unwrap(), Duration::from_secs(10)).unwrap();
    let l = Limiter::with_clock(quota, TokioClock::new());
    assert!(l.check().is_allowed());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let start = tokio::time::Instant::now();
    assert!(l.until_allowed().await.is_allowed());
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(6),
        "slept until t = 10 s"
    );
    // The wait recorded only the final attempt (at 10 s): at 19 s it still
    // counts, at 20 s it has left.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!l.peek().is_allowed());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(l.check().is_allowed());
}

#[tokio::test(start_paused = true)]
async fn the_tokio_clock_moves_with_paused_time_from_the_headroom() {
    let clock = TokioClock::new();
    assert_eq!(
        clock.now().as_nanos(),
        MonotonicClock::HEADROOM.as_nanos() as u64
    );
    tokio::time::advance(Duration::from_millis(1500)).await;
    let moved = clock.now().as_nanos() - MonotonicClock::HEADROOM.as_nanos() as u64;
    assert_eq!(moved, 1_500_000_000);
    // Copies share the origin.
    let copy = clock;
    assert_eq!(copy.now(), clock.now());
}

#[tokio::test(start_paused = true)]
async fn a_wait_given_up_by_a_timeout_records_nothing() {
    let quota = Quota::new(NonZeroU32::new(1).unwrap(), Duration::from_secs(10)).unwrap();
    let l = KeyedLimiter::with_clock(quota, TokioClock::new());
    assert!(l.check(&"k").is_allowed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The caller waits from 2 s and gives up at 5 s: the future is
    // dropped mid-sleep.
    let gave_up = tokio::time::timeout(Duration::from_secs(3), l.until_allowed(&"k")).await;
    assert!(gave_up.is_err());
    // Its denied check at 2 s was not recorded (it would have replaced the
    // attempt at 0 s and held the key until 12 s): the attempt at 0 s
    // still leaves at 10 s.
    assert_eq!(l.peek(&"k").retry_after(), Some(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(l.check(&"k").is_allowed());
}
