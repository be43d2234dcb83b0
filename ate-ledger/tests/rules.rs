//! Every rule of the state machine, named after the behaviour.

use std::time::Duration;

use ate_ledger::{
    Begin, Close, Config, Error, Fingerprint, Key, Lease, Ledger, MemoryStore, State, Try,
    TryOutcome,
    clock::{Clock, ManualClock},
    store::Store,
};

fn setup() -> (Ledger<MemoryStore, ManualClock>, ManualClock) {
    let clock = ManualClock::default();
    let ledger = Ledger::with_clock(MemoryStore::new(), Config::default(), clock.clone())
        .expect("a valid config");
    (ledger, clock)
}

fn k() -> Key {
    Key::new("t", "idem-1")
}

fn fp() -> Fingerprint {
    Fingerprint("body-a".into())
}

fn start(ledger: &Ledger<MemoryStore, ManualClock>) -> Lease {
    match ledger.begin(&k(), &fp(), "w1").unwrap() {
        Begin::Started(lease) => lease,
        Begin::Replay(r) => panic!("expected a new attempt, got replay of {:?}", r.state),
    }
}

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
fn records_are_kept_for_the_retention_and_open_ones_never_purged() {
    let (ledger, clock) = setup();
    let done = Key::new("t", "done");
    let Begin::Started(l) = ledger.begin(&done, &fp(), "w").unwrap() else {
        panic!()
    };
    ledger.close(&l, Close::PreProvider("x".into())).unwrap();
    let _open = start(&ledger);
    clock.advance(Duration::from_secs(24 * 3600 - 1));
    assert_eq!(
        ledger.purge().unwrap(),
        0,
        "still inside the 24 h retention"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(ledger.purge().unwrap(), 1);
    assert!(ledger.get(&done).unwrap().is_none());
    assert!(ledger.get(&k()).unwrap().is_some(), "open attempt purged");
    assert_eq!(Config::default().retention, Duration::from_secs(24 * 3600));
}

#[test]
fn invalid_keys_are_typed_errors() {
    let (ledger, _) = setup();
    for key in [
        Key::new("t", ""),
        Key::new("a\0b", "x"),
        Key::new("t", "x\0"),
    ] {
        assert!(matches!(
            ledger.begin(&key, &fp(), "w"),
            Err(Error::InvalidKey(_))
        ));
    }
    assert!(matches!(
        ledger.begin(&k(), &Fingerprint(String::new()), "w"),
        Err(Error::InvalidKey(_))
    ));
}

#[test]
fn a_key_longer_than_max_bytes_is_an_invalid_key_naming_its_size_on_every_store() {
    let (ledger, _) = setup();
    let at_most = Key::new("tenant", "k".repeat(Key::MAX_BYTES - "tenant".len()));
    assert!(ledger.begin(&at_most, &fp(), "w").is_ok());
    let over = Key::new("tenant", "k".repeat(Key::MAX_BYTES - "tenant".len() + 1));
    let Err(Error::InvalidKey(message)) = ledger.begin(&over, &fp(), "w") else {
        panic!("a key over the bound was taken");
    };
    assert!(message.contains("2049 bytes; at most 2048"), "{message}");
    assert!(
        message.len() < 200,
        "the message shows a prefix, not the key"
    );
    assert!(matches!(
        ledger.revive(&over, &fp(), "w"),
        Err(Error::InvalidKey(_))
    ));
    // Multi-byte characters count as their UTF-8 bytes.
    let wide = Key::new("", "é".repeat(Key::MAX_BYTES / 2 + 1));
    assert!(matches!(
        ledger.begin(&wide, &fp(), "w"),
        Err(Error::InvalidKey(_))
    ));
    assert!(ledger.get(&over).unwrap().is_none(), "nothing was stored");
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

/// A store that runs `before_put` once, just before the next write reaches
/// the shared store: another task's write landing between a transition's
/// read and its write.
struct Interleave {
    inner: std::sync::Arc<MemoryStore>,
    #[allow(clippy::type_complexity)]
    before_put: parking_lot::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Interleave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleave").finish_non_exhaustive()
    }
}

impl ate_ledger::store::Store for Interleave {
    fn get(&self, key: &Key) -> Result<Option<ate_ledger::Record>, Error> {
        self.inner.get(key)
    }
    fn put(&self, record: &ate_ledger::Record, expected: Option<u64>) -> Result<(), Error> {
        let hook = self.before_put.lock().take();
        if let Some(hook) = hook {
            hook();
        }
        self.inner.put(record, expected)
    }
    fn open(&self) -> Result<Vec<ate_ledger::Record>, Error> {
        self.inner.open()
    }
    fn purge(&self, cutoff: ate_ledger::store::Cutoff) -> Result<usize, Error> {
        self.inner.purge(cutoff)
    }
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

/// A ledger whose next write is preceded by a hook (`Interleave`), and a
/// second ledger (another worker) on the same store and clock.
fn two_workers() -> (
    Ledger<Interleave, ManualClock>,
    Ledger<std::sync::Arc<MemoryStore>, ManualClock>,
) {
    let clock = ManualClock::default();
    let shared = std::sync::Arc::new(MemoryStore::new());
    let other = Ledger::with_clock(shared.clone(), Config::default(), clock.clone())
        .expect("a valid config");
    let worker = Ledger::with_clock(
        Interleave {
            inner: shared,
            before_put: parking_lot::Mutex::new(None),
        },
        Config::default(),
        clock,
    )
    .expect("a valid config");
    (worker, other)
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

#[test]
fn ledgers_stores_and_records_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Ledger<MemoryStore>>();
    check::<Ledger<MemoryStore, ManualClock>>();
    #[cfg(feature = "redb")]
    check::<Ledger<ate_ledger::RedbStore>>();
    #[cfg(feature = "postgres")]
    check::<Ledger<ate_ledger::PgStore>>();
    check::<Ledger<Box<dyn Store>>>();
    check::<Lease>();
    check::<ate_ledger::Record>();
    check::<Error>();
}

#[test]
fn every_written_transition_bumps_the_version_by_one() {
    let (ledger, clock) = setup();
    let version = || ledger.get(&k()).unwrap().unwrap().version;
    let lease = start(&ledger);
    let mut expected = version();
    for step in ["renew", "dispatch", "renew", "close"] {
        clock.advance(Duration::from_secs(1));
        match step {
            "renew" => drop(ledger.renew(&lease).unwrap()),
            "dispatch" => ledger.mark_dispatched(&lease).unwrap(),
            _ => {
                let record = ledger
                    .close(&lease, Close::Succeeded("out".into()))
                    .unwrap();
                assert_eq!(record.version, expected + 1, "the record close returns");
            }
        }
        expected += 1;
        assert_eq!(version(), expected, "after {step}");
    }

    // A revived key too: its close and its revive are each one write.
    let other = Key::new("t", "revived");
    let Begin::Started(lease) = ledger.begin(&other, &fp(), "w1").unwrap() else {
        panic!("a new key starts")
    };
    let before = ledger.get(&other).unwrap().unwrap().version;
    ledger
        .close(&lease, Close::PreProvider("no credential".into()))
        .unwrap();
    ledger.revive(&other, &fp(), "w2").unwrap();
    assert_eq!(ledger.get(&other).unwrap().unwrap().version, before + 2);
}

#[test]
fn a_ledger_reports_the_config_it_was_built_with() {
    let config = Config {
        lease_ttl: Duration::from_secs(7),
        retention: Duration::from_secs(2 * 3600),
    };
    let ledger = Ledger::with_clock(MemoryStore::new(), config, ManualClock::default())
        .expect("a valid config");
    assert_eq!(ledger.config(), config);
    assert_eq!(Ledger::new(MemoryStore::new()).config(), Config::default());
}

#[test]
fn the_open_try_is_the_one_in_flight_and_none_once_closed() {
    let (ledger, _) = setup();
    let lease = start(&ledger);
    let record = ledger.get(&k()).unwrap().unwrap();
    let open = record.open_try().expect("a try is open while in flight");
    assert_eq!(open.id, lease.try_id);
    ledger
        .close(&lease, Close::PreProvider("no credential".into()))
        .unwrap();
    assert!(ledger.get(&k()).unwrap().unwrap().open_try().is_none());
    // Revived: the new try is the open one, not the first.
    let revived = ledger.revive(&k(), &fp(), "w2").unwrap();
    let record = ledger.get(&k()).unwrap().unwrap();
    assert_ne!(revived.try_id, lease.try_id);
    assert_eq!(record.open_try().map(|t| t.id), Some(revived.try_id));
}

#[test]
fn a_shared_store_purges_through_its_arc() {
    let clock = ManualClock::default();
    let store = std::sync::Arc::new(MemoryStore::new());
    let ledger = Ledger::with_clock(store.clone(), Config::default(), clock.clone())
        .expect("a valid config");
    for id in ["a", "b"] {
        let Begin::Started(lease) = ledger.begin(&Key::new("t", id), &fp(), "w").unwrap() else {
            panic!("a new key starts")
        };
        ledger
            .close(&lease, Close::PreProvider("x".into()))
            .unwrap();
    }
    clock.advance(Config::default().retention + Duration::from_secs(1));
    assert_eq!(ledger.purge().unwrap(), 2, "both ended past the retention");
    assert_eq!(ledger.purge().unwrap(), 0, "nothing left to purge");
    assert!(store.open().unwrap().is_empty());
}

#[test]
fn a_lease_from_before_a_purge_never_drives_the_key_begun_again() {
    ate_ledger::testing::purged_key_fences_old_leases(MemoryStore::new());
}

#[test]
fn a_retention_under_an_hour_is_a_configuration_error_naming_it() {
    for retention in [
        Duration::ZERO,
        Duration::from_secs(1),
        Config::MIN_RETENTION - Duration::from_nanos(1),
    ] {
        let config = Config {
            retention,
            ..Config::default()
        };
        let err = Ledger::with_clock(MemoryStore::new(), config, ManualClock::default())
            .expect_err("a success purged at once would execute again");
        assert!(
            matches!(err, Error::RetentionTooShort { retention: r, .. } if r == retention),
            "{err:?}"
        );
        assert!(err.to_string().contains(&format!("{retention:?}")), "{err}");
    }
    let at_floor = Config {
        retention: Config::MIN_RETENTION,
        ..Config::default()
    };
    assert!(Ledger::with_clock(MemoryStore::new(), at_floor, ManualClock::default()).is_ok());
}
