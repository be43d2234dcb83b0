//! SIGTERM (and Ctrl-C) as the start of a drain (feature `tokio`).

use super::Gate;
use super::answers::BeginDrain;

/// Waits for SIGTERM (Unix) or Ctrl-C, then begins the drain.
///
/// Call it at startup, before the server accepts work, and spawn the
/// future: it resolves with the drain answer. On Unix, called inside a
/// Tokio runtime, it listens from the call on (see [`next_signal`]), so a
/// SIGTERM that comes before the spawned task first runs drains the gate
/// instead of killing the process.
/// If no signal handler can be installed, it drains right away and says so
/// through the `Err` (failing open would leave a pod that never drains).
///
/// Tokio keeps its signal handlers installed for the rest of the process, so
/// once this has been called a second SIGTERM or Ctrl-C no longer stops the
/// process by itself: race the bounded in-flight wait against
/// [`next_signal`] to let a second signal cut it short.
///
/// # Errors
///
/// The OS error if no signal handler could be installed; the gate has
/// drained by then.
#[cfg(feature = "tokio")]
pub fn drain_on_signal(
    gate: Gate,
) -> impl Future<Output = Result<BeginDrain, std::io::Error>> + Send + 'static {
    let heard = next_signal();
    async move {
        // Drains on a signal, and at once if none can be heard.
        let heard = heard.await;
        let begun = gate.begin_drain();
        heard.map(|()| begun)
    }
}

/// Waits for the next SIGTERM (Unix) or Ctrl-C (SIGINT).
///
/// On Unix, called inside a Tokio runtime, it listens from the call on,
/// not from the first poll: a service that calls it before it starts
/// serving, then spawns it, is not killed by a SIGTERM that arrives before
/// the spawned task first runs. Called outside a runtime (or on other
/// systems), it listens from the first poll on.
///
/// For a second signal during the drain: after [`drain_on_signal`] the
/// process ignores further signals unless someone listens for them, so a
/// developer pressing Ctrl-C twice, or an operator sending SIGTERM again,
/// would still wait out the whole in-flight timeout. (The kubelet sends one
/// SIGTERM, then SIGKILL after the grace period.)
///
/// ```no_run
/// # async fn run(gate: ate_readiness::Gate) {
/// use std::time::Duration;
///
/// let _ = ate_readiness::drain_on_signal(gate.clone()).await;
/// tokio::select! {
///     outcome = gate.wait_idle_async(Duration::from_secs(20)) => {
///         println!("in-flight wait: {outcome:?}");
///     }
///     _ = ate_readiness::next_signal() => {
///         eprintln!("second signal: exiting without waiting for in-flight work");
///         std::process::exit(1);
///     }
/// }
/// # }
/// ```
///
/// # Errors
///
/// The OS error if no handler could be installed.
#[cfg(feature = "tokio")]
pub fn next_signal() -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        fn listen() -> Result<(Signal, Signal), std::io::Error> {
            Ok((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ))
        }
        // Installing a handler needs a runtime; outside one (a future made
        // before `block_on`), it waits for the first poll.
        let now = tokio::runtime::Handle::try_current().ok().map(|_| listen());
        async move {
            let (mut term, mut int) = now.unwrap_or_else(listen)?;
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            Ok(())
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c()
    }
}
