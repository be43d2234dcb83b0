//! Behaviour of the drain: one-way, idempotent, callbacks once, time fixed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ate_readiness::{
    AdmissionPolicy, BeginDrain, Error, Gate, SessionAdmission, State, WaitOutcome,
    clock::ManualClock,
};
use chrono::{TimeDelta, TimeZone, Utc};

fn clock() -> ManualClock {
    ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap())
}

#[test]
fn a_new_gate_is_serving_and_ready() {
    let gate = Gate::new();
    assert_eq!(gate.state(), State::Serving);
    assert!(gate.is_serving());
    assert_eq!(gate.readiness_status(), 200);
    assert_eq!(gate.liveness_status(), 200);
    assert_eq!(gate.snapshot().drain_started_at, None);
}

#[test]
fn first_drain_starts_and_later_drains_report_already_draining() {
    let clock = clock();
    let t0 = clock.now_for_model();
    let gate = Gate::with_clock(clock.clone());
    assert_eq!(gate.begin_drain(), BeginDrain::Started { at: t0 });
    clock.advance(TimeDelta::seconds(30));
    assert_eq!(
        gate.begin_drain(),
        BeginDrain::AlreadyDraining { since: t0 }
    );
    assert_eq!(
        gate.snapshot().drain_started_at,
        Some(t0),
        "drain time moved"
    );
    assert_eq!(gate.state(), State::Draining);
}

#[test]
fn drain_is_one_way() {
    let gate = Gate::new();
    let _ = gate.begin_drain();
    for _ in 0..3 {
        let _ = gate.begin_drain();
        let _guard = gate.admit().unwrap();
        assert_eq!(gate.state(), State::Draining);
    }
}

#[test]
fn readiness_fails_while_draining_but_liveness_stays_ok() {
    let gate = Gate::new();
    let _ = gate.begin_drain();
    assert_eq!(gate.readiness_status(), 503);
    assert_eq!(gate.liveness_status(), 200);
}

#[test]
fn drain_callbacks_run_exactly_once() {
    let gate = Gate::new();
    let runs = Arc::new(AtomicU32::new(0));
    for _ in 0..3 {
        let runs = runs.clone();
        gate.on_drain(move || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let _ = gate.begin_drain();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let _ = gate.begin_drain();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "callbacks rerun");
}

#[test]
fn a_panicking_callback_skips_no_other_and_the_drain_stands() {
    let gate = Gate::new();
    let runs = Arc::new(AtomicU32::new(0));
    for i in 0..3 {
        let runs = runs.clone();
        gate.on_drain(move || {
            assert_ne!(i, 1, "a faulty callback");
            runs.fetch_add(1, Ordering::SeqCst);
        });
    }
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.begin_drain()));
    // The panic reaches the caller, after the callbacks before and after it ran.
    assert!(panicked.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(gate.state(), State::Draining);
    assert!(matches!(
        gate.begin_drain(),
        BeginDrain::AlreadyDraining { .. }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "callbacks rerun");
}

#[test]
fn callback_registered_after_drain_runs_immediately() {
    let gate = Gate::new();
    let _ = gate.begin_drain();
    let ran = Arc::new(AtomicU32::new(0));
    let r = ran.clone();
    gate.on_drain(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn concurrent_drains_have_exactly_one_starter() {
    for _ in 0..50 {
        let gate = Gate::new();
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        gate.on_drain(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        let starters: u32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| u32::from(gate.begin_drain().started())))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(starters, 1);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn guards_count_in_flight_until_dropped() {
    let gate = Gate::new();
    let a = gate.admit().unwrap();
    let b = gate.admit().unwrap();
    assert_eq!(gate.in_flight(), 2);
    drop(a);
    assert_eq!(gate.in_flight(), 1);
    drop(b);
    assert_eq!(gate.in_flight(), 0);
}

#[test]
fn lame_duck_admits_while_draining_and_asks_to_close_connection() {
    let gate = Gate::new();
    let before = gate.admit().unwrap();
    assert!(!before.admitted_while_draining());
    assert!(!before.should_close_connection());
    let _ = gate.begin_drain();
    assert!(
        before.should_close_connection(),
        "in-flight work finishing after the drain should close too"
    );
    let late = gate.admit().expect("lame duck admits");
    assert!(late.admitted_while_draining());
    assert!(late.should_close_connection());
    assert_eq!(gate.in_flight(), 2);
}

#[test]
fn strict_policy_refuses_while_draining_with_retry_after() {
    let gate = Gate::builder()
        .policy(AdmissionPolicy::Strict {
            retry_after_secs: 7,
        })
        .build();
    let admitted = gate.admit().unwrap();
    let _ = gate.begin_drain();
    let refused = gate.admit().unwrap_err();
    assert_eq!(
        refused,
        Error::Draining {
            retry_after_secs: 7
        }
    );
    assert!(refused.to_string().contains("7 s"));
    assert_eq!(gate.in_flight(), 1, "a refused admission is not counted");
    drop(admitted);
    assert_eq!(gate.in_flight(), 0);
}

#[test]
fn sessions_open_while_serving_and_accept_then_close_1001_while_draining() {
    let gate = Gate::new();
    let open = gate.admit_session();
    assert!(matches!(open, SessionAdmission::Open(_)));
    assert_eq!(gate.in_flight(), 1);
    let _ = gate.begin_drain();
    match gate.admit_session() {
        SessionAdmission::AcceptThenClose { close_code } => assert_eq!(close_code, 1001),
        other => panic!("expected accept-then-close, got {other:?}"),
    }
    assert_eq!(gate.in_flight(), 1, "the open session is still counted");
    drop(open);
    assert_eq!(gate.in_flight(), 0);
}

#[test]
fn wait_idle_completes_at_once_when_nothing_is_in_flight() {
    let gate = Gate::new();
    let _ = gate.begin_drain();
    assert_eq!(gate.wait_idle(Duration::ZERO), WaitOutcome::Completed);
    assert_eq!(gate.snapshot().last_wait, Some(WaitOutcome::Completed));
}

#[test]
fn wait_idle_times_out_reporting_what_is_still_in_flight() {
    let gate = Gate::new();
    let _a = gate.admit().unwrap();
    let _b = gate.admit().unwrap();
    let _ = gate.begin_drain();
    let outcome = gate.wait_idle(Duration::from_millis(1));
    assert_eq!(outcome, WaitOutcome::TimedOut { in_flight: 2 });
    assert_eq!(gate.snapshot().last_wait, Some(outcome));
}

#[test]
fn wait_idle_wakes_when_the_last_guard_drops() {
    let gate = Gate::new();
    let guard = gate.admit().unwrap();
    let _ = gate.begin_drain();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| gate.wait_idle(Duration::from_secs(60)));
        // Whether the waiter is already asleep or not, the drop must be seen.
        drop(guard);
        assert_eq!(waiter.join().unwrap(), WaitOutcome::Completed);
    });
}

#[test]
fn snapshot_reports_state_time_count_and_last_wait() {
    let clock = clock();
    let gate = Gate::with_clock(clock.clone());
    let _g = gate.admit().unwrap();
    let snap = gate.snapshot();
    assert_eq!(
        (snap.state, snap.in_flight, snap.last_wait),
        (State::Serving, 1, None)
    );
    assert_eq!((snap.ready_gauge(), snap.drain_in_progress_gauge()), (1, 0));
    let started = gate.begin_drain().since();
    let _ = gate.wait_idle(Duration::ZERO);
    let snap = gate.snapshot();
    assert_eq!(snap.state, State::Draining);
    assert_eq!(snap.drain_started_at, Some(started));
    assert_eq!(snap.last_wait, Some(WaitOutcome::TimedOut { in_flight: 1 }));
    assert_eq!((snap.ready_gauge(), snap.drain_in_progress_gauge()), (0, 1));
}

#[test]
fn reset_for_tests_returns_to_serving() {
    let gate = Gate::new();
    let _ = gate.begin_drain();
    gate.reset_for_tests();
    assert_eq!(gate.state(), State::Serving);
    assert!(gate.begin_drain().started());
}

#[test]
fn gate_is_send_sync_and_clones_share_state() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Gate>();
    assert_send_sync::<ate_readiness::Guard>();
    let gate = Gate::new();
    let clone = gate.clone();
    let _ = clone.begin_drain();
    assert_eq!(gate.state(), State::Draining);
}

#[test]
fn owned_guards_move_into_threads_and_count_until_dropped() {
    fn assert_static_send<T: Send + 'static>(_: &T) {}
    let gate = Gate::new();
    let borrowed = gate.admit().unwrap();
    let owned = borrowed.into_owned();
    assert_static_send(&owned);
    assert_eq!(gate.in_flight(), 1, "into_owned keeps the count, once");
    let second = gate.admit_owned().unwrap();
    assert_eq!(gate.in_flight(), 2);
    std::thread::spawn(move || drop((owned, second)))
        .join()
        .unwrap();
    assert_eq!(gate.in_flight(), 0);
}

#[test]
fn a_guard_names_its_gate_and_an_owned_guard_shares_it() {
    let gate = Gate::new();
    let guard = gate.admit().unwrap();
    assert!(std::ptr::eq(guard.gate(), &gate));
    let owned = gate.admit_owned().unwrap();
    assert_eq!(owned.gate().in_flight(), 2);
    let _ = gate.begin_drain();
    assert_eq!(owned.gate().state(), State::Draining);
}

#[test]
fn the_gate_reports_its_policy_and_a_timed_out_wait_did_not_complete() {
    assert_eq!(Gate::new().policy(), AdmissionPolicy::LameDuck);
    let strict = AdmissionPolicy::Strict {
        retry_after_secs: 5,
    };
    assert_eq!(Gate::builder().policy(strict).build().policy(), strict);
    assert!(WaitOutcome::Completed.is_completed());
    assert!(!WaitOutcome::TimedOut { in_flight: 1 }.is_completed());
}

#[test]
fn debug_shows_the_policy_and_the_snapshot() {
    let gate = Gate::new();
    let _guard = gate.admit().unwrap();
    let text = format!("{gate:?}");
    for part in ["LameDuck", "Serving", "in_flight: 1"] {
        assert!(text.contains(part), "{part} in {text}");
    }
}

#[test]
fn a_manual_clock_moves_both_ways_saturates_and_can_be_set() {
    use chrono::DateTime;
    let clock = clock();
    let t0 = clock.now_for_model();
    clock.advance(TimeDelta::seconds(-5));
    assert_eq!(clock.now_for_model(), t0 - TimeDelta::seconds(5));
    clock.set(t0);
    assert_eq!(clock.now_for_model(), t0);
    clock.set(DateTime::<Utc>::MAX_UTC - TimeDelta::seconds(1));
    clock.advance(TimeDelta::seconds(10));
    assert_eq!(clock.now_for_model(), DateTime::<Utc>::MAX_UTC);
    clock.set(DateTime::<Utc>::MIN_UTC + TimeDelta::seconds(1));
    clock.advance(TimeDelta::seconds(-10));
    assert_eq!(clock.now_for_model(), DateTime::<Utc>::MIN_UTC);
}

#[test]
fn ready_fails_at_drain_start_by_default_for_a_load_balancer_that_follows_it() {
    let gate = Gate::new();
    assert_eq!(gate.readiness_status(), 200);
    let _ = gate.begin_drain();
    assert_eq!(gate.readiness_status(), 503);
    assert_eq!(gate.ready_answer().status, 503);
}

#[test]
fn ready_stays_up_for_the_grace_for_kube_proxys_terminating_endpoints() {
    let clock = ate_readiness::clock::ManualClock::default();
    let gate = Gate::builder()
        .clock(clock.clone())
        .ready_while_draining(std::time::Duration::from_secs(15))
        .build();
    let _ = gate.begin_drain();
    // Draining (lame duck: responses say Connection: close) yet serving
    // as kube-proxy's fallback.
    assert!(gate.is_draining());
    let guard = gate.admit_owned().unwrap();
    assert!(guard.should_close_connection());
    drop(guard);
    assert_eq!(gate.ready_answer().status, 200);
    // The grace runs on the monotonic clock: a wall clock stepped back
    // neither ends it nor lengthens it...
    clock.advance(chrono::TimeDelta::seconds(-60));
    assert_eq!(gate.readiness_status(), 200);
    clock.advance(chrono::TimeDelta::seconds(14));
    assert_eq!(gate.readiness_status(), 200);
    clock.advance(chrono::TimeDelta::seconds(1));
    assert_eq!(gate.readiness_status(), 503);
    assert_eq!(gate.ready_answer().status, 503);
    // ...and once ended it never comes back (it did when the wall clock
    // stepped back past the drain's start).
    clock.advance(chrono::TimeDelta::hours(-1));
    assert_eq!(gate.readiness_status(), 503);
    // Starting is never ready, grace or not.
    let starting = Gate::builder()
        .starting()
        .ready_while_draining(std::time::Duration::from_secs(15))
        .build();
    assert_eq!(starting.readiness_status(), 503);
    // Nor does a gate never marked ready become ready by being told to
    // stop (it answered 200 for the grace).
    let _ = starting.begin_drain();
    assert_eq!(starting.readiness_status(), 503);
    assert_eq!(starting.ready_answer().status, 503);
}

#[test]
fn the_grace_takes_the_work_it_invites_under_every_policy() {
    use ate_readiness::{AdmissionPolicy, SessionAdmission};
    let clock = ate_readiness::clock::ManualClock::default();
    let gate = Gate::builder()
        .clock(clock.clone())
        .policy(AdmissionPolicy::Strict {
            retry_after_secs: 5,
        })
        .ready_while_draining(std::time::Duration::from_secs(10))
        .build();
    let _ = gate.begin_drain();
    // `/ready` says 200: requests and new sessions are taken, not
    // refused (before: 200 on /ready and 503 for every request).
    assert_eq!(gate.readiness_status(), 200);
    assert!(gate.admit().is_ok());
    assert!(matches!(gate.admit_session(), SessionAdmission::Open(_)));
    // Once the grace ends, the policy's own answer.
    clock.advance(chrono::TimeDelta::seconds(10));
    assert_eq!(gate.readiness_status(), 503);
    assert!(gate.admit().is_err());
    assert!(matches!(
        gate.admit_session(),
        SessionAdmission::AcceptThenClose { .. }
    ));
}
