//! Replicas and threads racing on one database, leases that expired, renewals beside the call.

use super::*;

#[test]
fn replicas_racing_on_one_database_have_exactly_one_winner() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    // Four replicas: four ledgers, four connections, one database.
    let replicas: Vec<Ledger<PgStore>> = (0..4)
        .map(|_| Ledger::new(PgStore::connect(&url).unwrap()))
        .collect();
    exactly_one_winner(&replicas.iter().collect::<Vec<_>>());
}

#[test]
fn threads_racing_on_one_pooled_store_have_exactly_one_winner() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    // One replica, four request threads, four connections.
    let pooled = PgStore::connect_pooled(&url, std::num::NonZeroUsize::new(4).unwrap()).unwrap();
    let ledger = Ledger::new(pooled);
    exactly_one_winner(&[&ledger; 4]);
}

#[test]
fn a_pooled_store_serves_other_calls_while_one_waits_on_a_row_lock() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let pooled = PgStore::connect_pooled(&url, std::num::NonZeroUsize::new(2).unwrap()).unwrap();
    let ledger = Ledger::new(pooled);
    let a = Key::new("t", "a");
    let Begin::Started(lease) = ledger.begin(&a, &fp(), "w").unwrap() else {
        panic!("new key")
    };
    // Another session holds key a's row: closing it waits on the lock.
    let mut holder = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM ate_ledger_records WHERE scope = 't' AND id = 'a' FOR UPDATE",
        &[],
    )
    .unwrap();
    std::thread::scope(|s| {
        let closing = s.spawn(|| ledger.close(&lease, Close::PreProvider("x".into())));
        let mut watcher = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while watcher
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            assert!(
                Instant::now() < deadline,
                "the close never reached the lock"
            );
            std::thread::yield_now();
        }
        // The other connection still serves: a new key begins at once.
        let (done, answer) = std::sync::mpsc::channel();
        let ledger = &ledger;
        s.spawn(move || {
            let b = Key::new("t", "b");
            let _ = done.send(
                ledger
                    .begin(&b, &fp(), "w")
                    .map(|b| matches!(b, Begin::Started(_))),
            );
        });
        let began = answer.recv_timeout(Duration::from_secs(10));
        tx.commit().unwrap();
        assert_eq!(
            began.expect("begin waited behind the locked call"),
            Ok(true)
        );
        assert_eq!(
            closing.join().unwrap().unwrap().state.name(),
            "failed_pre_provider"
        );
    });
}

/// Ten rounds: every ledger begins one key at once (one starts), then
/// every ledger revives it at once (one revives).
fn exactly_one_winner(replicas: &[&Ledger<PgStore>]) {
    for round in 0..10 {
        let key = Key::new("race", format!("k{round}"));
        let started = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (w, ledger) in replicas.iter().enumerate() {
                let (key, started) = (&key, &started);
                s.spawn(move || match ledger.begin(key, &fp(), &format!("w{w}")) {
                    Ok(Begin::Started(_)) => {
                        started.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Begin::Replay(r)) => panic!("nothing ended yet: {r:?}"),
                    Err(Error::Conflict { .. }) => {}
                    Err(e) => panic!("replica {w}: {e}"),
                });
            }
        });
        assert_eq!(started.load(Ordering::SeqCst), 1, "begin race {round}");
        let lease = replicas[0].get(&key).unwrap().unwrap().lease.unwrap();
        replicas[0]
            .close(&lease, Close::PreProvider("x".into()))
            .unwrap();
        let revived = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (w, ledger) in replicas.iter().enumerate() {
                let (key, revived) = (&key, &revived);
                s.spawn(move || {
                    if ledger.revive(key, &fp(), &format!("w{w}")).is_ok() {
                        revived.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(revived.load(Ordering::SeqCst), 1, "revive race {round}");
        let r = replicas[3].get(&key).unwrap().unwrap();
        assert_eq!(r.tries.len(), 2);
        r.check_invariants().unwrap();
    }
}

#[test]
fn a_replica_whose_lease_expired_cannot_close_after_another_took_over() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let a = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        Config::default(),
        clock.clone(),
    )
    .expect("a valid config");
    let b = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        Config::default(),
        clock.clone(),
    )
    .expect("a valid config");
    let key = Key::new("t", "lease");
    let Begin::Started(old) = a.begin(&key, &fp(), "a").unwrap() else {
        panic!("new key")
    };
    assert!(matches!(
        b.begin(&key, &fp(), "b"),
        Err(Error::Conflict { .. })
    ));
    clock.advance(Config::default().lease_ttl + Duration::from_secs(1));
    // B recovers the expired attempt (A is presumed gone): not dispatched,
    // so a pre-provider failure, revivable.
    assert_eq!(b.recover().unwrap().len(), 1);
    assert!(b.get(&key).unwrap().unwrap().is_revivable());
    assert!(matches!(
        a.close(&old, Close::Succeeded("late".into())),
        Err(Error::StaleLease { .. })
    ));
    assert_eq!(
        b.get(&key).unwrap().unwrap().state.name(),
        "failed_pre_provider"
    );
}

#[test]
fn a_renewal_thread_beside_the_call_never_costs_the_owner_its_attempt() {
    // The owner's two tasks on two connections of one pooled store: one
    // renews the lease every 2 ms (a service renews every few seconds;
    // this makes the races frequent) while the other dispatches and
    // closes. Every dispatch and close must land (a lost race is read
    // again, after a short random pause). A renewal may lose its own races
    // to them: the contract lets it answer `Error::Contended` (nothing
    // written; the next renewal tries again), never `StaleLease` before
    // the close.
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let ledger = std::sync::Arc::new(Ledger::new(
        PgStore::connect_pooled(&url, std::num::NonZeroUsize::new(2).unwrap()).unwrap(),
    ));
    for i in 0..40 {
        let key = Key::new("renew", format!("call-{i}"));
        let Begin::Started(lease) = ledger.begin(&key, &fp(), "w1").unwrap() else {
            panic!("a new key starts");
        };
        let renewer = {
            let (ledger, lease) = (ledger.clone(), lease.clone());
            std::thread::spawn(move || {
                let mut renewals = 0;
                loop {
                    match ledger.renew(&lease) {
                        Ok(_) => {
                            renewals += 1;
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(Error::Contended { .. }) => {}
                        // Only once the call's close has landed.
                        Err(Error::StaleLease { .. }) => {
                            let record = ledger.get(&key).unwrap().unwrap();
                            assert!(record.state.is_closed(), "stale before the close");
                            return renewals;
                        }
                        Err(e) => panic!("renewal {renewals} of {key}: {e}"),
                    }
                }
            })
        };
        ledger.mark_dispatched(&lease).unwrap();
        let record = ledger
            .close(&lease, Close::Succeeded("ok".into()))
            .unwrap_or_else(|e| panic!("close of call-{i} beside a renewal: {e}"));
        assert!(record.lease.is_none());
        renewer.join().unwrap();
    }
}

#[test]
fn a_lease_from_before_a_purge_never_drives_the_key_begun_again() {
    let db = TestDatabase::new();
    ate_ledger::testing::purged_key_fences_old_leases(PgStore::connect(db.url()).unwrap());
}
