//! The rate-limited routes (`/notify`, `/prompt`): the caller identity,
//! the limits the layer checks, and what each decision records.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ate_ratelimit::http::KeyError;
use ate_ratelimit::{LimitId, Limits, Scope};
use serde_json::json;

use super::{ApiResponse, AppState, one_header};

impl AppState {
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
            let result = if d.is_allowed() {
                "allowed"
            } else if self.config.ratelimit_shadow.contains(name) {
                "shadow_denied"
            } else {
                "denied"
            };
            self.metrics.decision(name, result);
        }
    }

    /// The limits in shadow mode (`ATE_RATELIMIT_SHADOW`).
    pub fn shadowed(&self) -> Vec<LimitId> {
        self.config
            .ratelimit_shadow
            .iter()
            .filter_map(|name| self.limits.set().id(name))
            .collect()
    }

    /// Who a request is ([`caller_key`]) from its `X-Caller` values, its
    /// peer and the values of the header the client address is read from
    /// (`ATE_CLIENT_IP_SOURCE`, believed only from `ATE_TRUSTED_PROXIES`;
    /// see [`client_ip_header`](Self::client_ip_header)): the rate limits'
    /// caller, and the scope of its idempotency keys.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] for the 400: an unusable `X-Caller`, a malformed
    /// forwarding header from a trusted proxy, an unknown peer.
    pub fn caller_of(
        &self,
        x_caller: &[&[u8]],
        peer: Option<std::net::IpAddr>,
        source_values: &[&[u8]],
    ) -> Result<String, KeyError> {
        let trusted = self.trusts(peer);
        caller_key(x_caller, trusted, || {
            let peer = peer.ok_or(KeyError::NoPeer)?;
            self.config
                .client_ip
                .key(peer, source_values.iter().copied())
        })
    }

    /// Whether `peer` is one of `ATE_TRUSTED_PROXIES`, whose `X-Caller`
    /// (set by an authenticating edge) is believed.
    pub fn trusts(&self, peer: Option<std::net::IpAddr>) -> bool {
        trusted_peer(&self.config.client_ip, peer)
    }

    /// The header the client address is read from, if any (lowercase).
    pub fn client_ip_header(&self) -> &str {
        self.config.client_ip.header_name().unwrap_or("")
    }

    /// The limits the rate-limit layer checks, and the routes it checks
    /// them on: `/notify` and `/prompt`, each with the shared bucket, and
    /// `/invoke` with its own limit alone, which also bounds what one
    /// caller can keep in the ledger: at most `ATE_INVOKE_PER_MIN` records
    /// a minute.
    pub fn limits(&self) -> (Arc<Limits>, [(&'static str, Vec<LimitId>); 3]) {
        (
            self.limits.clone(),
            [
                ("/notify", vec![self.notify, self.bucket]),
                ("/prompt", vec![self.prompt, self.bucket]),
                ("/invoke", vec![self.invoke]),
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

    /// At startup: whether the limits' shared store answers, logged.
    pub(super) async fn probe_store(&self) {
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
}

/// Whether `peer` is one of the proxies `client_ip` trusts
/// (`ATE_TRUSTED_PROXIES`); an IPv4-mapped IPv6 peer is read as IPv4.
pub fn trusted_peer(
    client_ip: &ate_ratelimit::http::ClientIp,
    peer: Option<std::net::IpAddr>,
) -> bool {
    peer.is_some_and(|p| client_ip.trusted().contains(p.to_canonical()))
}

/// The caller identity for rate limits and idempotency keys: from a
/// trusted proxy (`trusted`: the peer is in `ATE_TRUSTED_PROXIES`, an edge
/// that authenticated the caller and set the header), `caller:` and its
/// `X-Caller` value; else, or when the request has none, `ip:` and the
/// client IP (`client_ip`: the rate-limit crate's
/// [`Caller::client_ip`](ate_ratelimit::http::Caller::client_ip), the peer
/// or, behind `ATE_TRUSTED_PROXIES`, the client they forwarded for).
///
/// A client's own `X-Caller` never counts: believing it would let one
/// client take another's window, spread itself over endless windows, fill
/// the caller table, and replay another caller's stored `/invoke` answer.
///
/// From a trusted proxy, a header that is there but unusable (empty,
/// longer than 128 bytes, not visible ASCII, or given twice) is an error
/// for a 400, never a quiet fall back to the peer IP: that would put the
/// caller in the window every other such caller shares.
pub fn caller_key(
    x_caller: &[&[u8]],
    trusted: bool,
    client_ip: impl FnOnce() -> Result<String, KeyError>,
) -> Result<String, KeyError> {
    if !trusted {
        return client_ip().map(|ip| format!("ip:{ip}"));
    }
    match one_header("X-Caller", x_caller, 128).map_err(|message| KeyError::Refused { message })? {
        Some(c) => Ok(format!("caller:{c}")),
        None => client_ip().map(|ip| format!("ip:{ip}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_one_caller_however_its_address_is_written() {
        use ate_ratelimit::http::ClientIp;
        use std::net::IpAddr;
        // A dual-stack listener sees an IPv4 client as ::ffff:a.b.c.d; it
        // must share the window it has when it connects over IPv4.
        let client_ip = ClientIp::peer();
        let key = |peer: &str, x_caller: &[&[u8]]| {
            let peer: IpAddr = peer.parse().unwrap();
            caller_key(x_caller, true, || client_ip.key(peer, []))
        };
        assert_eq!(key("10.0.0.7", &[]).unwrap(), "ip:10.0.0.7");
        assert_eq!(key("::ffff:10.0.0.7", &[]).unwrap(), "ip:10.0.0.7");
        assert_eq!(key("10.0.0.7", &[b"svc-a"]).unwrap(), "caller:svc-a");
        // From an untrusted peer the header is the client's own: ignored.
        let untrusted = caller_key(&[b"alice"], false, || Ok("10.0.0.7".into()));
        assert_eq!(untrusted.unwrap(), "ip:10.0.0.7");
        let twice = key("10.0.0.7", &[b"a", b"b"]).unwrap_err().to_string();
        assert!(
            twice.contains("X-Caller") && twice.contains("has 2"),
            "{twice}"
        );
    }
}
