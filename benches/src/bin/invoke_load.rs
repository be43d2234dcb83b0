//! `/invoke` throughput of one example replica, its ledger on PostgreSQL
//! and on the embedded redb store, in one run: starts a throwaway
//! PostgreSQL server and two copies of the service binary (one with
//! `ATE_LEDGER_POSTGRES_URL`, one on its data dir's redb file), then
//! drives `POST /invoke` (a fresh `Idempotency-Key` per request, so each
//! is a whole begin, dispatch, close) from `CLIENTS` keep-alive
//! connections, alternating the two stores round by round. Prints one
//! JSON line per round.
//!
//! `cargo build --release -p ate-examples && cargo run --release -p
//! ate-benches --bin invoke_load -- [SERVICE_BINARY] [SECS] [CLIENTS]`
//! (default `target/release/axum-service`, 5 s, 32 clients). Give an
//! older build's binary to compare before and after in one run.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ate_benches::load_with;
use ate_ledger::testing::TestDatabase;

/// The service under load, killed when dropped.
struct Service(Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The service on `database` (`None`: its own redb file).
fn start(
    binary: &str,
    database: Option<&str>,
    data_dir: &std::path::Path,
) -> (Service, SocketAddr) {
    let mut command = Command::new(binary);
    command
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir);
    if let Some(url) = database {
        command.env("ATE_LEDGER_POSTGRES_URL", url);
    }
    let mut child = command
        .env("ATE_REQUEST_BUCKET_PER_MIN", "100000000")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("the service's first line");
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .parse()
        .expect("address");
    (Service(child), addr)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args
        .next()
        .unwrap_or_else(|| "target/release/axum-service".into());
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let clients: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let database = TestDatabase::new();
    let (pg_dir, redb_dir) = (
        tempfile::tempdir().expect("data dir"),
        tempfile::tempdir().expect("data dir"),
    );
    let (_pg, pg_addr) = start(&binary, Some(database.url()), pg_dir.path());
    let (_redb, redb_addr) = start(&binary, None, redb_dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for round in 0..3 {
        for (store, addr) in [("postgres", pg_addr), ("redb", redb_addr)] {
            let body = r#"{"amount":1}"#;
            let request = move |client: usize, n: u64| {
                format!(
                    "POST /invoke HTTP/1.1\r\nHost: {addr}\r\nX-Caller: client-{client}\r\n\
                     Idempotency-Key: r{round}-c{client}-n{n}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            };
            let r = rt
                .block_on(load_with(
                    addr,
                    clients,
                    Duration::from_millis(500),
                    Duration::from_secs(secs),
                    request,
                ))
                .expect("load");
            println!(
                "{{\"binary\":{binary:?},\"store\":\"{store}\",\"clients\":{clients},\"round\":{round},\"rps\":{:.0},\"p50_us\":{:.1},\"p99_us\":{:.1},\"requests\":{}}}",
                r.rps,
                r.p50.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.requests
            );
        }
    }
}
