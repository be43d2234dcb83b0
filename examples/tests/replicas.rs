//! Several replicas behind one load balancer share one ledger
//! (`ATE_LEDGER_POSTGRES_URL`): a retry that lands on another replica
//! replays, waits or revives exactly as on the first, and the provider is
//! called once. With a ledger per replica, the retry on the second replica
//! would execute the request again.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

async fn invoke(
    c: &reqwest::Client,
    s: &Service,
    key: &str,
    body: &Value,
    simulate: &str,
    delay_ms: u64,
) -> reqwest::Response {
    c.post(s.url("/invoke"))
        .header("idempotency-key", key)
        .header("x-simulate", simulate)
        .header("x-simulate-delay-ms", delay_ms.to_string())
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Provider calls the replicas made: dispatched transitions, summed.
async fn dispatched(replicas: &[&Service]) -> u64 {
    let mut total = 0;
    for s in replicas {
        let text = s.metrics().await;
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("ate_ledger_transitions_total{outcome=\"dispatched\"} "))
            .map_or(0, |n| n.trim().parse::<u64>().unwrap());
    }
    total
}

#[tokio::test]
async fn a_retry_on_another_replica_replays_waits_or_revives_and_never_re_executes() {
    let database = ate_ledger::testing::TestDatabase::new();
    let url = database.url().to_owned();
    let env = [("ATE_LEDGER_POSTGRES_URL", url.as_str())];
    // One replica of each framework: the same API over one ledger.
    let a = Service::start(SERVICES[0], &env);
    let b = Service::start(SERVICES[1], &env);
    let c = client();
    let body = json!({"amount": 5});

    // Done on A, retried on B: replayed, not executed again.
    let first = invoke(&c, &a, "pay-1", &body, "success", 0).await;
    assert_eq!(first.status(), 200);
    let first_body = first.text().await.unwrap();
    let retry = invoke(&c, &b, "pay-1", &body, "success", 0).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await.unwrap(), first_body);
    assert_eq!(dispatched(&[&a, &b]).await, 1, "one provider call");
    // The same key with another request is refused on every replica.
    let other = invoke(&c, &b, "pay-1", &json!({"amount": 6}), "success", 0).await;
    assert_eq!(other.status(), 422);

    // In flight on A: B answers 409 with Retry-After, never a second call.
    let slow = {
        let (c, body, url) = (c.clone(), body.clone(), a.url("/invoke"));
        tokio::spawn(async move {
            c.post(url)
                .header("idempotency-key", "pay-2")
                .header("x-simulate", "success")
                .header("x-simulate-delay-ms", "1500")
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    eventually(Duration::from_secs(5), || async {
        dispatched(&[&a, &b]).await == 2
    })
    .await;
    let during = invoke(&c, &b, "pay-2", &body, "success", 0).await;
    assert_eq!(during.status(), 409);
    assert!(during.headers().contains_key("retry-after"));
    assert_eq!(slow.await.unwrap(), 200);
    let after = invoke(&c, &b, "pay-2", &body, "success", 0).await;
    assert_eq!(after.headers()["idempotent-replayed"], "true");

    // Failed before dispatch on B: the retry on A revives it and runs.
    let failed = invoke(&c, &b, "pay-3", &body, "credential_error", 0).await;
    assert_eq!(failed.status(), 424);
    let revived = invoke(&c, &a, "pay-3", &body, "success", 0).await;
    assert_eq!(revived.status(), 200);
    assert!(revived.headers().get("idempotent-replayed").is_none());

    // Dispatched and lost on A: never executed again, on any replica.
    let lost = invoke(&c, &a, "pay-4", &body, "timeout", 0).await;
    assert_eq!(lost.status(), 504);
    let again = invoke(&c, &b, "pay-4", &body, "success", 0).await;
    assert_eq!(again.status(), 504);
    assert_eq!(dispatched(&[&a, &b]).await, 4, "pay-1..4, once each");
}

#[tokio::test]
async fn a_ledger_database_that_cannot_be_reached_stops_the_start_naming_the_variable() {
    for bin in SERVICES {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env(
                "ATE_LEDGER_POSTGRES_URL",
                "host=/nonexistent-ate-socket-dir user=ate password=hunter2",
            )
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin}");
        assert!(
            stderr.contains("ATE_LEDGER_POSTGRES_URL"),
            "{bin}: {stderr}"
        );
        assert!(!stderr.contains("hunter2"), "{bin}: {stderr}");
        let empty = std::process::Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("ATE_LEDGER_POSTGRES_URL", "")
            .output()
            .unwrap();
        assert!(!empty.status.success(), "{bin}");
        assert!(
            String::from_utf8_lossy(&empty.stderr).contains("ATE_LEDGER_POSTGRES_URL"),
            "{bin}"
        );
    }
}

/// Runs `statement` on the test server's `postgres` database (off the
/// async runtime: the `postgres` client runs a runtime of its own).
fn admin(url: &str, statement: String) {
    let admin_url = format!("{} dbname=postgres", url.rsplit_once(" dbname=").unwrap().0);
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        c.batch_execute(&statement).unwrap();
    })
    .join()
    .unwrap();
}

/// The ledger's database goes away: it refuses new connections and ends
/// the services' (a failover, a restart).
fn database_away(url: &str) {
    let db = dbname(url);
    admin(
        url,
        format!(
            "ALTER DATABASE {db} ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"
        ),
    );
}

/// The ledger's database takes connections again.
fn database_back(url: &str) {
    let db = dbname(url);
    admin(url, format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true"));
}

/// The database a connection string names.
fn dbname(url: &str) -> &str {
    url.rsplit_once("dbname=").unwrap().1
}

#[tokio::test]
async fn a_ledger_database_that_goes_away_is_503_with_retry_after_and_comes_back() {
    let database = ate_ledger::testing::TestDatabase::new();
    let url = database.url().to_owned();
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_LEDGER_POSTGRES_URL", url.as_str())]);
        let c = client();
        let body = json!({"amount": 1});
        let key = format!("outage-{}", bin.len());
        assert_eq!(
            invoke(&c, &s, &key, &body, "success", 0).await.status(),
            200
        );
        // The database goes away: it refuses new connections and ends the
        // service's (a failover, a restart).
        database_away(&url);
        let down = invoke(&c, &s, &format!("{key}-b"), &body, "success", 0).await;
        assert_eq!(down.status(), 503, "{bin}");
        assert_eq!(down.headers()["retry-after"], "1", "{bin}");
        let error: Value = down.json().await.unwrap();
        assert_eq!(error["retryable"], true, "{bin}: {error}");
        assert_eq!(
            error["error"], "the ledger's store is unavailable",
            "{bin}: the database's own error stays in the log"
        );
        assert_eq!(
            dispatched(&[&s]).await,
            1,
            "{bin}: nothing was sent while down"
        );
        // Back: the next call reconnects and runs.
        database_back(&url);
        let up = invoke(&c, &s, &format!("{key}-b"), &body, "success", 0).await;
        assert_eq!(up.status(), 200, "{bin}");
        let replay = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(replay.headers()["idempotent-replayed"], "true", "{bin}");
    }
}

#[tokio::test]
async fn a_database_outage_while_the_provider_answers_does_not_lose_the_answer() {
    let database = ate_ledger::testing::TestDatabase::new();
    let url = database.url().to_owned();
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_LEDGER_POSTGRES_URL", url.as_str())]);
        let c = client();
        let body = json!({"amount": 1});
        let key = format!("blip-{}", bin.len());
        // A call whose provider answers after 1.5 s ...
        let call = {
            let (c, u, key) = (c.clone(), s.url("/invoke"), key.clone());
            tokio::spawn(async move {
                c.post(u)
                    .header("idempotency-key", key)
                    .header("x-simulate-delay-ms", "1500")
                    .json(&json!({"amount": 1}))
                    .send()
                    .await
                    .unwrap()
            })
        };
        s.wait_for_metric("ate_ledger_transitions_total{outcome=\"dispatched\"} 1")
            .await;
        // ... while the database is away, from before the answer until
        // well after it (a failover).
        database_away(&url);
        tokio::time::sleep(Duration::from_millis(3000)).await;
        database_back(&url);
        // The answer was recorded once the database came back.
        let answered = call.await.unwrap();
        assert_eq!(answered.status(), 200, "{bin}");
        let replay = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(replay.status(), 200, "{bin}");
        assert_eq!(replay.headers()["idempotent-replayed"], "true", "{bin}");
        assert_eq!(dispatched(&[&s]).await, 1, "{bin}: sent once");
    }
}

/// Runs `statement` in the ledger's own database.
fn in_database(url: &str, statement: &'static str) {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(statement).unwrap();
    })
    .join()
    .unwrap();
}

#[tokio::test]
async fn a_store_failure_at_the_dispatch_frees_the_key_once_the_store_is_back() {
    let database = ate_ledger::testing::TestDatabase::new();
    let url = database.url().to_owned();
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_LEDGER_POSTGRES_URL", url.as_str())]);
        let c = client();
        let body = json!({"amount": 1});
        let key = format!("undispatched-{}", bin.len());
        // The store takes the attempt's first write (an insert) and then
        // fails every update: the dispatch, and any close, until it is back.
        in_database(
            &url,
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'the store is failing'; END $$; \
             CREATE TRIGGER refuse BEFORE UPDATE ON ate_ledger_records \
             FOR EACH ROW EXECUTE FUNCTION refuse()",
        );
        let failed = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(failed.status(), 503, "{bin}");
        assert_eq!(dispatched(&[&s]).await, 0, "{bin}: nothing was sent");
        // A failure known before the dispatch (credentials) waits for the
        // store to record it, as a provider's answer does.
        let credential = {
            let (c, u, key) = (c.clone(), s.url("/invoke"), format!("{key}-credential"));
            tokio::spawn(async move {
                let res = c.post(u).header("idempotency-key", key);
                let res = res.header("x-simulate", "credential_error");
                res.json(&json!({"amount": 1})).send().await.unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(1500)).await;
        in_database(
            &url,
            "DROP TRIGGER refuse ON ate_ledger_records; DROP FUNCTION refuse()",
        );
        assert_eq!(credential.await.unwrap().status(), 424, "{bin}");
        // Back: a retry runs the call within a second or two, not after the
        // first try's lease (30 s) has run out.
        let mut statuses = Vec::new();
        let started = std::time::Instant::now();
        let answer = loop {
            let res = invoke(&c, &s, &key, &body, "success", 0).await;
            statuses.push(res.status().as_u16());
            if res.status() != 409 || started.elapsed() > Duration::from_secs(5) {
                break res;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(answer.status(), 200, "{bin}: {statuses:?}");
        let replay = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(replay.headers()["idempotent-replayed"], "true", "{bin}");
        assert_eq!(dispatched(&[&s]).await, 1, "{bin}: sent once");
    }
}

#[tokio::test]
async fn a_replica_restarted_under_its_worker_id_resolves_its_own_attempts_at_once() {
    let database = ate_ledger::testing::TestDatabase::new();
    let url = database.url().to_owned();
    let pg = ("ATE_LEDGER_POSTGRES_URL", url.as_str());
    let b = Service::start(SERVICES[1], &[pg, ("ATE_WORKER_ID", "pod-b")]);
    let c = client();
    let body = json!({"amount": 7});
    // B's own call in flight: a live lease of another worker, held (10 s)
    // past both of A's restarts below.
    let b_call = {
        let (c, body, url) = (c.clone(), body.clone(), b.url("/invoke"));
        tokio::spawn(async move {
            c.post(url)
                .header("idempotency-key", "b-live")
                .header("x-simulate-delay-ms", "10000")
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    b.wait_for_metric("ate_ledger_transitions_total{outcome=\"dispatched\"} 1")
        .await;
    for bin in SERVICES {
        let key = format!("crash-{}", bin.len());
        {
            let a = Service::start(bin, &[pg, ("ATE_WORKER_ID", "pod-a")]);
            let slow = c
                .post(a.url("/invoke"))
                .header("idempotency-key", &key)
                .header("x-simulate-delay-ms", "30000")
                .json(&body)
                .send();
            let pending = tokio::spawn(slow);
            a.wait_for_metric("ate_ledger_transitions_total{outcome=\"dispatched\"} 1")
                .await;
            drop(a); // SIGKILL mid-call
            assert!(pending.await.unwrap().is_err(), "{bin}");
        }
        // Its lease (30 s) is live: on a shared ledger B must wait it out...
        let during = invoke(&c, &b, &key, &body, "success", 0).await;
        assert_eq!(during.status(), 409, "{bin}");
        // ...unless the worker comes back under its name (a restarted pod):
        // its own attempt is resolved at start, by the dispatch rule.
        let a = Service::start(bin, &[pg, ("ATE_WORKER_ID", "pod-a")]);
        let retry = invoke(&c, &b, &key, &body, "success", 0).await;
        assert_eq!(
            retry.status(),
            504,
            "{bin}: dispatched, so never re-executed"
        );
        a.wait_for_stderr("recovered open attempts").await;
    }
    // B's live call was left alone and finishes as its own.
    assert_eq!(b_call.await.unwrap(), 200);
}

#[tokio::test]
async fn a_replica_that_lost_its_lease_mid_call_answers_what_the_ledger_recorded() {
    let database = ate_ledger::testing::TestDatabase::new();
    let url = database.url().to_owned();
    let env = [
        ("ATE_LEDGER_POSTGRES_URL", url.as_str()),
        ("ATE_LEDGER_LEASE_SECS", "1"),
    ];
    for (first, second) in [(0, 1), (1, 0)] {
        let a = Service::start(SERVICES[first], &env);
        let b = Service::start(SERVICES[second], &env);
        let c = client();
        let key = format!("paused-{first}");
        let slow = {
            let (c, url, key) = (c.clone(), a.url("/invoke"), key.clone());
            tokio::spawn(async move {
                let res = c
                    .post(url)
                    .header("idempotency-key", key)
                    .header("x-simulate-delay-ms", "1500")
                    .json(&json!({"amount": 5}))
                    .send()
                    .await
                    .unwrap();
                let replayed = res.headers().contains_key("idempotent-replayed");
                (res.status(), replayed, res.text().await.unwrap())
            })
        };
        // A is frozen mid-call (a VM pause, a long GC, SIGSTOP) past its
        // lease: a retry on B takes the attempt over and, as it was
        // dispatched, closes it provider_unavailable.
        a.wait_for_metric("ate_ledger_transitions_total{outcome=\"dispatched\"} 1")
            .await;
        a.signal("STOP");
        tokio::time::sleep(Duration::from_millis(1800)).await;
        let retry = invoke(&c, &b, &key, &json!({"amount": 5}), "success", 0).await;
        let retry_status = retry.status();
        a.signal("CONT");
        assert_eq!(retry_status, 504, "{}", retry.text().await.unwrap());
        // A wakes up, its call ends, its close is refused (the lease is
        // stale): it answers what the ledger holds, as every retry will,
        // not a 500.
        let (status, replayed, body) = slow.await.unwrap();
        assert_eq!(status, 504, "{}: {body}", SERVICES[first]);
        assert!(replayed, "the answer is the ledger's record: {body}");
        assert!(body.contains("provider_unavailable"), "{body}");
        assert_eq!(dispatched(&[&a, &b]).await, 1, "one provider call");
    }
}

/// What [`AnswerProxy`] does to the answer to the next statement of a kind.
#[derive(Debug, Clone, Copy)]
enum Lose {
    /// The connection is cut once the server has committed it, before the
    /// client hears so.
    Cut,
    /// The client hears so this much later.
    Delay(Duration),
}

/// A TCP proxy to the test database that can lose the answer to the next
/// INSERT (a begin) or UPDATE (a dispatch, a close): a store connection
/// that fails after the commit.
struct AnswerProxy {
    /// The connection string through it.
    url: String,
    lose: Armed,
}

/// The statement's command tag (`INSERT`, `UPDATE`) whose answer to lose
/// next, and how.
type Armed = std::sync::Arc<parking_lot::Mutex<Option<(&'static str, Lose)>>>;

impl AnswerProxy {
    /// Starts it on a thread and runtime of its own: the services connect
    /// through it while the test thread blocks on their start.
    fn start(url: &str) -> Self {
        let (mut host, mut port, mut rest) = ("localhost".to_owned(), "5432".to_owned(), vec![]);
        for part in url.split_whitespace() {
            match part.split_once('=') {
                Some(("host", h)) => host = h.to_owned(),
                Some(("port", p)) => port = p.to_owned(),
                _ => rest.push(part.to_owned()),
            }
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!(
            "host=127.0.0.1 port={} sslmode=disable {}",
            listener.local_addr().unwrap().port(),
            rest.join(" ")
        );
        let lose = std::sync::Arc::new(parking_lot::Mutex::new(None));
        let armed = lose.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let (client, _) = listener.accept().await.unwrap();
                    let (host, port, armed) = (host.clone(), port.clone(), armed.clone());
                    tokio::spawn(async move {
                        let (to_client_r, to_client_w) = client.into_split();
                        if host.starts_with('/') {
                            let path = format!("{host}/.s.PGSQL.{port}");
                            let server = tokio::net::UnixStream::connect(path).await.unwrap();
                            let (r, w) = server.into_split();
                            relay(to_client_r, to_client_w, r, w, armed).await;
                        } else {
                            let server = tokio::net::TcpStream::connect(format!("{host}:{port}"))
                                .await
                                .unwrap();
                            let (r, w) = server.into_split();
                            relay(to_client_r, to_client_w, r, w, armed).await;
                        }
                    });
                }
            });
        });
        Self { url, lose }
    }

    fn lose_next_answer(&self, to: &'static str, how: Lose) {
        *self.lose.lock() = Some((to, how));
    }
}

/// Copies the client's bytes to the server, and the server's messages
/// (a type byte, a length, a body) to the client, losing one answer as
/// armed: after the statement's CommandComplete, its ReadyForQuery (sent once
/// the implicit transaction has committed) is cut or held back.
async fn relay(
    mut client_r: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    mut client_w: impl tokio::io::AsyncWrite + Unpin,
    mut server_r: impl tokio::io::AsyncRead + Unpin,
    mut server_w: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    armed: Armed,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_r, &mut server_w).await;
    });
    let mut pending = None;
    loop {
        let mut head = [0u8; 5];
        if server_r.read_exact(&mut head).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if server_r.read_exact(&mut body).await.is_err() {
            break;
        }
        if head[0] == b'C' {
            let mut armed = armed.lock();
            if let Some((tag, how)) = *armed
                && body.starts_with(tag.as_bytes())
            {
                pending = Some(how);
                *armed = None;
            }
        }
        if head[0] == b'Z' {
            match pending.take() {
                Some(Lose::Cut) => break,
                Some(Lose::Delay(d)) => tokio::time::sleep(d).await,
                None => {}
            }
        }
        if client_w.write_all(&head).await.is_err() || client_w.write_all(&body).await.is_err() {
            break;
        }
    }
    // Cut: both ways.
    upstream.abort();
    let _ = client_w.shutdown().await;
}

/// Whether the ledger's record of `id` is open, and how many tries it has.
fn record_of(url: &str, id: &str) -> (bool, usize) {
    let (url, id) = (url.to_owned(), id.to_owned());
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let row = c
            .query_one(
                "SELECT open, record FROM ate_ledger_records WHERE id = $1",
                &[&id],
            )
            .unwrap();
        let record: Value = serde_json::from_str(row.get::<_, &str>(1)).unwrap();
        (row.get(0), record["tries"].as_array().unwrap().len())
    })
    .join()
    .unwrap()
}

#[tokio::test]
async fn a_store_answer_lost_after_the_commit_neither_holds_the_key_nor_sends_twice() {
    let database = ate_ledger::testing::TestDatabase::new();
    let proxy = AnswerProxy::start(database.url());
    for bin in SERVICES {
        let s = Service::start(bin, &[("ATE_LEDGER_POSTGRES_URL", proxy.url.as_str())]);
        let c = client();
        let body = json!({"amount": 3});
        // The begin is written, and its answer lost with the connection:
        // the begin, tried again, finds the try in flight under this
        // worker's lease, takes it over and runs it (it was a 503, and the
        // client's retry then a 409 until the try's lease, 30 s, ran out).
        let key = format!("lost-begin-{}", bin.len());
        proxy.lose_next_answer("INSERT", Lose::Cut);
        let lost = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(lost.status(), 200, "{bin}");
        assert_eq!(
            record_of(database.url(), &key),
            (false, 1),
            "{bin}: one try"
        );
        assert_eq!(dispatched(&[&s]).await, 1, "{bin}");
        assert!(
            has_sample(
                &s.metrics().await,
                "ate_ledger_transitions_total{outcome=\"adopted\"} 1"
            ),
            "{bin}"
        );
        // A try whose request is still waiting for the begin's answer is
        // that request's: a second request on the key is a 409, and the
        // first one runs.
        let key = format!("slow-begin-{}", bin.len());
        proxy.lose_next_answer("INSERT", Lose::Delay(Duration::from_millis(1500)));
        let first = {
            let (c, body, url, key) = (c.clone(), body.clone(), s.url("/invoke"), key.clone());
            tokio::spawn(async move {
                let res = c.post(url).header("idempotency-key", key);
                res.json(&body).send().await.unwrap().status()
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(record_of(database.url(), &key), (true, 1), "{bin}");
        let second = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(second.status(), 409, "{bin}");
        assert_eq!(first.await.unwrap(), 200, "{bin}");
        assert_eq!(dispatched(&[&s]).await, 2, "{bin}");
        // A revive whose answer is lost landed: the request begins again,
        // finds the new try in flight under this worker's lease, takes it
        // over and runs it (it was a 503, and then the client's retry).
        let key = format!("lost-revive-{}", bin.len());
        let failed = invoke(&c, &s, &key, &body, "credential_error", 0).await;
        assert_eq!(failed.status(), 424, "{bin}");
        proxy.lose_next_answer("UPDATE", Lose::Cut);
        let revived = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(revived.status(), 200, "{bin}");
        assert_eq!(
            record_of(database.url(), &key),
            (false, 2),
            "{bin}: two tries"
        );
        assert_eq!(dispatched(&[&s]).await, 3, "{bin}: sent once");
        // A dispatch whose answer is lost landed: marking it again finds it
        // marked, which is as durable, and the call runs, once. (It was a
        // 503 that sent nothing, and then 409 until the lease ran out and
        // 504 for good: never sent, yet resolved as maybe sent.)
        let key = format!("lost-dispatch-{}", bin.len());
        proxy.lose_next_answer("UPDATE", Lose::Cut);
        let lost = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(lost.status(), 200, "{bin}");
        assert_eq!(dispatched(&[&s]).await, 4, "{bin}: sent once");
        assert_eq!(record_of(database.url(), &key), (false, 1), "{bin}");
        let retry = invoke(&c, &s, &key, &body, "success", 0).await;
        assert_eq!(retry.headers()["idempotent-replayed"], "true", "{bin}");
        // A close whose answer is lost landed: closing again finds it
        // closed so, and the client gets the provider's answer as the
        // call's own (it was answered as a replay, with a warning that the
        // lease was lost).
        let key = format!("lost-close-{}", bin.len());
        let call = {
            let (c, body, url, key) = (c.clone(), body.clone(), s.url("/invoke"), key.clone());
            tokio::spawn(async move {
                let res = c.post(url).header("idempotency-key", key);
                let res = res.header("x-simulate-delay-ms", "800").json(&body);
                let res = res.send().await.unwrap();
                let replayed = res.headers().contains_key("idempotent-replayed");
                (res.status(), replayed, res.text().await.unwrap())
            })
        };
        eventually(Duration::from_secs(5), || async {
            dispatched(&[&s]).await == 5
        })
        .await;
        proxy.lose_next_answer("UPDATE", Lose::Cut);
        let (status, replayed, answer) = call.await.unwrap();
        assert_eq!(status, 200, "{bin}: {answer}");
        assert!(answer.contains("rcpt-"), "{bin}: {answer}");
        // Its own answer, not a replay of another worker's resolution.
        assert!(!replayed, "{bin}");
        assert!(s.stderr().contains("cannot close the attempt yet"), "{bin}");
        assert!(!s.stderr().contains("lost the lease"), "{bin}");
        assert_eq!(record_of(database.url(), &key), (false, 1), "{bin}");
        assert_eq!(dispatched(&[&s]).await, 5, "{bin}: sent once");
    }
}
