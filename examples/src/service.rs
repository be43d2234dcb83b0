//! The application state and framework-neutral handlers. Each handler takes
//! plain inputs and returns an [`ApiResponse`]; the Axum and Actix adapters
//! only translate requests and responses.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ate_generation::{Decision, Latch, Observe, Writer};
use ate_ledger::{
    AsyncLedger, AsyncPgStore, Call, Dispatch, Executed, Fingerprint, Key, RedbStore, Response,
    clock::SystemClock, store::AsyncStore,
};
use ate_ratelimit::http::KeyError;
use ate_ratelimit::{
    KeyedLimiter, LimitId, LimitSet, Limits, MonotonicClock, Policy, RedisConfig, Scope,
};
use ate_readiness::{Admitted, Gate};
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::audit::Audit;
use crate::config::{self, Config, ConfigError};
use crate::metrics::Metrics;
use crate::objects::{check_object_name, parse_object_write, shown};

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
}

/// Everything the handlers share.
#[derive(Debug)]
pub struct AppState {
    /// The readiness gate.
    pub gate: Gate,
    /// Service config.
    pub config: Config,
    limits: Arc<Limits>,
    /// Whether the shared store was last found away (logged once a change).
    store_away: std::sync::atomic::AtomicBool,
    notify: LimitId,
    prompt: LimitId,
    bucket: LimitId,
    audit: Audit,
    audit_failures: AtomicU64,
    objects: Mutex<HashMap<String, Object>>,
    ledger: AsyncLedger<LedgerStore>,
    /// Metrics.
    pub metrics: Metrics,
    /// Held for the process's life: one process per data dir.
    _data_dir_lock: std::fs::File,
    /// Set once the in-flight wait has ended: open WebSocket sessions then
    /// close with 1001 instead of being cut when the process exits.
    sessions_closing: tokio::sync::watch::Sender<bool>,
}

/// The ledger's store: a redb file in the data dir (on tokio's blocking
/// pool, as it fsyncs), or PostgreSQL shared by every replica.
type LedgerStore = Arc<dyn AsyncStore>;

/// Shared state.
pub type Shared = Arc<AppState>;

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
        let (notify, prompt, bucket) = (
            id(config::NOTIFICATIONS)?,
            id(config::PROMPT)?,
            id(config::REQUESTS)?,
        );
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            // create_dir_all's own error for a file in the way is "File
            // exists", which reads as if the directory were fine.
            let what = if config.data_dir.exists() && !config.data_dir.is_dir() {
                "it exists and is not a directory".to_owned()
            } else {
                e.to_string()
            };
            ConfigError::Other(format!(
                "cannot create data dir {}: {what}",
                config.data_dir.display()
            ))
        })?;
        // First, the data dir's lock: a second process on it stops here,
        // before it touches the ledger file or the audit trail.
        let lock_path = config.data_dir.join("lock");
        let data_dir_lock = std::fs::File::create(&lock_path).map_err(|e| {
            ConfigError::Other(format!("cannot create {}: {e}", lock_path.display()))
        })?;
        data_dir_lock.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => ConfigError::Other(format!(
                "the data dir {} is already open by another process: is another service \
                 running on it? Give each its own --data-dir",
                config.data_dir.display()
            )),
            std::fs::TryLockError::Error(e) => {
                ConfigError::Other(format!("cannot lock {}: {e}", lock_path.display()))
            }
        })?;
        let ledger_config = ate_ledger::Config {
            lease_ttl: config.ledger_lease,
            ..ate_ledger::Config::default()
        };
        let metrics = Metrics::new();
        let count = metrics.transitions();
        let ledger = |store: LedgerStore| {
            AsyncLedger::with_clock(store, ledger_config, SystemClock)
                .map(|ledger| ledger.observe(move |_, step| count(step.name())))
                .map_err(|e| ConfigError::Other(format!("ledger: {e}")))
        };
        let ledger = match &config.ledger_postgres_url {
            // Shared by every replica: an attempt found open may belong to
            // a live replica, so only this worker's own (its previous run,
            // under the same ATE_WORKER_ID) and those whose lease expired
            // (their worker is gone) are resolved.
            Some(url) => {
                let store = AsyncPgStore::connect(url, config.ledger_postgres_connections.get())
                    .await
                    .map_err(|e| {
                        ConfigError::Other(format!(
                            "cannot open the ledger database (ATE_LEDGER_POSTGRES_URL): {e}"
                        ))
                    })?;
                let ledger = ledger(Arc::new(store))?;
                recovered(ledger.recover_owner(&config.worker_id).await)?;
                tracing::info!(worker = %config.worker_id, "ledger: PostgreSQL, shared by every replica");
                ledger
            }
            // This process's own: every attempt still open was left by a run
            // that has ended (a crash, a SIGKILL), so resolve them all now
            // rather than keep their callers on 409 until the dead run's
            // leases expire.
            None => {
                let path = config.data_dir.join("ledger.redb");
                let store = RedbStore::open(&path).map_err(|e| match e {
                    ate_ledger::Error::AlreadyOpen { .. } => ConfigError::Other(format!(
                        "the ledger {} is already open: is another service running on this \
                         data dir? Give each its own --data-dir",
                        path.display()
                    )),
                    e => ConfigError::Other(format!("cannot open ledger {}: {e}", path.display())),
                })?;
                let ledger = ledger(Arc::new(store))?;
                recovered(ledger.recover_all().await)?;
                ledger
            }
        };
        // The rate-limit audit trail: a restart seeds every caller's windows
        // from it instead of handing out a fresh burst.
        let audit_path = config.data_dir.join("ratelimit-audit.jsonl");
        let (audit, loaded) = Audit::open(audit_path.clone(), &limits, &[notify, prompt, bucket])
            .map_err(|e| {
            ConfigError::Other(format!(
                "cannot open rate-limit audit trail {}: {e}",
                audit_path.display()
            ))
        })?;
        if loaded.malformed > 0 {
            tracing::warn!(
                malformed = loaded.malformed,
                "skipped unreadable lines in the rate-limit audit trail"
            );
        }
        if loaded.refused > 0 {
            tracing::warn!(
                refused = loaded.refused,
                "audit-trail records not restored: a caller table was full (ATE_MAX_CALLERS)"
            );
        }
        tracing::info!(
            seeded = loaded.seeded,
            expired = loaded.expired,
            "rate limits seeded from the audit trail"
        );
        let limits = match &config.ratelimit_redis_url {
            None => Limits::local(limits),
            Some(url) => {
                let store = RedisConfig::new(url.as_str())
                    .prefix("ate-example")
                    .fallback(config.ratelimit_redis_fallback)
                    .connect()
                    .map_err(|e| ConfigError::Other(format!("ATE_RATELIMIT_REDIS_URL: {e}")))?;
                Limits::redis(limits, store)
            }
        };
        Ok(Arc::new(Self {
            // Starting: /ready answers 503 until the startup checks pass
            // (`ready_after_checks`).
            gate: Gate::builder().policy(config.admission).starting().build(),
            config,
            limits: Arc::new(limits),
            store_away: std::sync::atomic::AtomicBool::new(false),
            notify,
            prompt,
            bucket,
            audit,
            audit_failures: AtomicU64::new(0),
            objects: Mutex::new(HashMap::new()),
            ledger,
            metrics,
            _data_dir_lock: data_dir_lock,
            sessions_closing: tokio::sync::watch::Sender::new(false),
        }))
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

    /// `POST /notify` and `POST /prompt`, once the rate-limit layer let
    /// the request through: the route limit plus the shared bucket, per
    /// caller ([`caller_key`]); `remaining` is what the layer's check
    /// left ([`Checked`](ate_ratelimit::http::Checked)). A denial never
    /// gets here: the layer answers it (429, or 503 when the caller table
    /// is full or the shared store refuses).
    pub fn limited(&self, route: &str, remaining: u32) -> ApiResponse {
        ApiResponse::json(
            200,
            json!({"ok": true, "route": route, "remaining": remaining}),
        )
    }

    /// Every rate-limit check, allowed or denied (the layer's
    /// `on_decision`): the attempt goes to the audit trail (CountDenied:
    /// a denied one counts in the windows too, so the next run must
    /// remember it), the decision to the metrics, and a change of the
    /// shared store's health to the log.
    pub fn record_decision(&self, caller: &str, decision: &ate_ratelimit::Combined<'_>) {
        self.note_store(decision);
        let names: Vec<&str> = decision.decisions().iter().map(|(n, _)| *n).collect();
        if let Err(e) = self.audit.record(caller, &names) {
            // The decision stands; only the next run's memory of it is lost.
            // Logged on the 1st, 2nd, 4th, 8th... failure, not every request.
            let failures = self.audit_failures.fetch_add(1, Ordering::Relaxed) + 1;
            if failures.is_power_of_two() {
                tracing::warn!(failures, "cannot append to the rate-limit audit trail: {e}");
            }
        }
        for (name, d) in decision.decisions() {
            self.metrics.decision(name, d.is_allowed());
        }
    }

    /// Who a request is ([`caller_key`]) from its `X-Caller` values, its
    /// peer and its forwarding headers (read only from the
    /// `ATE_TRUSTED_PROXIES`): the rate limits' caller, and the scope of
    /// its idempotency keys.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] for the 400: an unusable `X-Caller`, a malformed
    /// forwarding header from a trusted proxy, an unknown peer.
    pub fn caller_of(
        &self,
        x_caller: &[&[u8]],
        peer: Option<std::net::IpAddr>,
        x_forwarded_for: &[&[u8]],
        forwarded: &[&[u8]],
    ) -> Result<String, KeyError> {
        caller_key(x_caller, || {
            let peer = peer.ok_or(KeyError::NoPeer)?;
            ate_ratelimit::http::client_ip(
                peer,
                x_forwarded_for.iter().copied(),
                forwarded.iter().copied(),
                &self.config.trusted_proxies,
            )
            .map(|ip| ip.to_string())
        })
    }

    /// The limits the rate-limit layer checks, and the routes it checks
    /// them on: `/notify` and `/prompt`, each with the shared bucket.
    pub fn limits(&self) -> (Arc<Limits>, [(&'static str, [LimitId; 2]); 2]) {
        (
            self.limits.clone(),
            [
                ("/notify", [self.notify, self.bucket]),
                ("/prompt", [self.prompt, self.bucket]),
            ],
        )
    }

    /// Logs once when the shared store stops answering (with what the
    /// limits do meanwhile) and once when it answers again.
    fn note_store(&self, decision: &ate_ratelimit::Combined<'_>) {
        let away = matches!(decision.scope(), Scope::Fallback | Scope::Unavailable);
        if self.store_away.swap(away, Ordering::AcqRel) == away {
            return;
        }
        if away {
            let error = decision.store_error().unwrap_or("unknown");
            if decision.scope() == Scope::Fallback {
                tracing::warn!(
                    %error,
                    "rate-limit Redis unreachable: deciding with this process's own windows \
                     until it answers (ATE_RATELIMIT_REDIS_FALLBACK=local)"
                );
            } else {
                tracing::warn!(
                    %error,
                    "rate-limit Redis unreachable: refusing rate-limited requests with 503 \
                     until it answers (ATE_RATELIMIT_REDIS_FALLBACK=refuse)"
                );
            }
        } else {
            tracing::info!("rate-limit Redis answers again: limits are shared by every replica");
        }
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
        self.gate.mark_ready();
    }

    /// At startup: whether the limits' shared store answers, logged.
    async fn probe_store(&self) {
        let Some(store) = self.limits.store() else {
            return;
        };
        match store.ping().await {
            Ok(()) => tracing::info!("rate limits: Redis, shared by every replica"),
            Err(error) => {
                self.store_away.store(true, Ordering::Release);
                tracing::warn!(
                    %error,
                    fallback = ?store.config().fallback_policy(),
                    "rate limits: Redis unreachable at startup; the fallback decides until it \
                     answers"
                );
            }
        }
    }

    fn object_json(name: &str, o: &Object) -> Value {
        let mut status = o.status.clone();
        // A condition that carries its own observed generation is stale
        // while that is below the object's generation.
        if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
                if let Some(observed) = c.get("observedGeneration").and_then(Value::as_u64) {
                    let stale = o.latch.is_condition_stale(observed);
                    c.insert("stale".to_owned(), json!(stale));
                }
            }
        }
        json!({
            "name": name,
            "spec": o.spec,
            "status": status,
            "generation": o.latch.generation(),
            "observedGeneration": o.latch.observed_generation(),
            "converged": o.latch.is_converged(),
        })
    }

    /// Who is writing: the control plane iff it shows the control token.
    fn writer(&self, authorization: Option<&str>) -> Writer {
        match (&self.config.control_token, bearer_token(authorization)) {
            (Some(token), Some(given)) if same_secret(given, token) => Writer::ControlPlane,
            _ => Writer::Client,
        }
    }

    /// `PUT /objects/{name}`: sets the desired spec and/or the status (see
    /// [`crate::objects`] for how a body splits). Generation advances only
    /// when the desired spec changed; a client-supplied generation is
    /// ignored; a status-only update never moves generation or observed.
    /// An `observedGeneration` other than the stored one is an observed
    /// write (control plane only). All or nothing: a refused write changes
    /// nothing.
    pub fn put_object(&self, name: &str, authorization: Option<&str>, body: &[u8]) -> ApiResponse {
        let write = match check_object_name(name).and_then(|()| parse_object_write(name, body)) {
            Ok(w) => w,
            Err(e) => return ApiResponse::json(400, json!({"error": e})),
        };
        let writer = self.writer(authorization);
        let mut objects = self.objects.lock();
        let existing = objects.get(name);
        let created = existing.is_none();
        // Work on a copy; store it only if every part succeeds.
        let mut o = existing.cloned().unwrap_or_else(|| Object {
            spec: json!({}),
            status: json!({}),
            latch: Latch::new(),
        });
        if let Some(spec) = write.spec {
            // A new object starts at generation 1 with this spec. A spec
            // that differs only in how a number is written (1 and 1.0) is
            // no change: the stored one stays.
            if created {
                o.spec = spec;
            } else {
                match o
                    .latch
                    .update_spec_by(&o.spec, &spec, crate::json::canonical)
                {
                    Ok(ate_generation::Advance::Advanced(_)) => o.spec = spec,
                    Ok(ate_generation::Advance::Unchanged) => {}
                    Err(e) => return ApiResponse::json(409, json!({"error": e.to_string()})),
                }
            }
        }
        if let Some(status) = write.status {
            o.status = status;
        }
        // Echoing the stored value (a GET put back) writes nothing.
        let observed = write
            .observed
            .filter(|&n| n != o.latch.observed_generation());
        match o.latch.apply_update(writer, observed) {
            Ok(_) => {}
            // Most often a GET put back after the control plane moved on.
            Err(e @ ate_generation::Error::ClientWrite { .. }) => {
                return ApiResponse::json(
                    403,
                    json!({
                        "error": e.to_string(),
                        "hint": format!(
                            "leave observedGeneration out of a PUT (it is {}); the control \
                             plane writes it with POST /objects/{name}/observed",
                            o.latch.observed_generation()
                        ),
                    }),
                );
            }
            Err(e) => return Self::observe_error(&o, e),
        }
        let body = Self::object_json(name, &o);
        objects.insert(name.to_owned(), o);
        ApiResponse::json(if created { 201 } else { 200 }, body)
    }

    /// `GET /objects/{name}`.
    pub fn get_object(&self, name: &str) -> ApiResponse {
        if let Err(e) = check_object_name(name) {
            return ApiResponse::json(400, json!({"error": e}));
        }
        match self.objects.lock().get(name) {
            Some(o) => ApiResponse::json(200, Self::object_json(name, o)),
            None => ApiResponse::json(404, json!({"error": format!("no object {name}")})),
        }
    }

    /// `POST /objects/{name}/observed`: the control-plane write-back.
    pub fn observe(&self, name: &str, authorization: Option<&str>, body: &[u8]) -> ApiResponse {
        if let Err(e) = check_object_name(name) {
            return ApiResponse::json(400, json!({"error": e}));
        }
        let writer = self.writer(authorization);
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Body {
            observed_generation: u64,
        }
        let body = match serde_json::from_slice::<Body>(body) {
            Ok(body) => body,
            Err(e) => {
                return ApiResponse::json(
                    400,
                    json!({"error": format!(
                        "the body must be {{\"observedGeneration\": N}}, N a whole number from 0 to {}: {e}",
                        u64::MAX
                    )}),
                );
            }
        };
        let mut objects = self.objects.lock();
        let Some(o) = objects.get_mut(name) else {
            return ApiResponse::json(404, json!({"error": format!("no object {name}")}));
        };
        match o.latch.observe(writer, body.observed_generation) {
            Ok(result) => {
                let mut out = Self::object_json(name, o);
                out["changed"] = json!(matches!(result, Observe::Advanced { .. }));
                ApiResponse::json(200, out)
            }
            Err(e) => Self::observe_error(o, e),
        }
    }

    /// A refused observed write: 403 for a client, 409 for a regression,
    /// an overshoot or an overflow, naming the numbers.
    fn observe_error(o: &Object, e: ate_generation::Error) -> ApiResponse {
        let (current, generation) = (o.latch.observed_generation(), o.latch.generation());
        match e {
            ate_generation::Error::ClientWrite { .. } => {
                ApiResponse::json(403, json!({"error": e.to_string()}))
            }
            ate_generation::Error::Regression { attempted, .. }
            | ate_generation::Error::Overshoot { attempted, .. } => ApiResponse::json(
                409,
                json!({
                    "error": e.to_string(),
                    "observedGeneration": current,
                    "attempted": attempted,
                    "generation": generation,
                }),
            ),
            _ => ApiResponse::json(409, json!({"error": e.to_string()})),
        }
    }

    /// Deletes ended ledger records past the retention, and logs how many.
    async fn purge_ledger(&self) {
        match self.ledger.purge().await {
            Ok(purged) => tracing::info!(purged, "ledger records past the retention deleted"),
            Err(e) => tracing::warn!("ledger purge failed: {e}"),
        }
    }

    /// One reconciler pass: for each object not converged, capture the
    /// target, "apply" it, and record exactly that target.
    pub async fn reconcile_once(&self) {
        let todo: Vec<(String, ate_generation::ApplyTicket)> = self
            .objects
            .lock()
            .iter()
            .filter_map(|(name, o)| match o.latch.gate() {
                Decision::Skip => None,
                Decision::Apply(ticket) => Some((name.clone(), ticket)),
            })
            .collect();
        for (name, ticket) in todo {
            // The simulated apply; a spec change landing now stays unobserved.
            tokio::time::sleep(Duration::from_millis(10)).await;
            if let Some(o) = self.objects.lock().get_mut(&name)
                && let Err(e) = o.latch.record(ticket)
            {
                tracing::debug!(%name, "reconcile record skipped: {e}");
            }
        }
    }

    /// `POST /invoke`: an idempotent provider call. `idempotency_key` is
    /// every `Idempotency-Key` value of the request, as received.
    pub async fn invoke(
        self: &Arc<Self>,
        admitted: Option<Admitted>,
        caller: Result<String, KeyError>,
        idempotency_key: &[&[u8]],
        simulate: Option<&str>,
        delay_ms: Option<&str>,
        body: &[u8],
    ) -> ApiResponse {
        let key = match idempotency_key_of(idempotency_key) {
            Ok(key) => key,
            Err(error) => return ApiResponse::json(400, json!({ "error": error })),
        };
        // Keys are the caller's own (as Stripe scopes them per account): the
        // same key and body from another caller is another request, never
        // a replay of someone else's receipt.
        let caller = match caller {
            Ok(caller) => caller,
            Err(error) => return ApiResponse::json(400, json!({ "error": error.to_string() })),
        };
        let request = match crate::json::parse(body) {
            Ok(request) => request,
            Err(error) => return ApiResponse::json(400, json!({ "error": error })),
        };
        let behaviour = match simulate.unwrap_or("success") {
            "success" => Simulate::Success,
            "credential_error" => Simulate::CredentialError,
            "timeout" => Simulate::Timeout,
            "rejected" => Simulate::Rejected,
            other => {
                return ApiResponse::json(
                    400,
                    json!({"error": format!("unknown X-Simulate {other:?}")}),
                );
            }
        };
        let delay = match bounded_ms("X-Simulate-Delay-Ms", delay_ms, 30_000) {
            Ok(ms) => ms,
            Err(refused) => return refused,
        };
        // The readiness layer admitted the request; the call's task holds
        // an admission of its own (below).
        let guard = admitted.as_ref().map(Admitted::hold);
        let fingerprint = Fingerprint::of_json(&request);
        let key = Key::new(caller, key);
        // The call runs in a task of its own: a client that hangs up (which
        // drops this request's future) must not stop it between the
        // dispatch and the close, or the provider's answer is never
        // recorded. The guard goes with it, so the shutdown waits for it.
        let this = Arc::clone(self);
        let call = tokio::spawn(async move {
            let owner = &this.config.worker_id;
            let executed = this
                .ledger
                .execute(&key, &fingerprint, owner, |dispatch| {
                    provider(dispatch, behaviour, delay, &key)
                })
                .await;
            drop(guard);
            this.answer(executed)
        });
        call.await
            .unwrap_or_else(|_| ApiResponse::json(500, json!({"error": "the call's task failed"})))
    }

    /// The HTTP answer to what the ledger's `execute` said.
    fn answer(&self, executed: Result<Executed, ate_ledger::Error>) -> ApiResponse {
        let replayed = |r: ApiResponse| r.with_header("idempotent-replayed", "true");
        match executed {
            Ok(Executed::Answered { response, .. }) => ApiResponse::recorded(&response),
            Ok(Executed::Replayed(response)) => replayed(ApiResponse::recorded(&response)),
            Ok(Executed::FailedPreProvider { reason }) => ApiResponse::json(
                424,
                json!({"state": "failed_pre_provider", "reason": reason, "retryable": true}),
            ),
            Ok(Executed::ProviderUnavailable {
                reason,
                replayed: r,
            }) => {
                let answer = ApiResponse::json(
                    504,
                    json!({"state": "provider_unavailable", "reason": reason, "retryable": false}),
                );
                if r { replayed(answer) } else { answer }
            }
            Ok(other) => {
                tracing::error!("unexpected ledger answer: {other:?}");
                ApiResponse::json(500, json!({"error": "unexpected ledger answer"}))
            }
            Err(e) => self.ledger_error(e),
        }
    }

    fn ledger_error(&self, e: ate_ledger::Error) -> ApiResponse {
        use ate_ledger::Error as E;
        match e {
            E::Conflict { .. } => {
                // The ledger's wait is the lease's: when a dead worker's
                // attempt is resolved at the latest (up to 30 s). A live
                // call usually ends well before, so clients are told to
                // come back sooner; the lease is in the body.
                let lease_secs = e.retry_after_secs().unwrap_or(1);
                ApiResponse::json(
                    409,
                    json!({
                        "error": "an attempt with this key is in flight",
                        "lease_expires_in_secs": lease_secs,
                    }),
                )
                .with_header(
                    "retry-after",
                    lease_secs.min(CONFLICT_RETRY_SECS).to_string(),
                )
            }
            E::FingerprintMismatch { .. } => ApiResponse::json(
                422,
                json!({"error": "this Idempotency-Key was used with a different request"}),
            ),
            // The store is unreachable (a database down or failing over) or
            // the key too contended: nothing about the request was decided,
            // so the client may retry, and a load balancer may retry
            // elsewhere. A request that was not yet marked dispatched was
            // not sent; one that was is never sent again (the dispatch rule).
            unavailable @ (E::Storage(_) | E::Contended { .. }) => {
                tracing::error!("ledger unavailable: {unavailable}");
                // The store's own error (its host, what the database said)
                // is for the log, not for every client.
                let error = match unavailable {
                    E::Storage(_) => "the ledger's store is unavailable".to_owned(),
                    contended => format!("the ledger is unavailable: {contended}"),
                };
                ApiResponse::json(503, json!({"error": error, "retryable": true}))
                    .with_header("retry-after", "1")
            }
            other => {
                tracing::error!("ledger error: {other}");
                ApiResponse::json(500, json!({"error": other.to_string()}))
            }
        }
    }
}

/// What `X-Simulate` asks of the simulated provider.
#[derive(Debug, Clone, Copy)]
enum Simulate {
    Success,
    CredentialError,
    Timeout,
    Rejected,
}

/// The simulated provider call, as a service writes its own for
/// [`AsyncLedger::execute`]: what can fail before anything is sent fails
/// first; then the dispatch mark; then the request (`delay` ms).
async fn provider(mut dispatch: Dispatch, simulate: Simulate, delay: u64, key: &Key) -> Call {
    // Credentials are checked before anything is sent.
    if let Simulate::CredentialError = simulate {
        return Call::PreProvider("credential error".into());
    }
    // Durably dispatched BEFORE the provider sees anything.
    if let Err(e) = dispatch.send().await {
        return Call::PreProvider(format!("not sent: {e}"));
    }
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let body = |v: Value| v.to_string().into_bytes();
    match simulate {
        Simulate::Timeout => Call::Ambiguous("provider timed out".into()),
        Simulate::Rejected => Call::Rejected(Response::new(
            502,
            body(json!({
                "state": "failed_at_provider",
                "outcome": {"provider": "rejected", "reason": "simulated rejection"},
            })),
        )),
        Simulate::Success | Simulate::CredentialError => {
            let receipt = format!("rcpt-{:x}", Sha256::digest(key.encode().as_bytes()));
            Call::Succeeded(Response::new(
                200,
                body(json!({"provider": "ok", "receipt": receipt})),
            ))
        }
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

/// The service's periodic work, each at its own period, from start until
/// the gate drains:
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
    tokio::join!(reconcile, sweep, purge);
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

/// Logs what startup recovery resolved; a failure stops the start.
fn recovered(
    result: Result<Vec<ate_ledger::Record>, ate_ledger::Error>,
) -> Result<(), ConfigError> {
    match result {
        Ok(r) if !r.is_empty() => {
            tracing::warn!(count = r.len(), "recovered open attempts");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ConfigError::Other(format!("ledger recovery failed: {e}"))),
    }
}

/// Every value a query gives for `name`, in order.
pub fn values<'a>(query: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    query
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The most a 409 (a call with this key in flight) tells a client to wait.
const CONFLICT_RETRY_SECS: u64 = 2;

/// The caller identity for rate limits, from every `X-Caller` value of the
/// request: `caller:` and that header, else (when the request has none)
/// `ip:` and the client IP (`client_ip`: the rate-limit crate's
/// [`Caller::client_ip`](ate_ratelimit::http::Caller::client_ip), the peer
/// or, behind `ATE_TRUSTED_PROXIES`, the client they forwarded for).
///
/// A header that is there but unusable (empty, longer than 128 bytes, not
/// visible ASCII, or given twice) is an error for a 400, never a quiet
/// fall back to the peer IP: behind a proxy that would put the caller in
/// the window every other such caller shares.
pub fn caller_key(
    x_caller: &[&[u8]],
    client_ip: impl FnOnce() -> Result<String, KeyError>,
) -> Result<String, KeyError> {
    match one_header("X-Caller", x_caller, 128).map_err(|message| KeyError::Refused { message })? {
        Some(c) => Ok(format!("caller:{c}")),
        None => client_ip().map(|ip| format!("ip:{ip}")),
    }
}

/// The one `Idempotency-Key` of a request, from every value it carries.
fn idempotency_key_of<'a>(values: &[&'a [u8]]) -> Result<&'a str, String> {
    one_header("Idempotency-Key", values, 256)?.ok_or_else(|| {
        "an Idempotency-Key header (1-256 visible ASCII characters) is required".to_owned()
    })
}

/// The value of header `name` from every value a request carries for it:
/// `None` without one, else exactly one header line of 1 to `max` visible
/// ASCII characters (spaces inside allowed).
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
    if let Some(at) = value.iter().position(|b| !(b' '..=b'~').contains(b)) {
        return Err(format!(
            "the {name} header must be visible ASCII; byte {at} is 0x{:02x}",
            value[at]
        ));
    }
    // Checked above: every byte is ASCII.
    std::str::from_utf8(value)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The token of an `Authorization: Bearer TOKEN` header. The scheme is
/// case-insensitive (RFC 9110, section 11.1).
fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim_start();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether `given` is `secret`, in a time that does not depend on how much
/// of it a guess got right: the digests are compared, not the strings (a
/// string comparison stops at the first differing byte).
fn same_secret(given: &str, secret: &str) -> bool {
    Sha256::digest(given.as_bytes()) == Sha256::digest(secret.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_take_the_scheme_in_any_case() {
        for (header, token) in [
            ("Bearer t0k", Some("t0k")),
            ("bearer t0k", Some("t0k")),
            ("BEARER   t0k", Some("t0k")),
            ("Basic dTpw", None),
            ("Bearer", None),
            ("Bearer ", None),
            ("Bearert0k", None),
        ] {
            assert_eq!(bearer_token(Some(header)), token, "{header:?}");
        }
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn a_peer_is_one_caller_however_its_address_is_written() {
        use ate_ratelimit::http::{TrustedProxies, client_ip};
        use std::net::IpAddr;
        // A dual-stack listener sees an IPv4 client as ::ffff:a.b.c.d; it
        // must share the window it has when it connects over IPv4.
        let none = TrustedProxies::none();
        let key = |peer: &str, x_caller: &[&[u8]]| {
            let peer: IpAddr = peer.parse().unwrap();
            caller_key(x_caller, || {
                client_ip(peer, [], [], &none).map(|ip| ip.to_string())
            })
        };
        assert_eq!(key("10.0.0.7", &[]).unwrap(), "ip:10.0.0.7");
        assert_eq!(key("::ffff:10.0.0.7", &[]).unwrap(), "ip:10.0.0.7");
        assert_eq!(key("10.0.0.7", &[b"svc-a"]).unwrap(), "caller:svc-a");
        let twice = key("10.0.0.7", &[b"a", b"b"]).unwrap_err().to_string();
        assert!(
            twice.contains("X-Caller") && twice.contains("has 2"),
            "{twice}"
        );
    }

    #[test]
    fn same_secret_is_equality() {
        assert!(same_secret("t0k", "t0k"));
        assert!(!same_secret("t0", "t0k"));
        assert!(!same_secret("t0K", "t0k"));
        assert!(!same_secret("", "t0k"));
    }
}
