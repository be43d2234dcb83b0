//! Lifecycle: readiness after the startup checks, `/work`, metrics, the
//! bounds on bodies and WebSocket messages, background tasks, and the
//! SIGTERM drain.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ate_ledger::Key;
use ate_ratelimit::Scope;
use serde_json::{Value, json};

use super::{ApiResponse, AppState, Shared, bounded_ms};
use crate::config;

impl AppState {
    /// A slot for one more WebSocket session, held until the session
    /// ends; past `ATE_MAX_WS_SESSIONS` open at once, the 503 (with
    /// `Retry-After`) to answer the upgrade request with instead.
    pub fn ws_slot(&self) -> Result<WsSlot, ApiResponse> {
        let most = self.config.max_ws_sessions;
        let open = &self.ws_sessions;
        let mut now = open.load(Ordering::Acquire);
        loop {
            if now >= most {
                return Err(ApiResponse::json(
                    503,
                    json!({"error": format!(
                        "{now} WebSocket sessions are open, the most allowed (ATE_MAX_WS_SESSIONS)"
                    )}),
                )
                .with_header("retry-after", "1"));
            }
            match open.compare_exchange_weak(now, now + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(WsSlot(open.clone())),
                Err(seen) => now = seen,
            }
        }
    }

    /// How long a session may go without a message from its client.
    pub fn ws_idle_timeout(&self) -> Duration {
        self.config.ws_idle_timeout
    }

    /// Resolves once the service is shutting down (the in-flight wait has
    /// ended): an open WebSocket session then closes with 1001 (going
    /// away), so its client reconnects elsewhere instead of seeing the
    /// connection cut (1006, which clients count as a server failure).
    pub fn sessions_closing(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut closing = self.sessions_closing.subscribe();
        async move {
            // An error means the state is gone: the process is ending.
            let _ = closing.wait_for(|c| *c).await;
        }
    }

    /// `GET /metrics`.
    pub fn metrics(&self) -> ApiResponse {
        ApiResponse {
            status: 200,
            headers: Vec::new(),
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: self.metrics.render(
                &self.gate.snapshot(),
                self.limits.set().keys_held(),
                matches!(self.limits.scope(), Scope::Process | Scope::Shared),
                self.redb.as_ref().is_some_and(|s| s.fault().is_some()),
            ),
        }
    }

    /// `GET /work?ms=N`: holds an admission guard for N ms. `ms` is every
    /// value the query gives for it: two are a 400, not one picked (a
    /// proxy that read the first would see another request than this
    /// service, which would read the last).
    pub async fn work(&self, ms: &[&str]) -> ApiResponse {
        let ms = match ms {
            [] => None,
            [one] => Some(*one),
            more => {
                return ApiResponse::json(
                    400,
                    json!({"error": format!(
                        "ms must be given at most once; this query gives it {} times",
                        more.len()
                    )}),
                );
            }
        };
        let ms = match bounded_ms("ms", ms, 60_000) {
            Ok(ms) => ms,
            Err(refused) => return refused,
        };
        // Admitted by the readiness layer, which counts the request in
        // flight until its response is sent.
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ApiResponse::json(200, json!({"worked_ms": ms}))
    }

    /// The startup checks, then `/ready` answers 200. The binaries run
    /// them once they listen, so the pod is alive (`/health` 200) and not
    /// ready (`/ready` 503, `starting`) meanwhile: the ledger store must
    /// answer a read (retried every second until it does; a PostgreSQL
    /// still coming up keeps the pod out of the load balancer, not
    /// crashing); the rate limits' shared store, if any, is probed and
    /// logged (a Redis that does not answer does not keep the pod out: its
    /// fallback decides meanwhile).
    pub async fn ready_after_checks(&self) {
        let probe = Key::new("ate-startup", "probe");
        let mut failures = 0u32;
        loop {
            match self.ledger.get(&probe).await {
                Ok(_) => break,
                Err(e) => {
                    failures += 1;
                    if failures.is_power_of_two() {
                        tracing::warn!(failures, "ledger store not answering at startup: {e}");
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.probe_store().await;
        // Notifications need nothing more; the prompt bridge needs the
        // provider: the simulated one is always there, a real one is asked
        // (`watch_provider`) before the pod invites traffic to it.
        self.set_capability(config::CLIENT_NOTIFICATIONS, Ok(()));
        match &self.provider {
            None => self.set_capability(config::PROMPT_BRIDGE, Ok(())),
            Some(p) => {
                let health = p.health(&self.config.provider_health_path).await;
                self.set_capability(config::PROMPT_BRIDGE, health);
            }
        }
        self.gate.mark_ready();
    }

    fn set_capability(&self, name: &str, state: Result<(), String>) {
        let Ok(id) = self.capabilities.id(name) else {
            return;
        };
        match state {
            Ok(()) => self.capabilities.set_ready(id),
            Err(reason) => self.capabilities.set_not_ready(id, reason),
        };
    }

    /// Asks the provider's health endpoint every
    /// `ATE_PROVIDER_HEALTH_INTERVAL_MS` and sets `prompt-bridge` by its
    /// answer: a refused connection or a 401/403 closes `/prompt`, the
    /// next good answer opens it again.
    async fn watch_provider(&self) {
        let Some(provider) = &self.provider else {
            return;
        };
        let every = self.config.provider_health_interval;
        every_while_serving(self, every, || async {
            let health = provider.health(&self.config.provider_health_path).await;
            self.set_capability(config::PROMPT_BRIDGE, health);
        })
        .await;
    }

    /// `GET /ready/capabilities`: the pod's answer and every capability
    /// with its state, reason and since when (read-only).
    pub fn capabilities_answer(&self) -> ApiResponse {
        let ready = self.gate.ready_answer();
        let body = json!({
            "ready": ready.status == 200,
            "state": serde_json::from_str::<Value>(&ready.body)
                .ok()
                .and_then(|v| v.get("state").cloned())
                .unwrap_or(Value::Null),
            "capabilities": self.capabilities.snapshot(),
        });
        ApiResponse::json(200, body)
    }
}

/// SIGTERM → drain → bounded wait → stop accepting. A second SIGTERM or
/// Ctrl-C during the wait exits at once, with status 1.
///
/// Call it before the server accepts work, then spawn it: it listens for
/// the signal from the call on, so a SIGTERM that comes before the spawned
/// task first runs still drains instead of killing the process.
pub fn shutdown_sequence(
    state: Shared,
    stop: tokio::sync::oneshot::Sender<()>,
) -> impl Future<Output = ()> + Send + 'static {
    let first = ate_readiness::drain_on_signal(state.gate.clone());
    drain_then_stop(state, first, stop)
}

async fn drain_then_stop(
    state: Shared,
    first: impl Future<Output = Result<ate_readiness::BeginDrain, std::io::Error>>,
    stop: tokio::sync::oneshot::Sender<()>,
) {
    match first.await {
        Ok(d) => tracing::info!(started_now = d.started(), "signal received: draining"),
        Err(e) => tracing::error!("cannot listen for signals ({e}): draining now"),
    }
    // A second SIGTERM or Ctrl-C cuts the wait short (the first one's
    // handler stays installed, so without this it would do nothing).
    let outcome = tokio::select! {
        outcome = state.gate.wait_idle_async(state.config.drain_timeout) => outcome,
        _ = ate_readiness::next_signal() => {
            tracing::warn!(
                in_flight = state.gate.in_flight(),
                "second signal: exiting without waiting for in-flight work"
            );
            std::process::exit(1);
        }
    };
    match outcome {
        ate_readiness::WaitOutcome::Completed => {
            tracing::info!("in-flight wait completed; exiting")
        }
        ate_readiness::WaitOutcome::TimedOut { in_flight } => {
            tracing::warn!(in_flight, "in-flight wait timed out; exiting anyway")
        }
    }
    // Sessions still open (they count as in flight, so the wait timed out)
    // close with 1001; give them a moment to send it.
    state.sessions_closing.send_replace(true);
    let _ = state.gate.wait_idle_async(Duration::from_secs(1)).await;
    let _ = stop.send(());
    // Upgraded connections (WebSockets) are not tracked by the server's
    // graceful shutdown: bound the exit.
    tokio::time::sleep(Duration::from_secs(2)).await;
    tracing::warn!("connections still open after the drain; exiting");
    std::process::exit(0);
}

/// How long a session the server closes waits for the client's answering
/// close frame before it drops the connection anyway. Within the second the
/// shutdown gives open sessions after it signals them to close.
pub const CLOSE_HANDSHAKE: Duration = Duration::from_millis(500);

/// The largest request body the services read (1 MiB, under the 1.5 MiB
/// Kubernetes allows an object): the same on both frameworks, whose own
/// defaults differ (2 MB on Axum, 256 KiB on Actix).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The largest WebSocket message the services echo, whole, however many
/// frames it came in: the request-body bound. The frameworks' own defaults
/// differ (64 MiB on Axum; 64 KiB a frame on Actix, which hands on the
/// frames of a fragmented message one by one).
pub const MAX_WS_MESSAGE_BYTES: usize = MAX_BODY_BYTES;

/// Why a service closes a session that sent what it will not take, with
/// the close code (RFC 6455 7.4.1) and reason both adapters send. A session
/// cut without a close frame is an abnormal closure to the client, which
/// then cannot tell its own mistake from a failing server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsRefusal {
    /// Bad framing: 1002.
    Protocol,
    /// A text message that is not UTF-8: 1007.
    NotUtf8,
    /// A message over [`MAX_WS_MESSAGE_BYTES`]: 1009.
    TooBig,
}

impl WsRefusal {
    /// The close code.
    pub fn code(self) -> u16 {
        match self {
            Self::Protocol => 1002,
            Self::NotUtf8 => 1007,
            Self::TooBig => 1009,
        }
    }

    /// The close frame's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Protocol => "protocol error",
            Self::NotUtf8 => "text is not UTF-8",
            Self::TooBig => "message too big",
        }
    }
}

/// The answer to a request body the framework would not read: 413 for one
/// over [`MAX_BODY_BYTES`], 400 for any other failure (a client that hung
/// up mid-body, a bad chunked encoding). JSON like every other error here,
/// not the framework's own text.
pub fn body_refused(status: u16) -> ApiResponse {
    if status == 413 {
        ApiResponse::json(
            413,
            json!({
                "error": format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
                "max_body_bytes": MAX_BODY_BYTES,
            }),
        )
    } else {
        ApiResponse::json(400, json!({"error": "the request body could not be read"}))
    }
}

/// How often callers whose windows have drained are dropped from the rate
/// limits' tables: a tenth of the one-minute windows, so memory follows the
/// callers active in about the last minute (`max_callers` caps it).
pub const RATE_LIMIT_SWEEP: Duration = Duration::from_secs(6);

/// How often ended ledger records past their retention (24 h) are deleted.
/// Open records are never deleted, so a caller can always retry.
pub const LEDGER_PURGE_EVERY: Duration = Duration::from_secs(600);

/// How often tries the ledger knows it never sent, but could not close
/// while the store was away, are closed as unsent
/// ([`AsyncLedger::settle`](ate_ledger::AsyncLedger::settle)): well within
/// a lease, so a dispatch mark that landed late never outlives it.
pub const LEDGER_SETTLE_EVERY: Duration = Duration::from_secs(1);

/// The service's periodic work, each at its own period, from start until
/// the gate drains:
/// - closing unsent tries the store could not close, every
///   [`LEDGER_SETTLE_EVERY`];
/// - the reconciler (`ATE_RECONCILE_INTERVAL_MS`, unless 0);
/// - dropping drained callers from every rate limit, every
///   [`RATE_LIMIT_SWEEP`] (no decision changes);
/// - deleting ended ledger records past the retention, every
///   [`LEDGER_PURGE_EVERY`], so the ledger file holds about a retention's
///   worth of keys, not every key ever seen.
///
/// Each adapter spawns it once.
pub async fn run_background(state: Shared) {
    let reconcile = async {
        if let Some(every) = state.config.reconcile_interval {
            every_while_serving(&state, every, || state.reconcile_once()).await;
        }
    };
    let sweep = every_while_serving(&state, RATE_LIMIT_SWEEP, || async {
        state.limits.set().retain_recent();
    });
    let purge = every_while_serving(&state, LEDGER_PURGE_EVERY, || state.purge_ledger());
    let settle = every_while_serving(&state, LEDGER_SETTLE_EVERY, || async {
        let waiting = state.ledger.settle().await;
        if waiting > 0 {
            tracing::warn!(waiting, "ledger: unsent tries still to close (store away)");
        }
    });
    tokio::join!(reconcile, sweep, purge, settle, state.watch_provider());
}

/// Runs `work` at once and then every `period` until the gate drains.
async fn every_while_serving<F: std::future::Future<Output = ()>>(
    state: &AppState,
    period: Duration,
    mut work: impl FnMut() -> F,
) {
    let mut tick = tokio::time::interval(period);
    while !state.gate.is_draining() {
        tick.tick().await;
        work().await;
    }
}

/// One open WebSocket session's place under `ATE_MAX_WS_SESSIONS`,
/// given back when dropped.
#[derive(Debug)]
pub struct WsSlot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for WsSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The close reason of a session its client left silent past
/// `ATE_WS_IDLE_TIMEOUT_SECS`.
pub const WS_IDLE_REASON: &str = "idle timeout";
