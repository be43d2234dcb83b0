//! What the tower layer and the Actix middleware share: who a request is
//! ([`Caller`]), which limits its route checks, and the answer, written
//! once for both frameworks.

use std::net::IpAddr;

use bytes::Bytes;
use std::num::NonZeroU32;
use std::sync::Arc;

use crate::http::{ClientIp, KeyError, policy_field, ratelimit_field, write_ratelimit_field};
use crate::{Combined, Decision, LimitId, Limits, Scope};

/// A request head the limits can read: its header values and the peer
/// address of its connection. Implemented for `http::request::Parts`
/// (feature `tower`) and Actix's `HttpRequest` (feature `actix`).
pub trait Head {
    /// Every value of header `name` (lowercase), in order.
    fn header_values(&self, name: &str) -> Vec<&[u8]>;
    /// The peer address the server recorded, if it did.
    fn peer(&self) -> Option<IpAddr>;
}

type PeerFn<R> = Arc<dyn Fn(&R) -> Option<IpAddr> + Send + Sync>;
type KeyFn<R> = Arc<dyn Fn(&R) -> Result<String, KeyError> + Send + Sync>;

/// Who a request is, for the limits: its key. `R` is the framework's
/// request head ([`Head`]).
pub struct Caller<R> {
    kind: CallerKind<R>,
    peer: PeerFn<R>,
}

enum CallerKind<R> {
    ClientIp(ClientIp),
    Header(String),
    Custom(KeyFn<R>),
}

impl<R> Clone for Caller<R> {
    fn clone(&self) -> Self {
        let kind = match &self.kind {
            CallerKind::ClientIp(c) => CallerKind::ClientIp(c.clone()),
            CallerKind::Header(h) => CallerKind::Header(h.clone()),
            CallerKind::Custom(f) => CallerKind::Custom(f.clone()),
        };
        Self {
            kind,
            peer: self.peer.clone(),
        }
    }
}

impl<R> std::fmt::Debug for Caller<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            CallerKind::ClientIp(c) => format!("{c:?}"),
            CallerKind::Header(h) => format!("header {h}"),
            CallerKind::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("Caller").field("kind", &kind).finish()
    }
}

impl<R: Head + 'static> Default for Caller<R> {
    fn default() -> Self {
        Self::peer()
    }
}

impl<R: Head + 'static> Caller<R> {
    fn of(kind: CallerKind<R>) -> Self {
        Self {
            kind,
            peer: Arc::new(|r: &R| r.peer()),
        }
    }

    /// The peer's IP address (the default; IPv6 peers by /64). Behind a
    /// proxy every client shares the proxy's address: use
    /// [`client_ip`](Self::client_ip).
    pub fn peer() -> Self {
        Self::of(CallerKind::ClientIp(ClientIp::peer()))
    }

    /// The client's address as `client_ip` reads it
    /// ([`ClientIp::key`]): from the source the operator named, through
    /// trusted proxies only, IPv6 callers by prefix. Never the
    /// client-controlled leftmost entry on its own.
    pub fn client_ip(client_ip: ClientIp) -> Self {
        Self::of(CallerKind::ClientIp(client_ip))
    }

    /// A header's value (an API key): given once, 1-256 visible ASCII
    /// characters, else 400.
    pub fn header(name: impl AsRef<str>) -> Self {
        Self::of(CallerKind::Header(name.as_ref().to_ascii_lowercase()))
    }

    /// Your own rule (say, the authenticated account); its
    /// [`KeyError::Refused`] message is the 400's.
    pub fn custom(key: impl Fn(&R) -> Result<String, KeyError> + Send + Sync + 'static) -> Self {
        Self::of(CallerKind::Custom(Arc::new(key)))
    }

    /// Where the peer address comes from, if not where [`Head::peer`]
    /// finds it (axum: its `ConnectInfo` extension).
    #[must_use]
    pub fn peer_from(self, peer: impl Fn(&R) -> Option<IpAddr> + Send + Sync + 'static) -> Self {
        Self {
            peer: Arc::new(peer),
            ..self
        }
    }

    /// The key of the request whose head is `head`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the request does not say who it is as required.
    pub fn key(&self, head: &R) -> Result<String, KeyError> {
        self.key_text(head).map(|k| k.as_str().to_owned())
    }

    /// [`key`](Self::key), without a heap allocation for an address key.
    pub(crate) fn key_text(&self, head: &R) -> Result<KeyText, KeyError> {
        if let CallerKind::ClientIp(client_ip) = &self.kind {
            let peer = (self.peer)(head).ok_or(KeyError::NoPeer)?;
            let ip = match client_ip.header_name() {
                None => peer,
                Some(name) => client_ip.address(peer, head.header_values(name))?,
            };
            return Ok(client_ip.key_text(ip));
        }
        self.slow_key(head).map(KeyText::from)
    }

    /// The keys other than an address's (which `key_text` writes inline).
    fn slow_key(&self, head: &R) -> Result<String, KeyError> {
        match &self.kind {
            CallerKind::ClientIp(_) => self.key_text(head).map(|k| k.as_str().to_owned()),
            CallerKind::Header(name) => match head.header_values(name).as_slice() {
                [v] if (1..=256).contains(&v.len()) && v.iter().all(u8::is_ascii_graphic) => {
                    Ok(String::from_utf8_lossy(v).into_owned())
                }
                _ => Err(KeyError::BadHeader {
                    header: name.clone(),
                }),
            },
            CallerKind::Custom(key) => key(head),
        }
    }
}

/// A caller's key as text, inline when it is short (an IP address or a
/// /64: up to 48 bytes), so keying a request by its address allocates
/// nothing.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KeyText(smallvec::SmallVec<[u8; 48]>);

impl KeyText {
    pub(crate) fn as_str(&self) -> &str {
        // Only ever written from `&str`s (`From<String>`, `fmt::Write`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// `value`'s `Display`, written without a heap allocation while it
    /// fits inline.
    pub(crate) fn display(value: impl std::fmt::Display) -> Self {
        use std::fmt::Write;
        let mut text = Self(smallvec::SmallVec::new());
        let _ = write!(text, "{value}");
        text
    }
}

impl std::fmt::Write for KeyText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A header field value being written, inline up to 128 bytes.
struct FieldText(smallvec::SmallVec<[u8; 128]>);

impl std::fmt::Write for FieldText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl From<String> for KeyText {
    fn from(s: String) -> Self {
        Self(smallvec::SmallVec::from_vec(s.into_bytes()))
    }
}

impl std::fmt::Debug for KeyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// What a limited request was allowed with, in its extensions for the
/// handler (axum: `Extension<Checked>`; Actix: `web::ReqData<Checked>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    key: KeyText,
    remaining: u32,
    shadowed: bool,
}

impl Checked {
    /// The caller's key the limits were checked under.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// Attempts left in the tightest of the route's limits.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Whether limits in shadow mode would have refused the request (it
    /// was let through: a shadow limit never refuses).
    pub fn shadow_denied(&self) -> bool {
        self.shadowed
    }
}

type DecisionFn = Arc<dyn Fn(&str, &Combined<'_>) + Send + Sync>;

/// Which limits a route checks, and what one request costs.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The exact path; `None`: every request the layer sees (a layer on
    /// one route of the framework's router).
    path: Option<Box<str>>,
    /// Every limit the route checks, as bound.
    all: Box<[LimitId]>,
    /// Those of `all` that are enforced: they alone decide, record (by
    /// the set's policy, as one check) and shape the answer.
    ids: Box<[LimitId]>,
    /// Those of `all` in shadow mode: checked apart, as their own check,
    /// so that they never change what the enforced ones record or answer.
    shadow_ids: Box<[LimitId]>,
    cost: NonZeroU32,
    /// The `RateLimit-Policy` field for the enforced limits, written once.
    policy: Bytes,
}

/// The routes, the limits and the decision hook: a layer's whole
/// configuration but the caller.
pub(crate) struct Rules<C: crate::clock::Clock + Clone> {
    limits: Arc<Limits<C>>,
    routes: Vec<Route>,
    on_decision: Option<DecisionFn>,
    /// The names of the limits in shadow mode.
    shadow: Vec<Box<str>>,
}

impl<C: crate::clock::Clock + Clone> Clone for Rules<C> {
    fn clone(&self) -> Self {
        Self {
            limits: self.limits.clone(),
            routes: self.routes.clone(),
            on_decision: self.on_decision.clone(),
            shadow: self.shadow.clone(),
        }
    }
}

impl<C: crate::clock::Clock + Clone> std::fmt::Debug for Rules<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("routes", &self.routes)
            .field("on_decision", &self.on_decision.is_some())
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

/// A response the layer writes itself: status, JSON body, headers.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) headers: Vec<(&'static str, String)>,
}

/// What to do with a request.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Call the service, with `Checked` in the request and the
    /// `RateLimit-Policy` and `RateLimit` fields added to its response.
    Allow {
        checked: Checked,
        policy: Bytes,
        ratelimit: Bytes,
    },
    /// Answer this instead.
    Refuse(Refusal),
}

pub(crate) const RATELIMIT_POLICY: &str = "ratelimit-policy";
pub(crate) const RATELIMIT: &str = "ratelimit";

impl<C: crate::clock::Clock + Clone> Rules<C> {
    pub(crate) fn new(limits: Arc<Limits<C>>) -> Self {
        Self {
            limits,
            routes: Vec::new(),
            on_decision: None,
            shadow: Vec::new(),
        }
    }

    /// See the layers' `shadow`.
    pub(crate) fn shadow(&mut self, ids: &[LimitId]) {
        let set = self.limits.set();
        for &id in ids {
            let name: Box<str> = set.name(id).into();
            if !self.shadow.contains(&name) {
                self.shadow.push(name);
            }
        }
        // Routes bound before this call split again.
        let routes = std::mem::take(&mut self.routes);
        for r in routes {
            self.push_route(r.path, &r.all, r.cost);
        }
    }

    fn is_shadow(&self, id: LimitId) -> bool {
        let name = self.limits.set().name(id);
        self.shadow.iter().any(|s| **s == *name)
    }

    /// Adds a route, its limits split into enforced and shadow ones.
    fn push_route(&mut self, path: Option<Box<str>>, all: &[LimitId], cost: NonZeroU32) {
        let (shadow_ids, ids): (Vec<LimitId>, Vec<LimitId>) =
            all.iter().partition(|&&id| self.is_shadow(id));
        let set = self.limits.set();
        let policy = policy_field(
            ids.iter()
                .map(|&id| (set.name(id), set.limiter(id).quota())),
        );
        self.routes.push(Route {
            path,
            all: all.into(),
            ids: ids.into(),
            shadow_ids: shadow_ids.into(),
            cost,
            policy: Bytes::from(policy),
        });
    }

    /// See the layers' `route` (`path`) and `limit` (`None`).
    pub(crate) fn route(&mut self, path: Option<&str>, ids: &[LimitId], cost: NonZeroU32) {
        let shown = path.unwrap_or("(every request)");
        let set = self.limits.set();
        for &id in ids {
            let limit = set.limiter(id).quota().limit();
            assert!(
                cost <= limit,
                "route {shown}: a cost of {cost} can never fit limit {:?} of {limit}",
                set.name(id)
            );
        }
        self.push_route(path.map(Into::into), ids, cost);
    }

    pub(crate) fn on_decision(
        &mut self,
        hook: impl Fn(&str, &Combined<'_>) + Send + Sync + 'static,
    ) {
        self.on_decision = Some(Arc::new(hook));
    }

    /// The route `path` checks, if any (its index, for [`check`](Self::check)).
    pub(crate) fn find(&self, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| r.path.as_deref().is_none_or(|p| p == path))
    }

    /// Decides a request to route `at` (from [`find`](Self::find)) by the
    /// caller `key` (or why it has none) at once where the limits are in
    /// process; `Err(key)` where the shared store must be asked
    /// ([`check`](Self::check)).
    pub(crate) fn check_now(
        &self,
        at: usize,
        key: Result<KeyText, KeyError>,
    ) -> Result<Verdict, KeyText> {
        let key = match key {
            Ok(key) => key,
            Err(e) => {
                return Ok(Verdict::Refuse(refusal(
                    400,
                    json_error(&e.to_string()),
                    Vec::new(),
                )));
            }
        };
        let Some(route) = self.routes.get(at) else {
            return Ok(no_route());
        };
        // In process or not is the store's, the same for both checks.
        let Some(decision) = self.check_ids_now(&route.ids, key.as_str(), route.cost) else {
            return Err(key);
        };
        let shadow = self.check_ids_now(&route.shadow_ids, key.as_str(), route.cost);
        let shadow = shadow.unwrap_or(Ok(None));
        Ok(self
            .verdict(route, key.as_str(), decision, shadow)
            .with_key(key))
    }

    /// One check of `ids` in process (`Ok(None)` for no limits; `None`
    /// where the store must be asked).
    fn check_ids_now(
        &self,
        ids: &[LimitId],
        key: &str,
        cost: NonZeroU32,
    ) -> Option<Result<Option<Combined<'_>>, crate::Error>> {
        if ids.is_empty() {
            return Some(Ok(None));
        }
        self.limits.check_n_now(ids, key, cost).map(|d| d.map(Some))
    }

    /// One check of `ids`, asking the store where there is one.
    async fn check_ids(
        &self,
        ids: &[LimitId],
        key: &str,
        cost: NonZeroU32,
    ) -> Result<Option<Combined<'_>>, crate::Error> {
        if ids.is_empty() {
            return Ok(None);
        }
        self.limits.check_n(ids, key, cost).await.map(Some)
    }

    /// Decides a request to route `at` by the caller `key`, asking the
    /// shared store where there is one.
    pub(crate) async fn check(&self, at: usize, key: KeyText) -> Verdict {
        let Some(route) = self.routes.get(at) else {
            return no_route();
        };
        let decision = self.check_ids(&route.ids, key.as_str(), route.cost).await;
        let shadow = self
            .check_ids(&route.shadow_ids, key.as_str(), route.cost)
            .await;
        self.verdict(route, key.as_str(), decision, shadow)
            .with_key(key)
    }

    /// The verdict of the enforced limits' check (`decision`; `None`: the
    /// route has none), with the shadow limits' own check beside it, which
    /// is reported and never shapes the answer.
    fn verdict<'a>(
        &self,
        route: &Route,
        key: &str,
        decision: Result<Option<Combined<'a>>, crate::Error>,
        shadow: Result<Option<Combined<'a>>, crate::Error>,
    ) -> Verdict {
        let (decision, shadow) = match (decision, shadow) {
            (Ok(d), Ok(s)) => (d, s),
            // Not reached: `route` refuses such a cost when built.
            (Err(e), _) | (_, Err(e)) => {
                return Verdict::Refuse(refusal(500, json_error(&e.to_string()), Vec::new()));
            }
        };
        if let Some(hook) = &self.on_decision {
            for d in decision.iter().chain(shadow.iter()) {
                hook(key, d);
            }
        }
        // Shadow limits that would have refused: reported, let through.
        let shadowed = shadow.as_ref().is_some_and(|s| !s.is_allowed());
        let Some(decision) = decision else {
            // Shadow limits alone: no enforced field to send.
            return Verdict::Allow {
                checked: Checked {
                    key: KeyText(smallvec::SmallVec::new()),
                    remaining: u32::MAX,
                    shadowed,
                },
                policy: Bytes::new(),
                ratelimit: Bytes::new(),
            };
        };
        if decision.is_allowed() {
            return Verdict::Allow {
                checked: Checked {
                    key: KeyText(smallvec::SmallVec::new()),
                    remaining: decision.remaining(),
                    shadowed,
                },
                policy: route.policy.clone(),
                // Written on the stack, copied once.
                ratelimit: {
                    let mut field = FieldText(smallvec::SmallVec::new());
                    write_ratelimit_field(&mut field, &decision);
                    Bytes::copy_from_slice(&field.0)
                },
            };
        }
        let ratelimit = ratelimit_field(&decision);
        let policy = String::from_utf8_lossy(&route.policy).into_owned();
        Verdict::Refuse(denied(
            &decision,
            [(RATELIMIT_POLICY, policy), (RATELIMIT, ratelimit)],
        ))
    }
}

impl Verdict {
    /// The verdict with the caller's key in its `Checked`.
    fn with_key(mut self, key: KeyText) -> Self {
        if let Verdict::Allow { checked, .. } = &mut self {
            checked.key = key;
        }
        self
    }
}

fn no_route() -> Verdict {
    Verdict::Refuse(refusal(500, json_error("no such route"), Vec::new()))
}

fn refusal(status: u16, body: String, headers: Vec<(&'static str, String)>) -> Refusal {
    Refusal {
        status,
        body,
        headers,
    }
}

/// A JSON string's contents for `s` (quotes, backslashes and controls
/// escaped).
fn json_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

fn json_error(message: &str) -> String {
    format!(r#"{{"error":"{}"}}"#, json_escaped(message))
}

/// The answer to a request a limit turned away.
fn denied(decision: &Combined<'_>, fields: [(&'static str, String); 2]) -> Refusal {
    let secs = decision.retry_after_secs().unwrap_or(1);
    let table_full = decision
        .decisions()
        .iter()
        .any(|(_, d)| matches!(d, Decision::KeyTableFull { .. }));
    let (status, error) = if decision.scope() == Scope::Unavailable {
        (503, "rate_limit_store_unavailable")
    } else if table_full {
        (503, "too_many_callers")
    } else {
        (429, "rate_limited")
    };
    let denied_by: Vec<String> = decision
        .denied_by()
        .iter()
        .map(|n| format!("\"{}\"", json_escaped(n)))
        .collect();
    let body = format!(
        r#"{{"error":"{error}","denied_by":[{}],"retry_after_secs":{secs}}}"#,
        denied_by.join(",")
    );
    let [policy, ratelimit] = fields;
    refusal(
        status,
        body,
        vec![("retry-after", secs.to_string()), policy, ratelimit],
    )
}
