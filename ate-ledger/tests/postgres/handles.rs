//! Test databases dropped with their handles; what a store shows in Debug.

use super::*;

#[test]
fn a_test_database_is_dropped_with_its_handle_even_with_connections_open() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let name = param(&url, "dbname").to_owned();
    let admin_url = format!("{} dbname=postgres", url.rsplit_once(" dbname=").unwrap().0);
    let exists = || {
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        let row = admin
            .query_one(
                "SELECT count(*) FROM pg_database WHERE datname = $1",
                &[&name],
            )
            .unwrap();
        row.get::<_, i64>(0) == 1
    };
    // A store still connected to it, as in a test that panicked.
    let store = PgStore::connect(&url).unwrap();
    let ledger = Ledger::new(store);
    let _ = ledger.begin(&Key::new("t", "a"), &fp(), "w").unwrap();
    assert!(exists());
    drop(db);
    assert!(!exists(), "database {name} still exists");
    drop(ledger);
}

#[test]
fn a_stores_debug_names_its_database_and_user_but_never_the_password() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    // The throwaway server trusts local connections: the password is sent
    // to no one, but the store is given it, as a service's would be.
    let store = PgStore::connect(&format!("{url} password=CANARY-pw-7f3a")).unwrap();
    let shown = format!("{store:?}");
    let (dbname, user) = (param(&url, "dbname"), param(&url, "user"));
    assert!(
        shown.starts_with("PgStore { target: ")
            && shown.contains(&format!("dbname={dbname} user={user} (1 host(s))")),
        "{shown}"
    );
    assert!(!shown.contains("CANARY"), "{shown}");
}
