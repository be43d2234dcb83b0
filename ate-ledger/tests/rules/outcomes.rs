//! Outcomes and their replays: dispatch, success, rejection, conflicts, revival.

use super::*;

#[test]
fn pre_provider_credential_failure_closes_both_attempts_and_the_key_can_be_revived() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    let r = ledger
        .close(&lease, Close::PreProvider("missing credential".into()))
        .unwrap();
    assert!(matches!(r.state, State::FailedPreProvider { .. }));
    assert_eq!(r.tries.len(), 1);
    assert_eq!(
        r.tries[0].closed.map(|c| c.1),
        Some(TryOutcome::PreProviderFailure)
    );
    assert!(r.lease.is_none());
    assert!(r.is_revivable());
    let lease2 = ledger.revive(&k(), &fp(), "w1").unwrap();
    assert_eq!(lease2.try_id, 2);
    let r = ledger.get(&k()).unwrap().unwrap();
    assert_eq!(r.state, State::InFlight);
    assert_eq!(r.tries.len(), 2, "same logical attempt, a new physical one");
    assert!(r.tries[1].is_open());
    assert_eq!(r.ended_at, None, "in flight again: it has not ended");
    r.check_invariants().unwrap();
}

#[test]
fn marking_a_try_dispatched_again_changes_nothing() {
    let (ledger, clock) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    let first = ledger.get(&k()).unwrap().unwrap();
    clock.advance(Duration::from_secs(5));
    ledger.mark_dispatched(&lease).unwrap();
    let again = ledger.get(&k()).unwrap().unwrap();
    // Not even the time it was first sent moves, and nothing is written.
    assert_eq!(again.tries[0].dispatched_at, first.tries[0].dispatched_at);
    assert_eq!(again.version, first.version);
}

#[test]
fn ambiguous_outcome_after_dispatch_stays_provider_unavailable_and_is_not_revivable() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    let r = ledger
        .close(&lease, Close::ProviderUnavailable("timeout".into()))
        .unwrap();
    assert!(matches!(r.state, State::ProviderUnavailable { .. }));
    assert!(!r.is_revivable());
    let err = ledger.revive(&k(), &fp(), "w1").unwrap_err();
    assert!(matches!(err, Error::NotRevivable { .. }), "{err}");
    // A repeat replays it; it is never re-executed.
    assert!(matches!(
        ledger.begin(&k(), &fp(), "w2").unwrap(),
        Begin::Replay(_)
    ));
}

#[test]
fn success_is_terminal_and_a_repeat_replays_the_recorded_outcome() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    ledger
        .close(&lease, Close::Succeeded("{\"n\":1}".into()))
        .unwrap();
    match ledger.begin(&k(), &fp(), "w2").unwrap() {
        Begin::Replay(r) => assert_eq!(
            r.state,
            State::Succeeded {
                outcome: "{\"n\":1}".into()
            }
        ),
        Begin::Started(_) => panic!("executed twice"),
    }
    assert!(matches!(
        ledger.revive(&k(), &fp(), "w2"),
        Err(Error::NotRevivable { .. })
    ));
}

#[test]
fn definitive_provider_rejection_is_recorded_and_replayed() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    ledger
        .close(&lease, Close::FailedAtProvider("card declined".into()))
        .unwrap();
    match ledger.begin(&k(), &fp(), "w").unwrap() {
        Begin::Replay(r) => assert!(matches!(r.state, State::FailedAtProvider { .. })),
        Begin::Started(_) => panic!(),
    }
}

#[test]
fn second_begin_while_in_flight_is_a_conflict_with_retry_after() {
    let (ledger, clock) = setup();
    let _lease = start(&ledger);
    clock.advance(Duration::from_secs(10));
    match ledger.begin(&k(), &fp(), "w2") {
        Err(Error::Conflict { retry_after, .. }) => {
            assert_eq!(retry_after, Duration::from_secs(20))
        }
        other => panic!("expected conflict, got {other:?}"),
    }
    assert_eq!(
        ledger.get(&k()).unwrap().unwrap().tries.len(),
        1,
        "no parallel try"
    );
}

#[test]
fn a_conflict_says_when_to_retry_in_whole_seconds_rounded_up() {
    let (ledger, clock) = setup();
    let _lease = start(&ledger);
    let secs = |ledger: &Ledger<MemoryStore, ManualClock>| {
        ledger
            .begin(&k(), &fp(), "w2")
            .unwrap_err()
            .retry_after_secs()
    };
    assert_eq!(secs(&ledger), Some(30));
    // 19.5 s left: 20, never 19 (a client back at 19 s would conflict).
    clock.advance(Duration::from_millis(10_500));
    assert_eq!(secs(&ledger), Some(20));
    // 1 ms left: 1, never 0.
    clock.advance(Duration::from_millis(19_499));
    assert_eq!(secs(&ledger), Some(1));
    // Other errors carry no wait.
    let other = ledger.begin(&k(), &Fingerprint("body-b".into()), "w2");
    assert!(matches!(other, Err(Error::FingerprintMismatch { .. })));
    assert_eq!(other.unwrap_err().retry_after_secs(), None);
}

#[test]
fn same_key_with_a_different_request_is_refused() {
    let (ledger, _) = setup();
    let _ = start(&ledger);
    let err = ledger
        .begin(&k(), &Fingerprint("body-b".into()), "w")
        .unwrap_err();
    assert!(matches!(err, Error::FingerprintMismatch { .. }));
    assert!(err.to_string().contains("idem-1"));
}

#[test]
fn a_dispatched_try_can_never_close_as_pre_provider() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    let err = ledger
        .close(&lease, Close::PreProvider("oops".into()))
        .unwrap_err();
    assert!(matches!(err, Error::IllegalTransition { .. }), "{err}");
    assert_eq!(ledger.get(&k()).unwrap().unwrap().state, State::InFlight);
}

#[test]
fn provider_outcomes_need_dispatch_first() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    for close in [
        Close::Succeeded("x".into()),
        Close::FailedAtProvider("x".into()),
        Close::ProviderUnavailable("x".into()),
    ] {
        assert!(matches!(
            ledger.close(&lease, close),
            Err(Error::IllegalTransition { .. })
        ));
    }
}

#[test]
fn revive_is_refused_for_open_and_unknown_keys() {
    let (ledger, _) = setup();
    assert!(matches!(
        ledger.revive(&k(), &fp(), "w"),
        Err(Error::NotFound { .. })
    ));
    let _ = start(&ledger);
    assert!(matches!(
        ledger.revive(&k(), &fp(), "w"),
        Err(Error::NotRevivable { .. })
    ));
}

#[test]
fn a_key_whose_earlier_try_was_dispatched_is_never_revived_whatever_its_last_state() {
    // The revivability rule is over every try, not the last state: a record
    // this ledger would never write (by an older version, or by hand in the
    // store) whose last try failed before the provider while an earlier
    // one was dispatched is still one the provider may have seen.
    let (ledger, clock) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    let mut r = ledger
        .close(&lease, Close::ProviderUnavailable("timeout".into()))
        .unwrap();
    let expected = r.version;
    let now = clock.now();
    r.tries.push(Try {
        id: 2,
        started_at: now,
        dispatched_at: None,
        closed: Some((now, TryOutcome::PreProviderFailure)),
    });
    r.state = State::FailedPreProvider {
        reason: "missing credential".into(),
    };
    r.version += 1;
    r.check_invariants().unwrap();
    ledger.store().put(&r, Some(expected)).unwrap();
    assert!(!r.is_revivable());
    match ledger.revive(&k(), &fp(), "w1") {
        Err(Error::NotRevivable { reason, .. }) => {
            assert!(reason.contains("dispatched"), "{reason}");
        }
        other => panic!("revived a key the provider may have seen: {other:?}"),
    }
    // Nothing changed: no new try.
    assert_eq!(ledger.get(&k()).unwrap().unwrap().tries.len(), 2);
}
