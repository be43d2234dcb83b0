//! The objects under the generation latch (`/objects/...`) and the
//! reconciler that observes them.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ate_generation::{Decision, Latch, Observe, Writer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{ApiResponse, AppState, Object};
use crate::objects::{check_object_name, parse_object_write};

impl AppState {
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
    ///
    /// Bounded: a new object past `ATE_MAX_OBJECTS` in all, or past
    /// `ATE_MAX_OBJECTS_PER_CALLER` created by one `caller`, and a write
    /// that would take the objects past `ATE_MAX_OBJECT_BYTES` together,
    /// are refused with 507 and change nothing.
    pub fn put_object(
        &self,
        name: &str,
        caller: Result<String, ate_ratelimit::http::KeyError>,
        authorization: Option<&str>,
        body: &[u8],
    ) -> ApiResponse {
        let caller = match caller {
            Ok(c) => c,
            Err(e) => return ApiResponse::json(400, json!({"error": e.to_string()})),
        };
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
            owner: caller.clone(),
            bytes: 0,
        });
        if created && let Some(refusal) = self.no_room_for_another(&objects, &caller) {
            return refusal;
        }
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
        let before = o.bytes;
        o.bytes = o.spec.to_string().len() + o.status.to_string().len();
        let total = self.object_bytes.load(Ordering::Acquire);
        let most = self.config.max_object_bytes;
        if total - before + o.bytes > most {
            return ApiResponse::json(
                507,
                json!({"error": format!(
                    "the objects would take {} bytes, over the {most} allowed (ATE_MAX_OBJECT_BYTES)",
                    total - before + o.bytes
                )}),
            );
        }
        // Under the objects' lock: every change of the total is.
        self.object_bytes
            .store(total - before + o.bytes, Ordering::Release);
        let body = Self::object_json(name, &o);
        objects.insert(name.to_owned(), o);
        ApiResponse::json(if created { 201 } else { 200 }, body)
    }

    /// The 507 for a new object past `ATE_MAX_OBJECTS` in all or past
    /// `ATE_MAX_OBJECTS_PER_CALLER` for `caller`, if it is.
    fn no_room_for_another(
        &self,
        objects: &HashMap<String, Object>,
        caller: &str,
    ) -> Option<ApiResponse> {
        let most = self.config.max_objects;
        if objects.len() >= most {
            return Some(ApiResponse::json(
                507,
                json!({"error": format!("{most} objects are stored, the most allowed (ATE_MAX_OBJECTS)")}),
            ));
        }
        let most = self.config.max_objects_per_caller;
        let own = objects.values().filter(|o| o.owner == caller).count();
        (own >= most).then(|| {
            ApiResponse::json(
                507,
                json!({"error": format!(
                    "this caller created {own} objects, the most allowed (ATE_MAX_OBJECTS_PER_CALLER)"
                )}),
            )
        })
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
    fn same_secret_is_equality() {
        assert!(same_secret("t0k", "t0k"));
        assert!(!same_secret("t0", "t0k"));
        assert!(!same_secret("t0K", "t0k"));
        assert!(!same_secret("", "t0k"));
    }
}
