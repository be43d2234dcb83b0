//! Leases: renewal, takeovers, lost answers, and leases past the end of time.

use super::*;

#[test]
fn a_worker_whose_lease_expired_cannot_close_after_a_takeover() {
    let (ledger, clock) = setup();
    let old = start(&ledger);
    clock.advance(Duration::from_secs(31));
    // Another worker arrives: the expired attempt is recovered (not
    // dispatched: revivable) and revived under a new lease.
    assert!(matches!(
        ledger.begin(&k(), &fp(), "w2").unwrap(),
        Begin::Replay(_)
    ));
    let new = ledger.revive(&k(), &fp(), "w2").unwrap();
    assert_ne!(new.token, old.token);
    assert!(matches!(
        ledger.mark_dispatched(&old),
        Err(Error::StaleLease { .. })
    ));
    assert!(matches!(
        ledger.close(&old, Close::PreProvider("late".into())),
        Err(Error::StaleLease { .. })
    ));
    ledger.mark_dispatched(&new).unwrap();
    ledger.close(&new, Close::Succeeded("ok".into())).unwrap();
}

#[test]
fn renew_extends_the_lease() {
    let (ledger, clock) = setup();
    let lease = start(&ledger);
    clock.advance(Duration::from_secs(20));
    let renewed = ledger.renew(&lease).unwrap();
    clock.advance(Duration::from_secs(20));
    assert!(ledger.recover().unwrap().is_empty());
    assert!(matches!(
        ledger.begin(&k(), &fp(), "w2"),
        Err(Error::Conflict { .. })
    ));
    ledger.mark_dispatched(&renewed).unwrap();
}

/// The lease's owner in two tasks, as a worker that renews its lease in the
/// background while it calls the provider: `worker` is the one whose next
/// write is preceded by `renewer`'s renewal.
fn owner_with_a_renewer() -> (
    Ledger<Interleave, ManualClock>,
    Ledger<std::sync::Arc<MemoryStore>, ManualClock>,
    Lease,
) {
    let (worker, renewer) = two_workers();
    let lease = match worker.begin(&k(), &fp(), "w1").unwrap() {
        Begin::Started(lease) => lease,
        Begin::Replay(_) => unreachable!(),
    };
    (worker, renewer, lease)
}

fn renew_before_next_write(
    worker: &Ledger<Interleave, ManualClock>,
    renewer: &Ledger<std::sync::Arc<MemoryStore>, ManualClock>,
    lease: &Lease,
) -> std::sync::Arc<parking_lot::Mutex<Option<Lease>>> {
    let renewed = std::sync::Arc::new(parking_lot::Mutex::new(None));
    let (out, renewer, lease) = (
        renewed.clone(),
        Ledger::with_clock(
            renewer.store().clone(),
            Config::default(),
            renewer.clock().clone(),
        )
        .expect("a valid config"),
        lease.clone(),
    );
    *worker.store().before_put.lock() = Some(Box::new(move || {
        *out.lock() = Some(
            renewer
                .renew(&lease)
                .expect("the owner renews its live lease"),
        );
    }));
    renewed
}

#[test]
fn the_owners_own_renewal_racing_a_transition_is_not_a_lost_lease() {
    // Dispatch, with a renewal landing between its read and its write.
    let (worker, renewer, lease) = owner_with_a_renewer();
    // Later, so that the renewal moves the expiry on.
    worker.clock().advance(Duration::from_secs(10));
    let renewed = renew_before_next_write(&worker, &renewer, &lease);
    worker
        .mark_dispatched(&lease)
        .expect("the lease still owns the attempt: a renewal is not a takeover");
    let renewal = renewed.lock().clone().expect("the renewal ran in between");
    assert_eq!(
        renewal.expires_at,
        lease.expires_at + Duration::from_secs(10)
    );
    let record = worker.get(&k()).unwrap().unwrap();
    assert!(record.tries[0].dispatched_at.is_some());
    // The dispatch was written over the renewal, not over what it read
    // before: the renewed expiry is kept.
    assert_eq!(record.lease.map(|l| l.expires_at), Some(renewal.expires_at));

    // The provider answered; closing races the next renewal. The outcome
    // must be recorded, not lost to a StaleLease (which would leave the
    // attempt open until recovery closes it as provider_unavailable).
    let renewed = renew_before_next_write(&worker, &renewer, &lease);
    let closed = worker
        .close(&lease, Close::Succeeded("receipt-1".into()))
        .expect("the lease still owns the attempt");
    assert!(renewed.lock().is_some());
    assert!(matches!(closed.state, State::Succeeded { .. }));
    assert!(closed.lease.is_none());
    assert_eq!(worker.get(&k()).unwrap().unwrap().state, closed.state);

    // Two renewals racing each other both extend the lease.
    let (worker, renewer, lease) = owner_with_a_renewer();
    let renewed = renew_before_next_write(&worker, &renewer, &lease);
    let mine = worker.renew(&lease).expect("a renewal racing a renewal");
    assert_eq!(mine.token, lease.token);
    assert!(renewed.lock().is_some());
}

#[test]
fn a_takeover_between_a_transitions_read_and_write_is_a_stale_lease() {
    let (worker, renewer, lease) = owner_with_a_renewer();
    // The lease runs out and another worker's begin recovers the attempt
    // (not dispatched: a pre-provider failure), just before w1's write.
    let clock = renewer.clock().clone();
    clock.advance(Config::default().lease_ttl + Duration::from_secs(1));
    let other = Ledger::with_clock(renewer.store().clone(), Config::default(), clock)
        .expect("a valid config");
    *worker.store().before_put.lock() = Some(Box::new(move || {
        assert!(matches!(
            other.begin(&k(), &fp(), "w2").unwrap(),
            Begin::Replay(_)
        ));
    }));
    assert!(matches!(
        worker.mark_dispatched(&lease),
        Err(Error::StaleLease { .. })
    ));
    let record = worker.get(&k()).unwrap().unwrap();
    assert!(matches!(record.state, State::FailedPreProvider { .. }));
    assert!(record.tries[0].dispatched_at.is_none());
}

#[test]
fn a_begin_whose_answer_was_lost_is_taken_over_by_its_owner_only_before_dispatch() {
    let (ledger, clock) = setup();
    // The begin landed; its answer (this lease) never reached the caller.
    let lost = start(&ledger);
    assert!(matches!(
        ledger.begin(&k(), &fp(), "w1"),
        Err(Error::Conflict { .. })
    ));
    // Another owner, or the wrong request, takes nothing over.
    assert_eq!(ledger.adopt(&k(), &fp(), "w2").unwrap(), None);
    assert!(matches!(
        ledger.adopt(&k(), &Fingerprint("other".into()), "w1"),
        Err(Error::FingerprintMismatch { .. })
    ));
    clock.advance(Duration::from_secs(10));
    let adopted = ledger.adopt(&k(), &fp(), "w1").unwrap().unwrap();
    assert_eq!(adopted.try_id, lost.try_id);
    assert_ne!(adopted.token, lost.token);
    assert_eq!(
        adopted.expires_at,
        clock.now() + chrono::Duration::from_std(ledger.config().lease_ttl).unwrap()
    );
    // The lost lease is fenced off: whoever held it can move nothing.
    for refused in [
        ledger.mark_dispatched(&lost).err(),
        ledger.renew(&lost).err(),
        ledger.close(&lost, Close::PreProvider("x".into())).err(),
    ] {
        assert!(
            matches!(refused, Some(Error::StaleLease { .. })),
            "{refused:?}"
        );
    }
    // Still one try, now the adopter's; once dispatched it is never taken
    // over again (the provider may have seen it).
    ledger.mark_dispatched(&adopted).unwrap();
    assert_eq!(ledger.adopt(&k(), &fp(), "w1").unwrap(), None);
    let record = ledger
        .close(&adopted, Close::Succeeded("ok".into()))
        .unwrap();
    assert_eq!(record.tries.len(), 1);
    // Ended: nothing to take over; an unknown key is not found.
    assert_eq!(ledger.adopt(&k(), &fp(), "w1").unwrap(), None);
    assert!(matches!(
        ledger.adopt(&Key::new("s", "nothing"), &fp(), "w1"),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn a_close_again_the_same_way_answers_the_same_so_a_lost_answer_can_be_retried() {
    let (ledger, clock) = setup();
    let lease = start(&ledger);
    ledger.mark_dispatched(&lease).unwrap();
    let first = ledger
        .close(&lease, Close::Succeeded("receipt-1".into()))
        .unwrap();
    // The store wrote it; the answer was lost; the caller closes again.
    let again = ledger
        .close(&lease, Close::Succeeded("receipt-1".into()))
        .unwrap();
    assert_eq!(again, first, "nothing written again");
    // Another outcome is not what ended it.
    for other in [
        Close::Succeeded("receipt-2".into()),
        Close::ProviderUnavailable("timeout".into()),
    ] {
        assert!(matches!(
            ledger.close(&lease, other),
            Err(Error::StaleLease { .. })
        ));
    }
    // A try that recovery closed was not closed by its lease, whatever the
    // lease now says.
    let other_key = Key::new("t", "idem-2");
    let Begin::Started(lost) = ledger.begin(&other_key, &fp(), "w1").unwrap() else {
        panic!("new key");
    };
    clock.advance(Duration::from_secs(3600));
    let recovered = ledger.recover().unwrap();
    let State::FailedPreProvider { reason } = recovered[0].state.clone() else {
        panic!("{:?}", recovered[0].state);
    };
    assert!(matches!(
        ledger.close(&lost, Close::PreProvider("credentials".into())),
        Err(Error::StaleLease { .. })
    ));
    // (Only the same words would pass for it: recovery's are its own.)
    assert!(reason.contains("worker lost"), "{reason}");
    // An earlier try's lease, closed the same way as the try that ended
    // the attempt, did not end it.
    let third = Key::new("t", "idem-3");
    let Begin::Started(first_try) = ledger.begin(&third, &fp(), "w1").unwrap() else {
        panic!("new key");
    };
    let no_credentials = || Close::PreProvider("no credentials".into());
    ledger.close(&first_try, no_credentials()).unwrap();
    let second_try = ledger.revive(&third, &fp(), "w1").unwrap();
    ledger.close(&second_try, no_credentials()).unwrap();
    assert!(ledger.close(&second_try, no_credentials()).is_ok());
    assert!(matches!(
        ledger.close(&first_try, no_credentials()),
        Err(Error::StaleLease { .. })
    ));
}

#[test]
fn a_lease_or_retention_past_the_end_of_time_saturates_instead_of_panicking() {
    // "Never expire" and "keep forever" spelled the obvious way. chrono's
    // `+` and `-` panic past year 262,143; the ledger saturates instead.
    let clock = ManualClock::default();
    let config = Config {
        lease_ttl: Duration::MAX,
        retention: Duration::MAX,
    };
    let ledger =
        Ledger::with_clock(MemoryStore::new(), config, clock.clone()).expect("a valid config");
    let lease = start(&ledger);
    assert_eq!(lease.expires_at, chrono::DateTime::<chrono::Utc>::MAX_UTC);
    let lease = ledger.renew(&lease).unwrap();
    assert_eq!(lease.expires_at, chrono::DateTime::<chrono::Utc>::MAX_UTC);
    // The lease never runs out: a second begin is refused while it lasts.
    clock.advance(Duration::from_secs(100 * 365 * 24 * 3600));
    assert!(matches!(
        ledger.begin(&k(), &fp(), "w2"),
        Err(Error::Conflict { .. })
    ));
    ledger
        .close(&lease, Close::PreProvider("no credentials".into()))
        .unwrap();
    // Nothing ended is ever old enough to purge.
    clock.advance(Duration::from_secs(1000 * 365 * 24 * 3600));
    assert_eq!(ledger.purge().unwrap(), 0);
    assert!(ledger.get(&k()).unwrap().is_some());
}

#[test]
fn a_revive_that_loses_to_another_revive_is_a_conflict_and_opens_no_second_try() {
    let (worker, other) = two_workers();
    let Begin::Started(lease) = worker.begin(&k(), &fp(), "w1").unwrap() else {
        panic!("a new key starts")
    };
    worker
        .close(&lease, Close::PreProvider("no credential".into()))
        .unwrap();
    // w2 revives it between w1's read and w1's write.
    let theirs = std::sync::Arc::new(parking_lot::Mutex::new(None));
    let out = theirs.clone();
    *worker.store().before_put.lock() = Some(Box::new(move || {
        *out.lock() = Some(other.revive(&k(), &fp(), "w2").expect("w2 revives first"));
    }));
    match worker.revive(&k(), &fp(), "w1") {
        Err(Error::Conflict { retry_after, .. }) => {
            assert_eq!(retry_after, Config::default().lease_ttl);
        }
        got => panic!("expected a conflict, got {got:?}"),
    }
    let won = theirs.lock().clone().expect("the revive ran in between");
    let record = worker.get(&k()).unwrap().unwrap();
    assert_eq!(record.state, State::InFlight);
    assert_eq!(record.tries.len(), 2, "one new try: w2's");
    assert_eq!(record.lease.map(|l| l.owner), Some(won.owner));
}
