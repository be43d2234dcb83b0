//! One decision from a window: shared by the direct and the keyed limiter.

use std::time::Duration;

use super::quota::Policy;
use crate::clock::Timestamp;
use crate::decision::Decision;
use crate::ring::{Record, Step};
use crate::window::{Geometry, Window};

/// What a check does with the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Record per the policy.
    Policy,
    /// Record only if allowed (waiting loops).
    OnlyIfAllowed,
    /// Record nothing.
    Peek,
    /// Record whatever the decision (an audit-trail record).
    Record,
}

impl Mode {
    /// Which verdicts record the attempt under `policy`.
    #[inline]
    pub(super) fn record(self, policy: Policy) -> Record {
        match self {
            Self::Policy => Record {
                allowed: true,
                denied: policy == Policy::CountDenied,
            },
            Self::OnlyIfAllowed => Record {
                allowed: true,
                denied: false,
            },
            Self::Peek => Record::NONE,
            Self::Record => Record::ALL,
        }
    }
}

/// Repeats `attempt` (which records only an allowed attempt), sleeping
/// with tokio time for each denial's exact `retry_after`, until it is
/// allowed.
#[cfg(feature = "tokio")]
pub(super) async fn retry_until_allowed(mut attempt: impl FnMut() -> Decision) -> Decision {
    loop {
        let decision = attempt();
        match decision.retry_after() {
            None => return decision,
            Some(wait) => tokio::time::sleep(wait.max(Duration::from_micros(1))).await,
        }
    }
}

/// One check of a key's window, whose shard lock the caller holds.
#[inline]
pub(super) fn decide_in(
    g: &Geometry,
    policy: Policy,
    mode: Mode,
    w: &mut Window,
    now: Timestamp,
) -> Decision {
    let (now_tick, at_tick) = g.ticks(now.as_nanos());
    let step = w.step(g, now_tick, at_tick, mode.record(policy));
    decision(g.limit, step, g.window, g.tick_nanos, now)
}

/// One check of `cost` attempts at once in a key's window (a weighted
/// check: kept off the single attempt's path).
#[cold]
#[inline(never)]
pub(super) fn decide_n_in(
    g: &Geometry,
    policy: Policy,
    mode: Mode,
    w: &mut Window,
    now: Timestamp,
    cost: u32,
) -> Decision {
    let (now_tick, at_tick) = g.ticks(now.as_nanos());
    let step = w.step_n(g, now_tick, at_tick, cost, mode.record(policy));
    decision_n(g.limit, step, g.window, g.tick_nanos, now, cost)
}

/// The decision for a window's step, whose front and `window` are in units
/// of `unit` nanoseconds (ticks, or 1 for the single window).
#[inline]
pub(super) fn decision(
    limit: u32,
    step: Step<u64>,
    window: u64,
    unit: u64,
    now: Timestamp,
) -> Decision {
    if step.allowed {
        Decision::Allowed {
            remaining: limit - step.count - u32::from(step.recorded),
        }
    } else {
        denial(step, window, unit, now)
    }
}

/// [`decision`] for a step of `cost` attempts.
pub(super) fn decision_n(
    limit: u32,
    step: Step<u64>,
    window: u64,
    unit: u64,
    now: Timestamp,
    cost: u32,
) -> Decision {
    if step.allowed {
        Decision::Allowed {
            remaining: limit - step.count - if step.recorded { cost } else { 0 },
        }
    } else {
        denial(step, window, unit, now)
    }
}

/// A denial: the window holds more than N - cost, so it has a front;
/// allowed again once that attempt leaves.
#[inline]
fn denial(step: Step<u64>, window: u64, unit: u64, now: Timestamp) -> Decision {
    let at = step
        .front
        .map_or(0, |front| front.saturating_add(window))
        .saturating_mul(unit);
    Decision::Denied {
        retry_after: Duration::from_nanos(at.saturating_sub(now.as_nanos())),
    }
}
