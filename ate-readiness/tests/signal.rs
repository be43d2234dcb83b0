//! `drain_on_signal` and `next_signal` with real signals sent to this test
//! process. One test in its own binary: a signal is process-wide.
#![cfg(all(feature = "tokio", unix))]

use std::process::Command;
use std::time::Duration;

use ate_readiness::{Gate, drain_on_signal, next_signal};

fn send(signal: &str) {
    let status = Command::new("sh")
        .args(["-c", &format!("kill -{signal} {}", std::process::id())])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Polls `fut` until its handlers are installed (the first poll), then
/// leaves it pending.
async fn listening<F: Future + Unpin>(fut: &mut F) {
    assert!(
        tokio::time::timeout(Duration::from_millis(50), fut)
            .await
            .is_err(),
        "resolved before any signal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_signal_drains_and_a_second_one_is_seen_by_next_signal() {
    let gate = Gate::new();
    let mut drain = Box::pin(drain_on_signal(gate.clone()));
    listening(&mut drain).await;
    assert!(gate.is_serving());
    send("TERM");
    let begun = tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("SIGTERM ends drain_on_signal")
        .unwrap();
    assert!(begun.started());
    assert!(!gate.is_serving());

    // The handler stays installed: without a listener this second signal
    // would do nothing. next_signal sees it, SIGTERM or Ctrl-C (SIGINT).
    for signal in ["TERM", "INT"] {
        let mut second = Box::pin(next_signal());
        listening(&mut second).await;
        send(signal);
        tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .unwrap_or_else(|_| panic!("SIG{signal} ends next_signal"))
            .unwrap();
    }

    // Each listens from the call on, not from its first poll: a signal
    // that comes before a spawned task first runs is still its own. (A
    // service calls them before it serves; listening from the first poll,
    // a SIGTERM in between went unheard.)
    for signal in ["TERM", "INT"] {
        let gate = Gate::new();
        let drain = drain_on_signal(gate.clone());
        let next = next_signal();
        send(signal);
        let (drained, next) =
            tokio::time::timeout(Duration::from_secs(10), async { (drain.await, next.await) })
                .await
                .unwrap_or_else(|_| panic!("SIG{signal} sent before the first poll was not heard"));
        assert!(drained.unwrap().started() && !gate.is_serving());
        next.unwrap();
    }
}
