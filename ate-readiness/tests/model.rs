//! Property test: random sequences of admit / release / drain / wait /
//! snapshot / clock jumps against the reference model.

use std::time::Duration;

use ate_readiness::testing::{Expect, Model, Op, ops};
use ate_readiness::{
    AdmissionPolicy, Error, Gate, OwnedGuard, SessionAdmission, State, WaitOutcome,
    clock::ManualClock,
};
use chrono::TimeDelta;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn gate_matches_reference_model(
        policy in prop_oneof![
            Just(AdmissionPolicy::LameDuck),
            (0u64..120).prop_map(|retry_after_secs| AdmissionPolicy::Strict { retry_after_secs }),
        ],
        starting in any::<bool>(),
        seq in ops(60),
    ) {
        let clock = ManualClock::default();
        let builder = Gate::builder().policy(policy).clock(clock.clone());
        let gate = if starting { builder.starting().build() } else { builder.build() };
        let callbacks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let c = callbacks.clone();
        gate.on_drain(move || { c.fetch_add(1, std::sync::atomic::Ordering::SeqCst); });
        let mut model = if starting { Model::starting(policy) } else { Model::new(policy) };
        let mut guards: Vec<OwnedGuard> = Vec::new();
        for op in seq {
            let expect = model.apply(&op, clock.now_for_model());
            match op {
                Op::Admit => match gate.admit_owned() {
                    Ok(guard) => {
                        prop_assert_eq!(expect, Expect::Admitted(guard.admitted_while_draining()));
                        guards.push(guard);
                    }
                    Err(Error::Draining { retry_after_secs }) => {
                        prop_assert_eq!(expect, Expect::Refused { retry_after_secs });
                    }
                    Err(e) => prop_assert!(false, "admit failed: {}", e),
                },
                Op::AdmitSession => match gate.admit_session() {
                    SessionAdmission::Open(guard) => {
                        prop_assert_eq!(expect, Expect::Session(true));
                        guards.push(guard);
                    }
                    SessionAdmission::AcceptThenClose { close_code } => {
                        prop_assert_eq!(expect, Expect::Session(false));
                        prop_assert_eq!(close_code, 1001);
                    }
                },
                Op::Release(i) => {
                    if !guards.is_empty() {
                        let n = guards.len();
                        drop(guards.swap_remove(i % n));
                    }
                }
                Op::Drain => {
                    prop_assert_eq!(expect, Expect::Drain(gate.begin_drain().started()));
                }
                Op::WaitNow => {
                    let got = match gate.wait_idle(Duration::ZERO) {
                        WaitOutcome::Completed => None,
                        WaitOutcome::TimedOut { in_flight } => Some(in_flight),
                    };
                    prop_assert_eq!(expect, Expect::Wait(got));
                }
                Op::AdvanceSecs(s) => clock.advance(TimeDelta::seconds(s.into())),
                Op::MarkReady => prop_assert_eq!(expect, Expect::Ready(gate.mark_ready())),
                Op::Snapshot => {}
            }
            let snap = gate.snapshot();
            prop_assert_eq!(snap.state, model.state());
            prop_assert_eq!(snap.drain_started_at, model.drain_started_at);
            prop_assert_eq!(snap.in_flight, model.in_flight);
            prop_assert_eq!(snap.in_flight, guards.len() as u64);
            let last = snap.last_wait.map(|w| match w {
                WaitOutcome::Completed => None,
                WaitOutcome::TimedOut { in_flight } => Some(in_flight),
            });
            prop_assert_eq!(last, model.last_wait);
            prop_assert_eq!(snap.admitted_while_draining, model.admitted_while_draining);
            prop_assert_eq!(snap.refused_while_draining, model.refused_while_draining);
            prop_assert_eq!(
                callbacks.load(std::sync::atomic::Ordering::SeqCst),
                model.callbacks_run
            );
            prop_assert_eq!(gate.readiness_status(), if model.state() == State::Serving { 200 } else { 503 });
            prop_assert_eq!(gate.is_draining(), model.state() == State::Draining);
            prop_assert_eq!(snap.ready_gauge(), i64::from(model.state() == State::Serving));
        }
    }
}
