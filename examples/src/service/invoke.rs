//! `POST /invoke`: the idempotent provider call on the attempt ledger.

use bytes::Bytes;

use std::sync::Arc;
use std::time::Duration;

use ate_ledger::{Call, Dispatch, Executed, Fingerprint, Key, Response};
use ate_ratelimit::http::KeyError;
use ate_readiness::Admitted;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{ApiResponse, AppState, bounded_ms, one_header};

impl AppState {
    /// Deletes ended ledger records past the retention, and logs how many.
    pub(super) async fn purge_ledger(&self) {
        match self.ledger.purge().await {
            Ok(purged) => tracing::info!(purged, "ledger records past the retention deleted"),
            Err(e) => tracing::warn!("ledger purge failed: {e}"),
        }
    }

    /// `POST /invoke`: an idempotent provider call. `idempotency_key` is
    /// every `Idempotency-Key` value of the request, as received.
    pub async fn invoke(
        self: &Arc<Self>,
        admitted: Option<Admitted>,
        caller: Result<String, KeyError>,
        idempotency_key: &[&[u8]],
        simulate: &[&[u8]],
        delay_ms: &[&[u8]],
        body: &[u8],
    ) -> ApiResponse {
        let idempotency = match idempotency_key_of(idempotency_key) {
            Ok(key) => key,
            Err(error) => return ApiResponse::json(400, json!({ "error": error })),
        };
        // Each given at most once, as every other input: two would leave
        // which one counts to the order a proxy kept.
        let (simulate, delay_ms) = match (
            one_header("X-Simulate", simulate, 64),
            one_header("X-Simulate-Delay-Ms", delay_ms, 64),
        ) {
            (Ok(simulate), Ok(delay_ms)) => (simulate, delay_ms),
            (Err(error), _) | (_, Err(error)) => {
                return ApiResponse::json(400, json!({ "error": error }));
            }
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
        if self.provider.is_some() && (simulate.is_some() || delay_ms.is_some()) {
            return ApiResponse::json(
                400,
                json!({"error": "X-Simulate and X-Simulate-Delay-Ms drive the simulated provider; \
                                 this service calls ATE_PROVIDER_URL"}),
            );
        }
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
        let key = Key::new(caller, idempotency);
        // The call runs in a task of its own: a client that hangs up (which
        // drops this request's future) must not stop it between the
        // dispatch and the close, or the provider's answer is never
        // recorded. The guard goes with it, so the shutdown waits for it.
        let this = Arc::clone(self);
        let (client_key, body) = (idempotency.to_owned(), Bytes::copy_from_slice(body));
        let call = tokio::spawn(async move {
            let owner = &this.config.worker_id;
            let executed = this
                .ledger
                .execute(&key, &fingerprint, owner, |dispatch| async {
                    match &this.provider {
                        Some(http) => http.call(dispatch, &client_key, body).await,
                        None => provider(dispatch, behaviour, delay, &key).await,
                    }
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

/// The most a 409 (a call with this key in flight) tells a client to wait.
const CONFLICT_RETRY_SECS: u64 = 2;

/// The one `Idempotency-Key` of a request, from every value it carries.
fn idempotency_key_of<'a>(values: &[&'a [u8]]) -> Result<&'a str, String> {
    one_header("Idempotency-Key", values, 256)?.ok_or_else(|| {
        "an Idempotency-Key header (1-256 visible ASCII characters) is required".to_owned()
    })
}
