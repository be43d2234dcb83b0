//! Retention and purge, key validation, versions, configuration, Send and Sync.

use super::*;

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
