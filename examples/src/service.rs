//! The application state and framework-neutral handlers. Each handler takes
//! plain inputs and returns an [`ApiResponse`]; the Axum and Actix adapters
//! only translate requests and responses.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use ate_generation::Latch;
use ate_ledger::{AsyncLedger, RedbStore, Response, store::AsyncStore};
use ate_ratelimit::{KeyedLimiter, LimitId, LimitSet, Limits, MonotonicClock, Policy};
use ate_readiness::{DrainToken, Gate};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::audit::Audit;
use crate::config::{self, Config, ConfigError};
use crate::metrics::Metrics;
use crate::objects::shown;

/// A response any framework can send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResponse {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl ApiResponse {
    /// A JSON response.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: body.to_string(),
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

impl ApiResponse {
    /// The response the ledger recorded (or is recording) for a call: its
    /// status and body, byte for byte. The example records no headers.
    fn recorded(response: &Response) -> Self {
        Self {
            status: response.status,
            headers: Vec::new(),
            content_type: "application/json",
            body: String::from_utf8_lossy(&response.body).into_owned(),
        }
    }
}

/// A duration in milliseconds from `0` to `max` (absent: 0), or the 400
/// that names `what` and the bad value.
fn bounded_ms(what: &str, value: Option<&str>, max: u64) -> Result<u64, ApiResponse> {
    match value.map(str::parse::<u64>) {
        None => Ok(0),
        Some(Ok(ms)) if ms <= max => Ok(ms),
        _ => Err(ApiResponse::json(
            400,
            json!({"error": format!(
                "{what} must be an integer from 0 to {max}, not {}",
                shown(value.unwrap_or_default())
            )}),
        )),
    }
}

/// One object under the generation latch.
#[derive(Debug, Clone)]
struct Object {
    spec: Value,
    status: Value,
    latch: Latch,
    /// The caller that created it (`ATE_MAX_OBJECTS_PER_CALLER`).
    owner: String,
    /// Its spec's and status's size as JSON text.
    bytes: usize,
}

/// Everything the handlers share.
#[derive(Debug)]
pub struct AppState {
    /// The readiness gate.
    pub gate: Gate,
    /// Readiness per capability: `prompt-bridge` (the provider) and
    /// `client-notifications`, each closing only its own route.
    pub capabilities: ate_readiness::Capabilities,
    /// Service config.
    pub config: Config,
    limits: Arc<Limits>,
    /// Whether the shared store was last found away (logged once a change).
    store_away: std::sync::atomic::AtomicBool,
    notify: LimitId,
    prompt: LimitId,
    bucket: LimitId,
    invoke: LimitId,
    audit: Audit,
    audit_failures: AtomicU64,
    objects: Mutex<HashMap<String, Object>>,
    /// The objects' bytes together (`ATE_MAX_OBJECT_BYTES`), changed
    /// only under `objects`' lock.
    object_bytes: std::sync::atomic::AtomicUsize,
    /// WebSocket sessions open (`ATE_MAX_WS_SESSIONS`).
    ws_sessions: Arc<std::sync::atomic::AtomicUsize>,
    ledger: AsyncLedger<LedgerStore>,
    /// The ledger's redb store (none on PostgreSQL): its fault, while an
    /// I/O error keeps it from writing, is the `ate_ledger_store_fault`
    /// gauge.
    redb: Option<Arc<RedbStore>>,
    /// The provider `/invoke` calls over HTTP (`ATE_PROVIDER_URL`); `None`:
    /// the simulated one.
    provider: Option<crate::provider::HttpProvider>,
    /// Metrics.
    pub metrics: Metrics,
    /// Held for the process's life: one process per data dir.
    _data_dir_lock: std::fs::File,
    /// The drain secret's file, once written ([`AppState::publish_drain_token`]);
    /// removed when the state drops.
    drain_token_file: Mutex<Option<ate_readiness::PublishedToken>>,
    /// Set once the in-flight wait has ended: open WebSocket sessions then
    /// close with 1001 instead of being cut when the process exits.
    sessions_closing: tokio::sync::watch::Sender<bool>,
}

/// The ledger's store: a redb file in the data dir (on tokio's blocking
/// pool, as it fsyncs), or PostgreSQL shared by every replica.
type LedgerStore = Arc<dyn AsyncStore>;

/// Shared state.
pub type Shared = Arc<AppState>;

mod invoke;
mod latch;
mod lifecycle;
mod limits;
mod startup;

pub use lifecycle::{
    CLOSE_HANDSHAKE, LEDGER_PURGE_EVERY, LEDGER_SETTLE_EVERY, MAX_BODY_BYTES, MAX_WS_MESSAGE_BYTES,
    RATE_LIMIT_SWEEP, WS_IDLE_REASON, WsRefusal, WsSlot, body_refused, run_background,
    shutdown_sequence,
};
pub use limits::{caller_key, trusted_peer};

impl AppState {
    /// Builds the state: resolves limits and opens the durable ledger.
    pub async fn new(config: Config) -> Result<Shared, ConfigError> {
        let mut limits = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
        for (name, quota) in config.limits.resolve_env()? {
            // Bounded: evicts drained callers first, then refuses new ones.
            let builder = KeyedLimiter::builder(quota).max_keys(config.max_callers);
            let _ = limits.add_with(name, builder);
        }
        let id = |n: &str| {
            limits
                .id(n)
                .ok_or_else(|| ConfigError::Other(format!("limit {n} is not configured")))
        };
        let (notify, prompt, bucket, invoke) = (
            id(config::NOTIFICATIONS)?,
            id(config::PROMPT)?,
            id(config::REQUESTS)?,
            id(config::INVOKE)?,
        );
        let data_dir_lock = startup::lock_data_dir(&config)?;
        let metrics = Metrics::new();
        let (ledger, redb) = startup::open_ledger(&config, &metrics).await?;
        let audit = startup::open_audit(&config, &limits, &[notify, prompt, bucket, invoke])?;
        let limits = startup::shared_limits(&config, limits)?;
        let capabilities = startup::capabilities(&metrics)?;
        let bridge = capabilities
            .id(config::PROMPT_BRIDGE)
            .map_err(|e| ConfigError::Other(e.to_string()))?;
        let provider = config.provider_url.clone().map(|url| {
            tracing::info!(%url, "invoke: calling the provider over HTTP");
            crate::provider::HttpProvider::new(url, config.provider_timeout)
                .feeding(capabilities.clone(), bridge)
        });
        let drain_token = DrainToken::generate()
            .map_err(|e| ConfigError::Other(format!("drain endpoint: {e}")))?;
        Ok(Arc::new(Self {
            // Starting: /ready answers 503 until the startup checks pass
            // (`ready_after_checks`). The drain endpoint asks for this
            // process's secret, which `publish_drain_token` writes where
            // the preStop hook reads it.
            gate: Gate::builder()
                .capabilities(capabilities.clone())
                .drain_token(drain_token)
                .policy(config.admission)
                .ready_while_draining(config.ready_while_draining)
                .starting()
                .build(),
            capabilities,
            config,
            limits: Arc::new(limits),
            store_away: std::sync::atomic::AtomicBool::new(false),
            notify,
            prompt,
            bucket,
            invoke,
            audit,
            audit_failures: AtomicU64::new(0),
            objects: Mutex::new(HashMap::new()),
            object_bytes: std::sync::atomic::AtomicUsize::new(0),
            ws_sessions: Arc::default(),
            ledger,
            redb,
            provider,
            metrics,
            _data_dir_lock: data_dir_lock,
            drain_token_file: Mutex::new(None),
            sessions_closing: tokio::sync::watch::Sender::new(false),
        }))
    }
}

impl AppState {
    /// Removes the drain secret's file now, as the server has stopped:
    /// not left to the last clone of the state, which a framework's worker
    /// may hold past the process's exit (the file then outlived it).
    pub fn withdraw_drain_token(&self) {
        drop(self.drain_token_file.lock().take());
    }

    /// Writes the drain secret where the `drain` subcommand for `port`
    /// reads it (`ATE_DRAIN_TOKEN_FILE`, else the default path for the
    /// port), readable by this user only. Call once the listener is bound.
    ///
    /// # Errors
    ///
    /// The path, and why it cannot be written: the service must not start
    /// with a drain hook that cannot work.
    pub fn publish_drain_token(&self, port: u16) -> std::io::Result<std::path::PathBuf> {
        let path = drain_token_path(self.config.drain_token_file.clone(), port);
        let token = self
            .gate
            .drain_token()
            .ok_or_else(|| std::io::Error::other("the gate has no drain token"))?;
        let published = token.publish(&path).map_err(|e| {
            std::io::Error::other(format!("{e} (set ATE_DRAIN_TOKEN_FILE to a writable path)"))
        })?;
        *self.drain_token_file.lock() = Some(published);
        Ok(path)
    }
}

/// The drain secret's file for a service on `port`: `configured`
/// (`ATE_DRAIN_TOKEN_FILE`) or the library's default for the port.
pub fn drain_token_path(configured: Option<std::path::PathBuf>, port: u16) -> std::path::PathBuf {
    configured.unwrap_or_else(|| DrainToken::default_path(port))
}

/// Every value a query gives for `name`, in order.
pub fn values<'a>(query: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    query
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The value of header `name` from every value a request carries for it:
/// `None` without one, else exactly one header line of 1 to `max` visible
/// ASCII characters other than a comma (no spaces: `"a, b"` sent as one
/// line is what a proxy makes of two lines, which are refused).
///
/// Two lines are refused rather than one picked: to HTTP they mean one
/// comma-joined value ("a, b"), which a proxy may or may not merge, so
/// taking either line alone would let one request count as "a" when sent
/// directly and as "a, b" through a proxy.
fn one_header<'a>(name: &str, values: &[&'a [u8]], max: usize) -> Result<Option<&'a str>, String> {
    let value = match values {
        [] => return Ok(None),
        [one] => *one,
        more => {
            return Err(format!(
                "exactly one {name} header is allowed; this request has {}",
                more.len()
            ));
        }
    };
    if value.is_empty() {
        return Err(format!(
            "the {name} header is empty; it must be 1-{max} visible ASCII characters"
        ));
    }
    if value.len() > max {
        return Err(format!(
            "the {name} header has {} bytes; it must be at most {max} visible ASCII characters",
            value.len()
        ));
    }
    if let Some(at) = value
        .iter()
        .position(|b| !(b'!'..=b'~').contains(b) || *b == b',')
    {
        return Err(format!(
            "the {name} header must be visible ASCII with no space or comma; byte {at} is 0x{:02x}",
            value[at]
        ));
    }
    // Checked above: every byte is ASCII.
    std::str::from_utf8(value)
        .map(Some)
        .map_err(|e| e.to_string())
}
