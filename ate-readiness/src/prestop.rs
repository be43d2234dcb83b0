//! The client side of the preStop hook: what a service binary's own `drain`
//! subcommand sends to the pod's drain endpoint.
//!
//! Kubernetes runs an `exec` preStop hook inside the container. An
//! `httpGet` hook cannot be used (it can only GET, and the kubelet sends it
//! from the node, not loopback), and a distroless image has no `curl`. So
//! the service's own binary carries a subcommand that POSTs to its drain
//! endpoint on loopback and then sleeps while the load balancer notices
//! `/ready` failing:
//!
//! The endpoint drains only for the secret the service drew at start and
//! wrote to a file only its user can read ([`DrainToken`]); the hook runs
//! in the same container, reads that file and presents the secret. The
//! loopback-only rule stays as a second fence.
//!
//! ```no_run
//! use std::process::ExitCode;
//! use std::time::Duration;
//! use ate_readiness::prestop::DrainRequest;
//! use ate_readiness::{DrainToken, Gate};
//!
//! fn main() -> ExitCode {
//!     // `my-service drain`, as the hook runs it:
//!     // `exec: { command: ["/app/my-service", "drain"] }`.
//!     if std::env::args().nth(1).as_deref() == Some("drain") {
//!         return DrainRequest::new(8080).run_hook(Duration::from_secs(15));
//!     }
//!     // Serving: draw the secret, publish it where the hook looks, and
//!     // hand it to the gate (keep `published` alive while serving).
//!     let token = DrainToken::generate().expect("random source");
//!     let published = token.publish(DrainToken::default_path(8080)).expect("writable /tmp");
//!     let gate = Gate::builder().drain_token(token).build();
//!     // ... serve, with the drain endpoint on port 8080 ...
//!     # drop((gate, published));
//!     ExitCode::SUCCESS
//! }
//! ```
//!
//! Only std networking: no HTTP client crate, no async runtime.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::token::{DrainToken, TokenError};

/// A POST to this pod's own drain endpoint on loopback: `127.0.0.1`, or
/// `::1` when nothing listens on `127.0.0.1` (a service bound to IPv6
/// loopback only).
///
/// The service must listen on a wildcard or loopback address (`0.0.0.0`,
/// `[::]` or `127.0.0.1`): bound to the pod's IP alone it cannot be reached
/// on loopback, and a request to the pod's IP comes from that IP, which the
/// endpoint must refuse ([`is_local_caller`](crate::peer::is_local_caller)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a drain request does nothing until it is sent"]
pub struct DrainRequest {
    port: u16,
    path: String,
    timeout: Duration,
    token: TokenSource,
}

/// Where the request's drain secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenSource {
    /// Read from this file when the request is sent.
    File(PathBuf),
    /// Given.
    Given(DrainToken),
}

/// What the drain endpoint answered (a 2xx).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReply {
    /// The address that answered.
    pub addr: SocketAddr,
    /// The status code.
    pub status: u16,
    /// The body, as text (lossy UTF-8).
    pub body: String,
}

/// Why a drain request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PreStopError {
    /// The drain secret could not be read (the service writes it at
    /// start: [`DrainToken::publish`]).
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Nothing accepted the connection on either loopback address.
    #[error(
        "nothing listens on loopback port {port} (127.0.0.1:{port}: {v4}; [::1]:{port}: {v6}): \
         the service must listen on port {port} of a wildcard or loopback address \
         (0.0.0.0, [::] or 127.0.0.1)"
    )]
    NotListening {
        /// The port.
        port: u16,
        /// The error connecting to `127.0.0.1`.
        v4: std::io::Error,
        /// The error connecting to `::1`.
        v6: std::io::Error,
    },
    /// Connected, but the exchange failed (a timeout, a reset).
    #[error("drain request to {addr} failed: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The endpoint answered with a status other than 2xx (403: the
    /// endpoint did not see a loopback peer, or another secret).
    #[error("drain endpoint http://{addr}{path} answered {status}: {body}")]
    Refused {
        /// The address.
        addr: SocketAddr,
        /// The path.
        path: String,
        /// The status code.
        status: u16,
        /// The body, as text (lossy UTF-8, at most 1 KiB).
        body: String,
    },
    /// The path cannot be sent as an HTTP request target: it holds a
    /// space, a control character or a non-ASCII one (a `\r\n` would
    /// end the request line and start a header).
    #[error(
        "drain path {path:?} is not an HTTP request target: only visible ASCII, \
         no spaces (percent-encode anything else)"
    )]
    InvalidPath {
        /// The path as given.
        path: String,
    },
    /// What came back is not an HTTP/1.x response.
    #[error("drain endpoint {addr} answered something that is not HTTP/1.x: {start:?}")]
    NotHttp {
        /// The address.
        addr: SocketAddr,
        /// The answer's first bytes (lossy UTF-8, at most 64).
        start: String,
    },
}

/// The most of an answer read (a drain endpoint answers a line of JSON).
const MAX_ANSWER: u64 = 64 * 1024;

impl DrainRequest {
    /// The path used unless [`path`](Self::path) says otherwise.
    pub const DEFAULT_PATH: &'static str = "/__internal/drain";

    /// A request to `port` on loopback, at [`DEFAULT_PATH`](Self::DEFAULT_PATH),
    /// with a 5 s timeout for connecting and for the answer, presenting
    /// the secret read from [`DrainToken::default_path`]`(port)` when sent.
    pub fn new(port: u16) -> Self {
        Self {
            port,
            path: Self::DEFAULT_PATH.to_owned(),
            timeout: Duration::from_secs(5),
            token: TokenSource::File(DrainToken::default_path(port)),
        }
    }

    /// Reads the secret from `path` when sent (where the service
    /// published it, if not at the default path).
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token = TokenSource::File(path.into());
        self
    }

    /// Presents `token` (a service that shares its secret another way).
    pub fn token(mut self, token: DrainToken) -> Self {
        self.token = TokenSource::Given(token);
        self
    }

    /// The endpoint's path (`drain` is taken as `/drain`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        self
    }

    /// How long to wait to connect, and then for the answer (zero is
    /// taken as 1 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sends the POST and reads the answer (blocking).
    ///
    /// # Errors
    ///
    /// - [`PreStopError::NotListening`] when neither `127.0.0.1` nor `::1`
    ///   accepts a connection on the port;
    /// - [`PreStopError::Io`] when the exchange fails once connected (a
    ///   timeout waiting for the answer, a reset);
    /// - [`PreStopError::Refused`] for an answer other than 2xx;
    /// - [`PreStopError::NotHttp`] for an answer that is not HTTP/1.x;
    /// - [`PreStopError::InvalidPath`], before connecting, for a path with
    ///   a space, a control or a non-ASCII character;
    /// - [`PreStopError::Token`], once connected and before anything is
    ///   sent, when the secret's file cannot be read or holds no token.
    pub fn send(&self) -> Result<DrainReply, PreStopError> {
        if !self.path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(PreStopError::InvalidPath {
                path: self.path.clone(),
            });
        }

        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, self.port));
        let (addr, stream) = match TcpStream::connect_timeout(&v4, self.timeout) {
            Ok(s) => (v4, s),
            Err(e4) => match TcpStream::connect_timeout(&v6, self.timeout) {
                Ok(s) => (v6, s),
                Err(e6) => {
                    return Err(PreStopError::NotListening {
                        port: self.port,
                        v4: e4,
                        v6: e6,
                    });
                }
            },
        };
        // Read once something listens: "nothing listens" is the more
        // useful answer where the service is not running at all.
        let token = match &self.token {
            TokenSource::File(path) => DrainToken::read(path)?,
            TokenSource::Given(token) => token.clone(),
        };
        let io = |source| PreStopError::Io { addr, source };
        let answer = self.exchange(stream, addr, &token).map_err(io)?;
        let (status, body) = parse_answer(&answer).ok_or_else(|| PreStopError::NotHttp {
            addr,
            start: String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned(),
        })?;
        if (200..300).contains(&status) {
            Ok(DrainReply { addr, status, body })
        } else {
            let body: String = body.chars().take(1024).collect();
            Err(PreStopError::Refused {
                addr,
                path: self.path.clone(),
                status,
                body,
            })
        }
    }

    fn exchange(
        &self,
        mut stream: TcpStream,
        addr: SocketAddr,
        token: &DrainToken,
    ) -> std::io::Result<Vec<u8>> {
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        write!(
            stream,
            "POST {} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: ate-readiness-prestop\r\n\
             Authorization: Bearer {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.path,
            token.secret()
        )?;
        stream.flush()?;
        // Read until the answer is whole: by its Content-Length, the end of
        // a chunked body, or the connection's close. A server that keeps
        // the connection open despite `Connection: close` is not waited on.
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        let mut stream = stream.take(MAX_ANSWER);
        loop {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                return Ok(answer);
            }
            answer.extend_from_slice(&buf[..n]);
            if answer_complete(&answer) {
                return Ok(answer);
            }
        }
    }

    /// The whole preStop hook: sends the request, prints the answer's body
    /// (stdout) or the error (stderr), then sleeps for `sleep` (the load
    /// balancer's convergence time) whatever happened, and returns the exit
    /// status: success if the drain endpoint answered 2xx, 1 otherwise. The
    /// kubelet logs a failed hook and goes on to SIGTERM, which drains the
    /// service too.
    #[must_use = "the hook's exit status tells the kubelet whether the drain request got through"]
    pub fn run_hook(&self, sleep: Duration) -> ExitCode {
        let sent = self.send();
        match &sent {
            Ok(reply) => println!("{}", reply.body),
            Err(e) => eprintln!("error: {e}"),
        }
        std::thread::sleep(sleep);
        if sent.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}

/// An HTTP/1.x answer split at the end of its head: the head's text and
/// the body received so far.
struct Answer<'a> {
    head: &'a str,
    body: &'a [u8],
}

impl<'a> Answer<'a> {
    /// `None` until the head is whole (or if it is not text).
    fn split(answer: &'a [u8]) -> Option<Self> {
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
        Some(Self {
            head: std::str::from_utf8(&answer[..split]).ok()?,
            body: &answer[split + 4..],
        })
    }

    /// The header lines, as (name, value), after the status line.
    fn headers(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.head
            .split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(name, value)| (name.trim(), value.trim()))
    }

    fn chunked(&self) -> bool {
        self.headers().any(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
        })
    }

    fn content_length(&self) -> Option<usize> {
        self.headers()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.parse().ok())
    }
}

/// Whether `answer` holds a whole HTTP/1.x answer: its head, then as much
/// body as its Content-Length says, or a chunked body's last chunk. An
/// answer with neither ends when the connection closes.
fn answer_complete(answer: &[u8]) -> bool {
    let Some(a) = Answer::split(answer) else {
        return false;
    };
    if a.chunked() {
        return dechunk(a.body).is_some();
    }
    a.content_length().is_some_and(|len| a.body.len() >= len)
}

/// The status and body of an HTTP/1.x answer (a chunked body decoded).
fn parse_answer(answer: &[u8]) -> Option<(u16, String)> {
    let a = Answer::split(answer)?;
    let mut status_line = a.head.split("\r\n").next()?.split(' ');
    if !status_line.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status: u16 = status_line.next()?.parse().ok()?;
    let body = if a.chunked() {
        dechunk(a.body)?
    } else {
        a.body.to_vec()
    };
    Some((status, String::from_utf8_lossy(&body).trim_end().to_owned()))
}

/// Decodes a chunked body (as far as it goes; extensions ignored).
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_whole_at_its_length_or_last_chunk_and_not_before() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{\"started\":true}";
        for cut in [10, plain.len() - 16, plain.len() - 1] {
            assert!(!answer_complete(&plain[..cut]), "cut at {cut}");
        }
        assert!(answer_complete(plain));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n";
        assert!(!answer_complete(&chunked[..chunked.len() - 5]));
        assert!(answer_complete(chunked));
        // A header that merely mentions chunking is not chunked: the
        // length decides.
        let mention = b"HTTP/1.1 200 OK\r\nX-Note: chunked\r\nContent-Length: 2\r\n\r\nok";
        assert!(!answer_complete(&mention[..mention.len() - 1]));
        assert!(answer_complete(mention));
        assert_eq!(parse_answer(mention), Some((200, "ok".into())));
        // Neither: whole only once the connection closes.
        assert!(!answer_complete(b"HTTP/1.1 200 OK\r\n\r\nbody"));
    }

    #[test]
    fn answers_parse_with_and_without_chunking() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{\"started\":true}";
        assert_eq!(
            parse_answer(plain),
            Some((200, "{\"started\":true}".into()))
        );
        let chunked = b"HTTP/1.1 403 Forbidden\r\ntransfer-encoding: Chunked\r\n\r\n4\r\nno, \r\n5;x=y\r\nnever\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked), Some((403, "no, never".into())));
        assert_eq!(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n"), None);
        assert_eq!(parse_answer(b"ICY 200 OK\r\n\r\n"), None, "not HTTP/1.x");
        // Chunked after another coding; a body's trailing newline dropped.
        let gzip_then_chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nok\n\r\n0\r\n\r\n";
        assert_eq!(parse_answer(gzip_then_chunked), Some((200, "ok".into())));
        assert_eq!(parse_answer(b"HTTP/1.1 200 OK\r\n"), None, "no end of head");
        assert_eq!(
            parse_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
            None,
            "a bad chunk size"
        );
    }
}
