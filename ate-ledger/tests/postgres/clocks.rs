//! Replicas whose clocks are skewed: leases, transitions and purges keep the server's time.

use super::*;

/// A replica whose clock runs `ahead` of the others.
#[derive(Debug)]
struct Skewed(chrono::TimeDelta);

impl ate_ledger::clock::Clock for Skewed {
    fn now(&self) -> chrono::DateTime<Utc> {
        Utc::now() + self.0
    }
}

#[test]
fn a_replica_whose_clock_runs_ahead_does_not_take_over_a_live_lease() {
    let db = TestDatabase::new();
    let a = Ledger::new(PgStore::connect(db.url()).unwrap());
    let ahead = Ledger::with_clock(
        PgStore::connect(db.url()).unwrap(),
        Config::default(),
        Skewed(chrono::TimeDelta::seconds(45)),
    )
    .expect("a valid config");
    let key = Key::new("t", "skew");
    let Begin::Started(lease) = a.begin(&key, &fp(), "replica-a").unwrap() else {
        panic!("new key")
    };
    a.mark_dispatched(&lease).unwrap();
    // By its own clock the 30 s lease expired 15 s ago; by the server's it
    // has 30 s to run: the call is in flight, not lost.
    match ahead.begin(&key, &fp(), "replica-b") {
        Err(Error::Conflict { retry_after, .. }) => {
            assert!(retry_after > Duration::from_secs(25), "{retry_after:?}")
        }
        other => panic!("the skewed replica took over a live attempt: {other:?}"),
    }
    assert!(ahead.recover().unwrap().is_empty(), "nor does its recovery");
    // The owner still closes with the real answer.
    let r = a.close(&lease, Close::Succeeded("answer".into())).unwrap();
    assert!(matches!(r.state, ate_ledger::State::Succeeded { .. }));
}

#[test]
fn a_skewed_replicas_one_round_trip_transitions_keep_the_servers_time() {
    let db = TestDatabase::new();
    let ahead = Ledger::with_clock(
        PgStore::connect(db.url()).unwrap(),
        Config::default(),
        Skewed(chrono::TimeDelta::minutes(10)),
    )
    .expect("a valid config");
    let key = Key::new("t", "skew-written");
    let Begin::Started(lease) = ahead.begin(&key, &fp(), "replica-b").unwrap() else {
        panic!("new key")
    };
    // The renewal and the dispatch write what this replica last wrote,
    // without reading it again: their times are still the server's
    // (within a second here), not its clock's 10 minutes ahead.
    let renewed = ahead.renew(&lease).unwrap();
    ahead.mark_dispatched(&renewed).unwrap();
    let closed = ahead
        .close(&renewed, Close::Succeeded("answer".into()))
        .unwrap();
    let server = Utc::now();
    let off = |t: chrono::DateTime<Utc>| (t - server).num_milliseconds().abs();
    assert!(off(renewed.expires_at - chrono::TimeDelta::seconds(30)) < 1_000);
    assert!(off(closed.tries[0].dispatched_at.unwrap()) < 1_000);
    assert!(off(closed.ended_at.unwrap()) < 1_000);
    assert_eq!(closed.version, 4);
    assert_eq!(ahead.get(&key).unwrap(), Some(closed));
}

#[test]
fn a_replica_whose_clock_runs_an_hour_fast_purges_nothing_early() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let config = Config {
        retention: Config::MIN_RETENTION,
        ..Config::default()
    };
    let fast = Ledger::with_clock(
        PgStore::connect(&url).unwrap(),
        config,
        Skewed(chrono::TimeDelta::minutes(90)),
    )
    .unwrap();
    let key = Key::new("t", "kept");
    let Begin::Started(lease) = fast.begin(&key, &fp(), "w").unwrap() else {
        panic!("a new key starts")
    };
    fast.mark_dispatched(&lease).unwrap();
    fast.close(&lease, Close::Succeeded("ok".into())).unwrap();
    // Ended a moment ago by the server's clock, which stamped it: an hour's
    // retention keeps it, whatever this replica's clock says.
    assert_eq!(fast.purge().unwrap(), 0);
    assert!(matches!(
        fast.begin(&key, &fp(), "w").unwrap(),
        Begin::Replay(_)
    ));
    // Ended two hours ago by the server's clock: purged.
    sql(
        &url,
        "UPDATE ate_ledger_records SET ended_at = now() - interval '2 hours'",
    );
    assert_eq!(fast.purge().unwrap(), 1);
}
