//! The async wait (feature `tokio`), on paused tokio time.
#![cfg(feature = "tokio")]

use std::num::NonZeroU32;
use std::time::Duration;

use ate_ratelimit::{Clock, KeyedLimiter, Limiter, Quota, Timestamp};

/// A clock on tokio's (pausable) time.
#[derive(Debug)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
}

#[tokio::test(start_paused = true)]
async fn until_allowed_sleeps_exactly_and_records_only_the_final_attempt() {
    let quota = Quota::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(10));
    let l = KeyedLimiter::with_clock(quota, TokioClock(tokio::time::Instant::now()));
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
    let quota = Quota::new(NonZeroU32::new(1).unwrap(), Duration::from_secs(10));
    let l = Limiter::with_clock(quota, TokioClock(tokio::time::Instant::now()));
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
