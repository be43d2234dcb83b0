//! TLS: every connection through the connector, real TLS fronts, untrusted certificates.

use super::*;

/// Waits (up to 10 s) for a call on `key` to succeed again after the
/// server ended every session: one call may fail, the next reconnects.
fn reconnected(ledger: &Ledger<PgStore>, key: &Key) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while ledger.get(key).is_err() {
        assert!(Instant::now() < deadline, "no reconnect");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TLS connector that counts the connections it is asked to secure and
/// leaves them plain: the store's plumbing, whatever the TLS crate.
#[derive(Clone, Default)]
struct CountingTls(std::sync::Arc<AtomicUsize>);

impl postgres::tls::MakeTlsConnect<postgres::Socket> for CountingTls {
    type Stream = postgres::tls::NoTlsStream;
    type TlsConnect = postgres::NoTls;
    type Error = postgres::tls::NoTlsError;

    fn make_tls_connect(&mut self, _domain: &str) -> Result<postgres::NoTls, Self::Error> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(postgres::NoTls)
    }
}

#[test]
fn every_connection_and_every_reconnection_goes_through_the_tls_connector() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let tls = CountingTls::default();
    let three = std::num::NonZeroUsize::new(3).unwrap();
    let ledger = Ledger::new(PgStore::connect_pooled_tls(&url, three, tls.clone()).unwrap());
    assert_eq!(tls.0.load(Ordering::SeqCst), 3, "one per connection");
    let key = Key::new("t", "tls");
    let _ = ledger.begin(&key, &fp(), "w").unwrap();
    for _ in 0..6 {
        ledger.get(&key).unwrap();
    }
    end_every_session(&url);
    // The store reconnects (one call may fail), through the connector.
    reconnected(&ledger, &key);
    for _ in 0..9 {
        ledger.get(&key).unwrap();
    }
    assert_eq!(
        tls.0.load(Ordering::SeqCst),
        6,
        "each of the three connections reopened through the connector"
    );
}

#[test]
fn sslmode_require_without_a_tls_connector_is_an_error_that_says_tls() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let err = PgStore::connect(&format!("{url} sslmode=require")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("TLS") || text.contains("tls"), "{text}");
}

/// TLS in front of the test server: a loopback TCP port that answers
/// PostgreSQL's SSLRequest with "S", terminates TLS (rustls, with the test
/// certificate in `tests/tls`) and passes the bytes to the server. Counts
/// the TLS sessions it completed.
struct TlsFront {
    port: u16,
    sessions: std::sync::Arc<AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

fn tls_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

fn ring() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

/// A front's runtime (one worker thread) and its listener on a free
/// loopback port.
fn loopback_front() -> (tokio::runtime::Runtime, tokio::net::TcpListener, u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    (runtime, listener, port)
}

fn tls_front(url: &str) -> TlsFront {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (host, port) = (param(url, "host").to_owned(), param(url, "port").to_owned());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(tls_file("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(tls_file("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let (runtime, listener, front_port) = loopback_front();
    let sessions = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = sessions.clone();
    runtime.spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            let (host, port) = (host.clone(), port.clone());
            tokio::spawn(async move {
                // SSLRequest: length 8, code 80877103. Anything else (a
                // client that did not ask for TLS) is hung up on.
                let mut request = [0u8; 8];
                if tcp.read_exact(&mut request).await.is_err()
                    || request != [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]
                    || tcp.write_all(b"S").await.is_err()
                {
                    return;
                }
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                if host.starts_with('/') {
                    let socket = format!("{host}/.s.PGSQL.{port}");
                    let mut server = tokio::net::UnixStream::connect(socket).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                } else {
                    let mut server = tokio::net::TcpStream::connect(format!("{host}:{port}"))
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                }
            });
        }
    });
    TlsFront {
        port: front_port,
        sessions,
        _runtime: runtime,
    }
}

/// A plain TCP front to the test server that counts the empty queries
/// clients send through it: the ping of `postgres::Client::is_valid`.
pub(super) struct PingCounter {
    pub(super) port: u16,
    pings: std::sync::Arc<AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

impl PingCounter {
    pub(super) fn pings(&self) -> usize {
        self.pings.load(Ordering::SeqCst)
    }
}

pub(super) fn ping_counter(url: &str) -> PingCounter {
    let (host, port) = (param(url, "host").to_owned(), param(url, "port").to_owned());
    let (runtime, listener, front_port) = loopback_front();
    let pings = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = pings.clone();
    runtime.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (client_in, client_out) = tcp.into_split();
            let (counted, host, port) = (counted.clone(), host.clone(), port.clone());
            tokio::spawn(async move {
                if host.starts_with('/') {
                    let socket = format!("{host}/.s.PGSQL.{port}");
                    let server = tokio::net::UnixStream::connect(socket).await.unwrap();
                    let (server_in, server_out) = server.into_split();
                    relay(client_in, client_out, server_in, server_out, &counted).await;
                } else {
                    let server = tokio::net::TcpStream::connect(format!("{host}:{port}"))
                        .await
                        .unwrap();
                    let (server_in, server_out) = server.into_split();
                    relay(client_in, client_out, server_in, server_out, &counted).await;
                }
            });
        }
    });
    PingCounter {
        port: front_port,
        pings,
        _runtime: runtime,
    }
}

/// Passes bytes both ways until either side ends (then drops both).
async fn relay(
    client_in: impl tokio::io::AsyncRead + Unpin,
    mut client_out: impl tokio::io::AsyncWrite + Unpin,
    mut server_in: impl tokio::io::AsyncRead + Unpin,
    server_out: impl tokio::io::AsyncWrite + Unpin,
    pings: &AtomicUsize,
) {
    tokio::select! {
        _ = count_pings(client_in, server_out, pings) => {}
        _ = tokio::io::copy(&mut server_in, &mut client_out) => {}
    }
}

/// Passes the client's messages on, counting its empty simple queries
/// (`Q`, length 5, the query `""`).
async fn count_pings(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    pings: &AtomicUsize,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The startup message has no type byte: its length, then the rest.
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await?;
    let mut rest = vec![0u8; (u32::from_be_bytes(length) as usize).saturating_sub(4)];
    from.read_exact(&mut rest).await?;
    to.write_all(&length).await?;
    to.write_all(&rest).await?;
    loop {
        let mut head = [0u8; 5];
        from.read_exact(&mut head).await?;
        let length = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; length.saturating_sub(4)];
        from.read_exact(&mut body).await?;
        if head[0] == b'Q' && body == [0] {
            pings.fetch_add(1, Ordering::SeqCst);
        }
        to.write_all(&head).await?;
        to.write_all(&body).await?;
    }
}

/// A rustls connector that trusts `roots` (PEM files in `tests/tls`).
fn rustls_connector(roots: &[&str]) -> tokio_postgres_rustls::MakeRustlsConnect {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        for cert in CertificateDer::pem_file_iter(tls_file(root)).unwrap() {
            store.add(cert.unwrap()).unwrap();
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// The database of `url`, through `front`, with TLS required.
fn through(front: &TlsFront, url: &str) -> String {
    format!(
        "host=127.0.0.1 port={} user={} dbname={} sslmode=require",
        front.port,
        param(url, "user"),
        param(url, "dbname")
    )
}

#[test]
fn a_store_connects_and_reconnects_over_real_tls() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let front = tls_front(&url);
    let three = std::num::NonZeroUsize::new(3).unwrap();
    let tls = rustls_connector(&["ca.pem"]);
    let ledger =
        Ledger::new(PgStore::connect_pooled_tls(&through(&front, &url), three, tls).unwrap());
    assert_eq!(
        front.sessions.load(Ordering::SeqCst),
        3,
        "a TLS session per connection"
    );
    let key = Key::new("t", "over-tls");
    let Begin::Started(lease) = ledger.begin(&key, &fp(), "w").unwrap() else {
        panic!("new key");
    };
    ledger.mark_dispatched(&lease).unwrap();
    ledger.close(&lease, Close::Succeeded("{}".into())).unwrap();
    // What went through TLS is in the database.
    assert!(
        Ledger::new(PgStore::connect(&url).unwrap())
            .get(&key)
            .unwrap()
            .is_some_and(|r| r.state.is_closed())
    );
    // A failover: every session ends; the store reopens its connections,
    // each through a new TLS session.
    end_every_session(&url);
    reconnected(&ledger, &key);
    for _ in 0..9 {
        assert!(matches!(
            ledger.begin(&key, &fp(), "w").unwrap(),
            Begin::Replay(_)
        ));
    }
    assert_eq!(front.sessions.load(Ordering::SeqCst), 6);
}

#[test]
fn a_server_certificate_the_connector_does_not_trust_is_a_storage_error_saying_so() {
    let db = TestDatabase::new();
    let url = db.url().to_owned();
    let front = tls_front(&url);
    // Trusting only the server's own certificate, not the CA that signed it.
    let tls = rustls_connector(&["server.pem"]);
    let err = PgStore::connect_pooled_tls(&through(&front, &url), std::num::NonZeroUsize::MIN, tls)
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Storage(_)), "{text}");
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(front.sessions.load(Ordering::SeqCst), 0);
}
