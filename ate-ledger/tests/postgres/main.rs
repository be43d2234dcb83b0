//! `PgStore` against a real PostgreSQL server (feature `postgres`):
//! the store contract, several replicas racing on one database, corruption
//! and schema checks, and a broken connection (the reference model runs on
//! it in `model.rs`).
//!
//! Each test gets its own database from
//! [`ate_ledger::testing::TestDatabase`], dropped as it ends: on `ATE_TEST_POSTGRES_URL` if
//! set, else on a throwaway server started from the machine's PostgreSQL
//! binaries. A machine with neither fails these tests with a message
//! saying so: they are never skipped.
#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ate_ledger::testing::TestDatabase;
use ate_ledger::{
    Begin, Close, Config, Error, Fingerprint, Key, Ledger, PgStore,
    clock::ManualClock,
    store::{Cutoff, Store},
};
use chrono::{TimeZone, Utc};

fn sql(url: &str, statement: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(statement).unwrap();
}

/// Ends every other session on `url`'s database (a failover, an idle
/// timeout, a restart).
fn end_every_session(url: &str) {
    let db = param(url, "dbname");
    sql(
        url,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND pid <> pg_backend_pid()"
        ),
    );
}

fn fp() -> Fingerprint {
    Fingerprint("f".into())
}

/// `name=value` of a libpq-style connection string.
fn param<'a>(url: &'a str, name: &str) -> &'a str {
    url.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<Utc> {
    use ate_ledger::clock::Clock;
    clock.now()
}

mod clocks;
mod contract;
mod handles;
mod races;
mod reconnect;
mod schema;
mod tls;
