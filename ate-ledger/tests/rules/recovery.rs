//! Recovery of open attempts after a crash, by the dispatch rule.

use super::*;

#[test]
fn recovery_classifies_open_attempts_by_the_dispatch_rule() {
    let (ledger, clock) = setup();
    let open = two_open_attempts(&ledger);
    assert!(ledger.recover().unwrap().is_empty(), "leases still live");
    clock.advance(Duration::from_secs(30));
    let recovered = ledger.recover().unwrap();
    assert_eq!(recovered.len(), 2);
    open.assert_resolved_by_the_dispatch_rule(&ledger);
}

/// Two attempts a worker left open: `a` not dispatched, `b` dispatched.
struct TwoOpen {
    a: Key,
    la: Lease,
    b: Key,
    lb: Lease,
}

fn two_open_attempts(ledger: &Ledger<MemoryStore, ManualClock>) -> TwoOpen {
    let a = Key::new("t", "not-dispatched");
    let b = Key::new("t", "dispatched");
    let Begin::Started(la) = ledger.begin(&a, &fp(), "ended-run").unwrap() else {
        panic!()
    };
    let Begin::Started(lb) = ledger.begin(&b, &fp(), "ended-run").unwrap() else {
        panic!()
    };
    ledger.mark_dispatched(&lb).unwrap();
    TwoOpen { a, la, b, lb }
}

impl TwoOpen {
    fn assert_resolved_by_the_dispatch_rule(&self, ledger: &Ledger<MemoryStore, ManualClock>) {
        let ra = ledger.get(&self.a).unwrap().unwrap();
        let rb = ledger.get(&self.b).unwrap().unwrap();
        assert!(matches!(ra.state, State::FailedPreProvider { .. }) && ra.is_revivable());
        assert!(matches!(rb.state, State::ProviderUnavailable { .. }) && !rb.is_revivable());
        ra.check_invariants().unwrap();
        rb.check_invariants().unwrap();
    }
}

#[test]
fn recover_all_resolves_open_attempts_without_waiting_for_their_leases() {
    let (ledger, _clock) = setup();
    let open = two_open_attempts(&ledger);
    let done = Key::new("t", "done");
    let Begin::Started(ld) = ledger.begin(&done, &fp(), "ended-run").unwrap() else {
        panic!()
    };
    ledger.close(&ld, Close::PreProvider("x".into())).unwrap();
    // The leases are live: `recover` leaves them, `recover_all` does not.
    assert!(ledger.recover().unwrap().is_empty());
    let recovered = ledger.recover_all().unwrap();
    assert_eq!(recovered.len(), 2, "only the open attempts");
    open.assert_resolved_by_the_dispatch_rule(&ledger);
    let rb = ledger.get(&open.b).unwrap().unwrap();
    let State::ProviderUnavailable { reason } = &rb.state else {
        unreachable!()
    };
    assert!(reason.contains("left open by an ended run"), "{reason}");
    // A worker that was in fact alive can no longer move them.
    assert!(matches!(
        ledger.close(&open.lb, Close::Succeeded("late".into())),
        Err(Error::StaleLease { .. })
    ));
    assert!(matches!(
        ledger.mark_dispatched(&open.la),
        Err(Error::StaleLease { .. })
    ));
    // The revivable one can be revived at once; the dispatched one cannot.
    assert!(ledger.revive(&open.a, &fp(), "w2").is_ok());
    assert!(matches!(
        ledger.revive(&open.b, &fp(), "w2"),
        Err(Error::NotRevivable { .. })
    ));
}

#[test]
fn recover_owner_resolves_the_owners_attempts_and_expired_ones_not_other_live_ones() {
    let (ledger, clock) = setup();
    // "ended-run" is this worker's previous run (same owner name).
    let mine = two_open_attempts(&ledger);
    let Begin::Started(live) = ledger
        .begin(&Key::new("t", "live"), &fp(), "pod-b")
        .unwrap()
    else {
        panic!()
    };
    let Begin::Started(_) = ledger
        .begin(&Key::new("t", "stale"), &fp(), "pod-c")
        .unwrap()
    else {
        panic!()
    };
    // pod-c's lease runs out; pod-b renews its own.
    clock.advance(Config::default().lease_ttl - Duration::from_secs(1));
    let live = ledger.renew(&live).unwrap();
    clock.advance(Duration::from_secs(2));
    let mut recovered: Vec<String> = ledger
        .recover_owner("ended-run")
        .unwrap()
        .into_iter()
        .map(|r| r.key.id)
        .collect();
    recovered.sort();
    assert_eq!(recovered, ["dispatched", "not-dispatched", "stale"]);
    mine.assert_resolved_by_the_dispatch_rule(&ledger);
    // The live worker's attempt is untouched and still its to move.
    assert_eq!(
        ledger.get(&live.key).unwrap().unwrap().state,
        State::InFlight
    );
    ledger.mark_dispatched(&live).unwrap();
    assert!(ledger.recover_owner("ended-run").unwrap().is_empty());
}

#[test]
fn recovery_leaves_an_attempt_another_worker_resolved_meanwhile_and_goes_on() {
    let (worker, other) = two_workers();
    for id in ["a", "b"] {
        let key = Key::new("t", id);
        assert!(matches!(
            worker.begin(&key, &fp(), "ended-run").unwrap(),
            Begin::Started(_)
        ));
    }
    worker
        .clock()
        .advance(Config::default().lease_ttl + Duration::from_secs(1));
    // Another worker's recovery resolves both just before this one's first
    // write: that write loses the version race, and theirs wins.
    *worker.store().before_put.lock() = Some(Box::new(move || {
        assert_eq!(other.recover().expect("w2 recovers").len(), 2);
    }));
    let mine = worker
        .recover()
        .expect("a lost version race is not an error: the other worker resolved it");
    assert!(mine.is_empty(), "both were resolved by the other worker");
    for id in ["a", "b"] {
        let record = worker.get(&Key::new("t", id)).unwrap().unwrap();
        assert!(matches!(record.state, State::FailedPreProvider { .. }));
        assert_eq!(record.tries.len(), 1);
    }
}
