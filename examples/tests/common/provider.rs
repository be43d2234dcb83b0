//! A counting provider: a real HTTP server the services call through
//! `ATE_PROVIDER_URL`, which counts the calls per `Idempotency-Key` and
//! keeps the fencing token of each. A request's JSON body may ask for an
//! answer: `{"status": 503}` answers that status, `{"delay_ms": 800}`
//! answers that late (`"slow_first": true` only the first call of a key).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// One call as the provider saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub fence: Option<String>,
    pub body: String,
}

#[derive(Clone, Default)]
struct Calls(
    Arc<Mutex<HashMap<String, Vec<Seen>>>>,
    Arc<std::sync::atomic::AtomicU16>,
);

/// The running provider; stops when dropped.
pub struct CountingProvider {
    pub addr: SocketAddr,
    calls: Calls,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for CountingProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl CountingProvider {
    /// Listening on a free loopback port.
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// Listening on `addr`.
    pub async fn start_on(addr: SocketAddr) -> Self {
        let calls = Calls::default();
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/charge", post(charge))
            .route("/health", axum::routing::get(health))
            .with_state(calls.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            calls,
            server,
        }
    }

    /// What `GET /health` answers from now on (default 200; say 401 for
    /// credentials it refuses).
    pub fn set_health(&self, status: u16) {
        self.calls
            .1
            .store(status, std::sync::atomic::Ordering::SeqCst);
    }

    /// `ATE_PROVIDER_URL` for it.
    pub fn url(&self) -> String {
        format!("http://{}/charge", self.addr)
    }

    /// The calls for `key`.
    pub fn calls(&self, key: &str) -> Vec<Seen> {
        self.calls
            .0
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// Every key called more than once, with its count.
    pub fn repeated(&self) -> Vec<(String, usize)> {
        self.calls
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, c)| c.len() > 1)
            .map(|(k, c)| (k.clone(), c.len()))
            .collect()
    }

    /// How many calls in all.
    pub fn total(&self) -> usize {
        self.calls.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

async fn health(State(calls): State<Calls>) -> StatusCode {
    match calls.1.load(std::sync::atomic::Ordering::SeqCst) {
        0 => StatusCode::OK,
        s => StatusCode::from_u16(s).unwrap_or(StatusCode::OK),
    }
}

async fn charge(
    State(calls): State<Calls>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, HeaderMap, String) {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let fence = headers
        .get("fencing-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let n = {
        let mut calls = calls.0.lock().unwrap();
        let seen = calls.entry(key.clone()).or_default();
        seen.push(Seen {
            fence: fence.clone(),
            body: body.clone(),
        });
        seen.len()
    };
    let asked: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let slow = asked["delay_ms"].as_u64().unwrap_or(0);
    if slow > 0 && (n == 1 || !asked["slow_first"].as_bool().unwrap_or(false)) {
        tokio::time::sleep(Duration::from_millis(slow)).await;
    }
    // `status_first`: the first call's status alone (a provider that
    // refuses once, then serves).
    let asked_status = if n == 1 && !asked["status_first"].is_null() {
        &asked["status_first"]
    } else {
        &asked["status"]
    };
    let status = asked_status
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let answer = serde_json::json!({"charged": key, "call": n, "fence": fence});
    let mut out = HeaderMap::new();
    if let Some(secs) = asked["retry_after"].as_u64() {
        out.insert("retry-after", secs.into());
    }
    (status, out, answer.to_string())
}
