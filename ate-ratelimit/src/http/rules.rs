//! Which limits a route checks, and the answer to a request, written
//! once for the tower layer and the Actix middleware: the [`Verdict`],
//! with [`Checked`] in an allowed request and the [`Refusal`] otherwise.

use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;

use super::fields::{RATELIMIT, RATELIMIT_POLICY, policy_field, ratelimit_bytes, ratelimit_field};
use super::key::{CallerKey, KeyError};
use crate::{Combined, Decision, LimitId, Limits, Scope};

/// What a limited request was allowed with, in its extensions for the
/// handler (axum: `Extension<Checked>`; Actix: `web::ReqData<Checked>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    key: CallerKey,
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
        key: Result<CallerKey, KeyError>,
    ) -> Result<Verdict, CallerKey> {
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
        Ok(self.verdict(route, key, decision, shadow))
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
    pub(crate) async fn check(&self, at: usize, key: CallerKey) -> Verdict {
        let Some(route) = self.routes.get(at) else {
            return no_route();
        };
        let decision = self.check_ids(&route.ids, key.as_str(), route.cost).await;
        let shadow = self
            .check_ids(&route.shadow_ids, key.as_str(), route.cost)
            .await;
        self.verdict(route, key, decision, shadow)
    }

    /// The verdict of the enforced limits' check (`decision`; `None`: the
    /// route has none), with the shadow limits' own check beside it, which
    /// is reported and never shapes the answer.
    fn verdict<'a>(
        &self,
        route: &Route,
        key: CallerKey,
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
                hook(key.as_str(), d);
            }
        }
        // Shadow limits that would have refused: reported, let through.
        let shadowed = shadow.as_ref().is_some_and(|s| !s.is_allowed());
        let Some(decision) = decision else {
            // Shadow limits alone: no enforced field to send.
            return Verdict::Allow {
                checked: Checked {
                    key,
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
                    key,
                    remaining: decision.remaining(),
                    shadowed,
                },
                policy: route.policy.clone(),
                ratelimit: ratelimit_bytes(&decision),
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
