//! `probe-split` and `liveness-first`: a serving container says when it
//! takes traffic (readiness) apart from whether it is alive (liveness),
//! and liveness never restarts a pod before readiness has taken it out of
//! the load balancer.

use k8s_openapi::api::core::v1::{Container, Probe};

use super::endpoint::{Endpoint, probe_endpoint};
use super::units::Unit;
use crate::model::{Code, Finding, Severity};

/// Seconds from a probe's first failure until the kubelet acts on it
/// (`periodSeconds` x `failureThreshold`, defaults 10 and 3).
fn acts_after(probe: &Probe) -> i64 {
    i64::from(probe.period_seconds.unwrap_or(10).max(1))
        * i64::from(probe.failure_threshold.unwrap_or(3).max(1))
}

/// The endpoint of `probe` (named `which`), or a finding for a port name
/// the container does not declare.
fn endpoint(
    unit: &Unit<'_>,
    c: &Container,
    probe: &Probe,
    which: &str,
    out: &mut Vec<Finding>,
) -> Option<Endpoint> {
    match probe_endpoint(probe, c) {
        Ok(e) => e,
        Err(why) => {
            out.push(unit.finding(
                Code::ProbeSplit,
                Severity::Failure,
                Some(&c.name),
                Some(which.into()),
                format!("{which} names {why}; name a port the container declares"),
            ));
            None
        }
    }
}

/// The probe rules for every serving container of `unit`.
pub(super) fn check(unit: &Unit<'_>, out: &mut Vec<Finding>) {
    for c in unit.serving() {
        let Some(readiness) = &c.readiness_probe else {
            out.push(unit.finding(
                Code::ProbeSplit,
                Severity::Failure,
                Some(&c.name),
                None,
                "a Service sends it traffic and it has no readinessProbe, so it is in the load \
                 balancer before it can serve and while it drains; add a readinessProbe on the \
                 endpoint that turns 503 when the service drains (`/ready`)"
                    .into(),
            ));
            continue;
        };
        let ready = endpoint(unit, c, readiness, "readinessProbe", out);
        let Some(liveness) = &c.liveness_probe else {
            out.push(
                unit.finding(
                    Code::ProbeSplit,
                    Severity::Warning,
                    Some(&c.name),
                    None,
                    "no livenessProbe: a hung process is never restarted; add one on an endpoint \
                 that fails only when the process is stuck (`/health`), never the readiness one"
                        .into(),
                ),
            );
            continue;
        };
        let live = endpoint(unit, c, liveness, "livenessProbe", out);
        if let (Some(r), Some(l)) = (&ready, &live)
            && r == l
        {
            out.push(unit.finding(
                Code::ProbeSplit,
                Severity::Failure,
                Some(&c.name),
                None,
                format!(
                    "readinessProbe and livenessProbe ask the same endpoint ({r}), so a pod that \
                     drains (not ready) is restarted mid-drain; point liveness at an endpoint \
                     that keeps answering while the pod drains (`/health`)"
                ),
            ));
            continue;
        }
        let (ready_out, live_kill) = (acts_after(readiness), acts_after(liveness));
        if live_kill < ready_out {
            out.push(unit.finding(
                Code::LivenessFirst,
                Severity::Warning,
                Some(&c.name),
                None,
                format!(
                    "liveness restarts the pod {live_kill} s after it starts failing, readiness \
                     takes it out of the load balancer only after {ready_out} s, so requests \
                     reach a restarting pod; make liveness's periodSeconds x failureThreshold \
                     longer than readiness's"
                ),
            ));
        } else if c.startup_probe.is_none() {
            // At start: liveness may restart a pod that readiness has not
            // yet had a chance to call ready.
            let first_live_kill =
                i64::from(liveness.initial_delay_seconds.unwrap_or(0).max(0)) + live_kill;
            let first_ready = i64::from(readiness.initial_delay_seconds.unwrap_or(0).max(0));
            if first_live_kill < first_ready {
                out.push(unit.finding(
                    Code::LivenessFirst,
                    Severity::Warning,
                    Some(&c.name),
                    None,
                    format!(
                        "liveness can restart a starting pod after {first_live_kill} s, before \
                         readiness first asks at {first_ready} s; add a startupProbe or give \
                         liveness a longer initialDelaySeconds"
                    ),
                ));
            }
        }
    }
}
