//! One durable ledger transition on PostgreSQL against the floor: a bare
//! conditional `UPDATE ... WHERE version = $1` round trip (prepared, as
//! the store's statements are; the unprepared one, two round trips, is
//! printed beside it), all on the same `deadpool-postgres` pool,
//! interleaved in rounds. The transition is the owner's `renew`: the
//! ledger wrote the record last, so it writes the renewal at once,
//! conditional on that version (one round trip; see `ate-ledger`'s
//! `written` module). The store's prepared read of the same row is timed
//! beside it: a transition that must read first (a lost race, or the
//! first one after a lease's ttl) costs the read plus the update.
//! Prints JSON lines.
//!
//! `cargo run --release -p ate-benches --bin ledger_pg_ab -- [N]`
//! (a throwaway PostgreSQL server from the machine's binaries, or
//! `ATE_TEST_POSTGRES_URL`).

use std::time::{Duration, Instant};

use ate_ledger::testing::TestDatabase;
use ate_ledger::{AsyncLedger, AsyncPgStore, Begin, Fingerprint, Key};

fn pct(mut v: Vec<Duration>, p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1e6
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000);
    let db = TestDatabase::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = AsyncPgStore::connect(db.url(), 2).await.expect("store");
        let pool = store.pool().clone();
        let ledger = AsyncLedger::new(store);
        let client = pool.get().await.expect("connection");
        client
            .batch_execute(
                "CREATE TABLE floor (id INT PRIMARY KEY, version BIGINT NOT NULL, body TEXT);
                 INSERT INTO floor VALUES (1, 0, repeat('x', 400));",
            )
            .await
            .expect("floor table");
        drop(client);
        let key = Key::new("bench", "renew");
        let Ok(Begin::Started(mut lease)) =
            ledger.begin(&key, &Fingerprint("fp".into()), "bench").await
        else {
            panic!("begin")
        };
        const FLOOR: &str =
            "UPDATE floor SET version = $2, body = body WHERE id = 1 AND version = $1";
        const READ: &str = "SELECT now(), version, open, record FROM ate_ledger_records
             WHERE scope = $1 AND id = $2";
        let (mut ate, mut floor, mut unprepared, mut read) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in (0_i64..).take(n) {
            let t = Instant::now();
            lease = ledger.renew(&lease).await.expect("renew");
            ate.push(t.elapsed());
            // The floor as the store runs its statements: prepared once per
            // connection, one round trip.
            let version = 2 * round;
            let t = Instant::now();
            let c = pool.get().await.expect("connection");
            let statement = c.prepare_cached(FLOOR).await.expect("prepare");
            let updated = c
                .execute(&statement, &[&version, &(version + 1)])
                .await
                .expect("update");
            floor.push(t.elapsed());
            assert_eq!(updated, 1);
            drop(c);
            // And as a bare `execute(&str)`: parsed on every call, two
            // round trips.
            let version = version + 1;
            let t = Instant::now();
            let c = pool.get().await.expect("connection");
            let updated = c
                .execute(FLOOR, &[&version, &(version + 1)])
                .await
                .expect("update");
            unprepared.push(t.elapsed());
            assert_eq!(updated, 1);
            drop(c);
            // The read half of a transition: the ledger's row and `now()`.
            let t = Instant::now();
            let c = pool.get().await.expect("connection");
            let statement = c.prepare_cached(READ).await.expect("prepare");
            let row = c
                .query_one(&statement, &[&key.scope, &key.id])
                .await
                .expect("read");
            read.push(t.elapsed());
            assert!(row.get::<_, String>(3).contains("renew"));
        }
        let (a, f, r) = (
            pct(ate.clone(), 0.5),
            pct(floor.clone(), 0.5),
            pct(read, 0.5),
        );
        println!(
            "{{\"what\":\"pg_transition\",\"n\":{n},\"ate_p50_us\":{a:.1},\"ate_p99_us\":{:.1},\"update_p50_us\":{f:.1},\"update_p99_us\":{:.1},\"ratio_p50\":{:.2},\"unprepared_update_p50_us\":{:.1},\"read_p50_us\":{r:.1},\"ratio_to_read_plus_update_p50\":{:.2}}}",
            pct(ate, 0.99),
            pct(floor, 0.99),
            a / f,
            pct(unprepared, 0.5),
            a / (r + f),
        );
    });
}
