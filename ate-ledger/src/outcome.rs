//! What [`AsyncLedger::execute`](crate::AsyncLedger::execute) stores and
//! answers: the provider's response (status, selected headers, body) so a
//! replay is byte-identical to the first answer, and a stable fingerprint
//! of a JSON request.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::{Fingerprint, Key};

/// A response to record and replay: status, the headers worth replaying
/// (say `Content-Type` and a receipt id; not `Date`), body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// Selected headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body, exactly.
    pub body: Vec<u8>,
}

/// The stored form: the body as text when it is UTF-8 (readable in the
/// database), else hex.
#[derive(Serialize, Deserialize)]
struct Stored {
    status: u16,
    headers: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    hex: Option<String>,
}

impl Response {
    /// A response with no headers.
    pub fn new(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// With one more header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub(crate) fn encode(&self) -> String {
        let (text, hex) = match std::str::from_utf8(&self.body) {
            Ok(t) => (Some(t.to_owned()), None),
            Err(_) => (
                None,
                Some(self.body.iter().map(|b| format!("{b:02x}")).collect()),
            ),
        };
        let stored = Stored {
            status: self.status,
            headers: self.headers.clone(),
            text,
            hex,
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    pub(crate) fn decode(key: &Key, stored: &str) -> Result<Self, Error> {
        let corrupt = |detail: String| Error::Corrupt {
            what: format!("the recorded response of {key}"),
            detail,
        };
        let s: Stored = serde_json::from_str(stored).map_err(|e| corrupt(e.to_string()))?;
        let body = match (s.text, s.hex) {
            (Some(t), None) => t.into_bytes(),
            (None, Some(h)) => (0..h.len())
                .step_by(2)
                .map(|i| {
                    h.get(i..i + 2)
                        .and_then(|b| u8::from_str_radix(b, 16).ok())
                        .ok_or_else(|| corrupt(format!("bad hex at {i}")))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(corrupt("neither text nor hex".into())),
        };
        Ok(Self {
            status: s.status,
            headers: s.headers,
            body,
        })
    }
}

/// What the call [`execute`](crate::AsyncLedger::execute) runs returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Call {
    /// The provider succeeded: recorded, replayed to repeats.
    Succeeded(Response),
    /// The provider definitively refused: recorded, replayed.
    Rejected(Response),
    /// Failed before anything was sent (a missing credential): a retry
    /// runs the call again. After a dispatch it counts as ambiguous.
    PreProvider(String),
    /// Sent, and no answer (a timeout, a reset): never run again.
    Ambiguous(String),
    /// Sent, and the provider answered that it did not process it: `429
    /// Too Many Requests`, `408 Request Timeout`, a `503` with
    /// `Retry-After`. Like [`PreProvider`](Self::PreProvider): recorded as
    /// a pre-provider failure with the try's dispatch mark taken back, so
    /// the key stays revivable and a retry runs the call again, where
    /// recording the answer would replay a refusal that decided nothing.
    /// Only for answers that say so: anything the provider may have acted
    /// on is [`Rejected`](Self::Rejected) or [`Ambiguous`](Self::Ambiguous).
    NotProcessed(String),
}

/// What [`execute`](crate::AsyncLedger::execute) answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Executed {
    /// The call ran now. `recorded` is false when its answer could not be
    /// recorded (the store failed at the close, or the lease was taken
    /// over): the answer is the provider's all the same, and the attempt
    /// is resolved as provider-unavailable when its lease expires.
    Answered {
        /// The provider's answer.
        response: Response,
        /// Whether it was recorded for replays.
        recorded: bool,
    },
    /// A repeat: the first call's recorded answer, byte for byte.
    Replayed(Response),
    /// The call failed before the provider; a retry runs it again.
    FailedPreProvider {
        /// Why.
        reason: String,
    },
    /// A call was sent and got no answer (now or before): it is never run
    /// again, and its outcome is unknown.
    ProviderUnavailable {
        /// Why.
        reason: String,
        /// Whether this is the ledger's record of an earlier call (a
        /// repeat, or this call's attempt resolved by another worker while
        /// it held no lease) rather than this call's own failure.
        replayed: bool,
    },
}

/// A step [`execute`](crate::AsyncLedger::execute) took on the ledger,
/// as told to the observer of [`AsyncLedger::observe`](crate::AsyncLedger::observe)
/// (a metrics counter, say), once each time it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// A new attempt began.
    Begun,
    /// A repeat was answered with the recorded outcome.
    Replayed,
    /// An attempt that failed before the provider began a new try.
    Revived,
    /// A try of this owner whose begin lost its answer was taken over.
    Adopted,
    /// The try was marked dispatched: the request may now be sent.
    Dispatched,
    /// Closed with the provider's success.
    Succeeded,
    /// Closed with the provider's refusal.
    FailedAtProvider,
    /// Closed as failed before the provider (revivable).
    FailedPreProvider,
    /// Closed as sent without an answer (never run again).
    ProviderUnavailable,
}

impl Step {
    /// Its name in snake case (`"dispatched"`, `"failed_at_provider"`):
    /// the closing steps are named as [`State::name`](crate::State::name)
    /// names the state they close in.
    pub fn name(self) -> &'static str {
        match self {
            Self::Begun => "begun",
            Self::Replayed => "replayed",
            Self::Revived => "revived",
            Self::Adopted => "adopted",
            Self::Dispatched => "dispatched",
            Self::Succeeded => "succeeded",
            Self::FailedAtProvider => "failed_at_provider",
            Self::FailedPreProvider => "failed_pre_provider",
            Self::ProviderUnavailable => "provider_unavailable",
        }
    }

    /// The step that closes in `state`; `None` for an open one.
    pub(crate) fn closing(state: &crate::State) -> Option<Self> {
        use crate::State;
        Some(match state {
            State::InFlight => return None,
            State::Succeeded { .. } => Self::Succeeded,
            State::FailedAtProvider { .. } => Self::FailedAtProvider,
            State::FailedPreProvider { .. } => Self::FailedPreProvider,
            State::ProviderUnavailable { .. } => Self::ProviderUnavailable,
        })
    }
}

impl Fingerprint {
    /// A stable fingerprint of a JSON request: SHA-256 of its canonical
    /// form, `sha256:HEX`. Object key order, whitespace and number
    /// spelling (`1`, `1.0`, `1e0`) do not change it; any other change of
    /// a value does.
    ///
    /// Numbers are read as IEEE-754 doubles, as JavaScript and RFC 8785
    /// (JSON canonicalization) read them, so a number means the same
    /// whatever a client's JSON library re-serialises it as, at every
    /// magnitude: `9007199254740993`, `9007199254740992.0` and `9.007199254740992e15`
    /// are one fingerprint (JavaScript cannot tell them apart either).
    /// Two integers beyond ±2^53 that round to the same double are thus the
    /// same request: send identifiers of that size as strings.
    ///
    /// ```
    /// use ate_ledger::Fingerprint;
    /// use serde_json::json;
    ///
    /// let a = Fingerprint::of_json(&json!({"amount": 1, "to": "x"}));
    /// let b = Fingerprint::of_json(&serde_json::from_str(r#"{ "to":"x", "amount":1.0 }"#).unwrap());
    /// assert_eq!(a, b);
    /// assert_ne!(a, Fingerprint::of_json(&json!({"amount": 2, "to": "x"})));
    /// ```
    pub fn of_json(value: &serde_json::Value) -> Self {
        let mut canonical = String::new();
        write_canonical(value, &mut canonical);
        let digest = Sha256::digest(canonical.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Self(format!("sha256:{hex}"))
    }
}

/// `value` with sorted keys and one spelling per number: every number as
/// the double it rounds to (JavaScript's and RFC 8785's reading), written
/// as an integer when it is integral within ±2^53, else as Rust's shortest
/// `f64` in exponent form.
fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
            // serde_json reads an integer into i64 or u64 exactly and
            // anything else into the nearest f64; an integer beyond 2^53
            // must round as its `1.0`-spelled twin did.
            let f = match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i as f64,
                (None, Some(u)) => u as f64,
                (None, None) => n.as_f64().unwrap_or(f64::NAN),
            };
            if f.fract() == 0.0 && f.abs() < EXACT {
                out.push_str(&format!("{}", f as i64));
            } else {
                out.push_str(&format!("{f:e}"));
            }
        }
        Value::String(s) => out.push_str(&serde_json::Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String((*k).clone()).to_string());
                out.push(':');
                write_canonical(&map[*k], out);
            }
            out.push('}');
        }
    }
}
