//! The preStop hook's drain request, against real loopback sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ate_readiness::prestop::{DrainRequest, PreStopError};
use ate_readiness::testing::unused_loopback_port;
use ate_readiness::{DrainToken, TokenError};

/// A fixed secret, so a test can look for it in the request.
const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn token() -> DrainToken {
    DrainToken::from_secret(SECRET).unwrap()
}

/// A one-shot server on `bind` that answers `answer` and hands back the
/// request it read.
fn serve_once(bind: &str, answer: &'static str) -> (u16, JoinHandle<String>) {
    serve_once_on(TcpListener::bind(bind).unwrap(), answer)
}

/// [`serve_once`] on a listener bound already.
fn serve_once_on(listener: TcpListener, answer: &'static str) -> (u16, JoinHandle<String>) {
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        s.write_all(answer.as_bytes()).unwrap();
        String::from_utf8(request).unwrap()
    });
    (port, handle)
}

/// Where [`unused_loopback_port`] looks for the port the IPv6-only test
/// binds...
const IPV6_ONLY: u16 = 20_000;
/// ... and, apart from it, for the tests that need nothing listening.
const NOTHING: u16 = 25_000;

#[test]
fn a_drain_request_is_a_post_to_the_path_on_loopback_and_returns_the_body() {
    let (port, server) = serve_once(
        "127.0.0.1:0",
        "HTTP/1.1 200 OK\r\ncontent-length: 16\r\n\r\n{\"started\":true}",
    );
    let reply = DrainRequest::new(port).token(token()).send().unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, "{\"started\":true}");
    assert_eq!(reply.addr, SocketAddr::from(([127, 0, 0, 1], port)));
    let request = server.join().unwrap();
    assert!(
        request.starts_with("POST /__internal/drain HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains("Content-Length: 0\r\n"), "{request}");
    assert!(
        request.contains(&format!("Authorization: Bearer {SECRET}\r\n")),
        "{request}"
    );
}

#[test]
fn the_secret_is_read_from_the_file_the_service_wrote() {
    let dir = std::env::temp_dir().join(format!("ate-prestop-token-{}", std::process::id()));
    let file = dir.join("drain.token");
    let published = token().publish(&file).unwrap();
    let (port, server) = serve_once(
        "127.0.0.1:0",
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
    );
    DrainRequest::new(port).token_file(&file).send().unwrap();
    assert!(server.join().unwrap().contains(SECRET));
    drop(published);
    // No file: an error naming it, and nothing sent.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let err = DrainRequest::new(port)
        .token_file(&file)
        .send()
        .unwrap_err();
    assert!(
        matches!(&err, PreStopError::Token(TokenError::Read { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_service_on_ipv6_loopback_only_is_reached_on_it() {
    // Bound on ::1; nothing on 127.0.0.1 at that port.
    let listener = TcpListener::bind(("::1", unused_loopback_port(IPV6_ONLY))).unwrap();
    let (port, server) = serve_once_on(
        listener,
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    );
    let reply = DrainRequest::new(port)
        .token(token())
        .path("drain")
        .send()
        .unwrap();
    assert_eq!(
        reply.addr,
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
    );
    assert_eq!(reply.body, "ok");
    assert!(
        server
            .join()
            .unwrap()
            .starts_with("POST /drain HTTP/1.1\r\n")
    );
}

#[test]
fn a_refusal_names_the_endpoint_the_status_and_what_it_said() {
    let (port, _server) = serve_once(
        "127.0.0.1:0",
        "HTTP/1.1 403 Forbidden\r\ncontent-length: 42\r\nconnection: close\r\n\r\n{\"error\":\"drain is allowed from loopback\"}",
    );
    let err = DrainRequest::new(port).token(token()).send().unwrap_err();
    assert!(
        matches!(&err, PreStopError::Refused { status: 403, .. }),
        "{err:?}"
    );
    let said = err.to_string();
    assert!(
        said.contains(&format!(
            "http://127.0.0.1:{port}/__internal/drain answered 403"
        )) && said.contains("drain is allowed from loopback"),
        "{said}"
    );
}

#[test]
fn nothing_listening_says_where_the_service_must_listen() {
    let port = unused_loopback_port(NOTHING);
    let err = DrainRequest::new(port).token(token()).send().unwrap_err();
    assert!(matches!(&err, PreStopError::NotListening { .. }), "{err:?}");
    let said = err.to_string();
    assert!(
        said.contains(&format!("127.0.0.1:{port}"))
            && said.contains(&format!("[::1]:{port}"))
            && said.contains("0.0.0.0"),
        "{said}"
    );
}

#[test]
fn an_answer_that_is_not_http_is_an_error_not_a_success() {
    let (port, _server) = serve_once("127.0.0.1:0", "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    let err = DrainRequest::new(port).token(token()).send().unwrap_err();
    assert!(matches!(&err, PreStopError::NotHttp { .. }), "{err:?}");
    assert!(err.to_string().contains("SSH-2.0"), "{err}");
}

#[test]
fn a_silent_endpoint_times_out_within_the_bound() {
    // Accepts, reads, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _hold = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let start = Instant::now();
    let err = DrainRequest::new(port)
        .token(token())
        .timeout(Duration::from_millis(200))
        .send()
        .unwrap_err();
    assert!(matches!(&err, PreStopError::Io { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn the_hook_sleeps_whatever_happened_and_exits_1_on_failure() {
    let start = Instant::now();
    let code = DrainRequest::new(unused_loopback_port(NOTHING))
        .token(token())
        .run_hook(Duration::from_millis(300));
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(code, std::process::ExitCode::from(1));
    let (port, _server) = serve_once(
        "127.0.0.1:0",
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
    );
    assert_eq!(
        DrainRequest::new(port)
            .token(token())
            .run_hook(Duration::ZERO),
        std::process::ExitCode::SUCCESS
    );
}

/// A one-shot server that reads the request, answers `answer`, and then
/// holds the connection open (ignoring `Connection: close`) until the
/// client hangs up.
fn serve_and_hold(answer: Vec<u8>) -> (u16, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).unwrap();
        s.write_all(&answer).unwrap();
        while s.read(&mut buf).is_ok_and(|n| n > 0) {}
    });
    (port, server)
}

#[test]
fn an_answer_is_read_to_its_length_even_if_the_server_keeps_the_connection() {
    // The answer's length says it is whole.
    let (port, server) = serve_and_hold(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec());
    let start = Instant::now();
    let reply = DrainRequest::new(port).token(token()).send().unwrap();
    assert_eq!(reply.body, "{}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    server.join().unwrap();
}

#[test]
fn an_answer_without_an_end_is_read_to_64_kib_not_waited_on() {
    // No length, no chunking, 100 KiB: the request stops reading at 64 KiB
    // instead of waiting for a close.
    let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    answer.resize(answer.len() + 100 * 1024, b'x');
    let (port, server) = serve_and_hold(answer);
    let reply = DrainRequest::new(port).token(token()).send().unwrap();
    assert_eq!(reply.status, 200);
    assert!(reply.body.len() < 64 * 1024, "{}", reply.body.len());
    server.join().unwrap();
}

#[test]
fn any_2xx_answer_is_a_success() {
    let (port, _server) = serve_once(
        "127.0.0.1:0",
        "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
    );
    let reply = DrainRequest::new(port).token(token()).send().unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (202, ""));
}

#[test]
fn a_refusal_quotes_at_most_1024_characters_of_what_it_said() {
    let body = "é".repeat(5_000);
    let answer = format!(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (port, _server) = serve_once("127.0.0.1:0", Box::leak(answer.into_boxed_str()));
    match DrainRequest::new(port).token(token()).send().unwrap_err() {
        PreStopError::Refused { status, body, .. } => {
            assert_eq!(status, 500);
            assert_eq!(body, "é".repeat(1024));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_zero_timeout_is_taken_as_one_millisecond() {
    // A zero timeout is an error to every std socket call that takes one.
    assert_eq!(
        DrainRequest::new(8080).timeout(Duration::ZERO),
        DrainRequest::new(8080).timeout(Duration::from_millis(1))
    );
}

#[test]
fn a_path_that_is_not_a_request_target_is_refused_before_anything_is_sent() {
    // A listener that would accept: nothing may reach it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for path in ["/a b", "/x\r\nX-Injected: 1", "/dr\u{e4}in", "/tab\there"] {
        match DrainRequest::new(port).token(token()).path(path).send() {
            Err(PreStopError::InvalidPath { path: p }) => {
                assert!(p.ends_with(path.trim_start_matches('/')), "{p:?}");
            }
            other => panic!("{path:?}: {other:?}"),
        }
    }
    assert!(listener.accept().is_err(), "a connection was made");
    // A percent-encoded one is fine (the error is only that nothing answers).
    let err = DrainRequest::new(port)
        .token(token())
        .path("/dr%C3%A4in?x=1")
        .timeout(Duration::from_millis(100))
        .send();
    assert!(!matches!(err, Err(PreStopError::InvalidPath { .. })));
}
