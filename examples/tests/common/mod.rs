//! Starting the real service binaries and talking to them over sockets.
#![allow(dead_code, unreachable_pub)]

pub mod baseline;
pub mod fault;
pub mod provider;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const SERVICES: [&str; 2] = [
    env!("CARGO_BIN_EXE_axum-service"),
    env!("CARGO_BIN_EXE_actix-service"),
];

/// The test as the authenticating edge in front of the service: its
/// `X-Caller` is believed only from a trusted proxy.
pub const EDGE: (&str, &str) = ("ATE_TRUSTED_PROXIES", "127.0.0.1/32,::1/128");

/// A running service; killed on drop.
pub struct Service {
    pub child: Child,
    pub base: String,
    pub port: u16,
    pub data_dir: PathBuf,
    /// Where the service wrote its drain secret.
    pub token_file: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    stderr: Arc<Mutex<String>>,
}

impl Service {
    pub fn start(bin: &str, env: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut s = Self::start_in(bin, env, dir);
        s._tmp = Some(tmp);
        s
    }

    /// Started listening on `listen` (say `[::1]:0`) instead of
    /// `127.0.0.1:0`.
    pub fn start_on(bin: &str, listen: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut s = Self::start_with(bin, &[], dir, listen);
        s._tmp = Some(tmp);
        s
    }

    /// Started on `listen` (a fixed port, to start it again on) with `env`.
    pub fn start_listening(
        bin: &str,
        env: &[(&str, &str)],
        data_dir: PathBuf,
        listen: &str,
    ) -> Self {
        Self::start_with(bin, env, data_dir, listen)
    }

    pub fn start_in(bin: &str, env: &[(&str, &str)], data_dir: PathBuf) -> Self {
        Self::start_with(bin, env, data_dir, "127.0.0.1:0")
    }

    fn start_with(bin: &str, env: &[(&str, &str)], data_dir: PathBuf, listen: &str) -> Self {
        let mut cmd = Command::new(bin);
        cmd.args(["--listen", listen, "--data-dir"])
            .arg(&data_dir)
            .env("RUST_LOG", "info")
            .env("ATE_RECONCILE_INTERVAL_MS", "50")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = lines.read_to_string(&mut sink);
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let addr = first
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| {
                panic!(
                    "first stdout line was {first:?}; stderr: {}",
                    stderr.lock().unwrap()
                )
            })
            .to_owned();
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        let token_file = env
            .iter()
            .find(|(k, _)| *k == "ATE_DRAIN_TOKEN_FILE")
            .map_or_else(
                || ate_readiness::DrainToken::default_path(port),
                |(_, v)| PathBuf::from(v),
            );
        Self {
            child,
            base: format!("http://{addr}"),
            port,
            data_dir,
            token_file,
            _tmp: None,
            stderr,
        }
    }

    /// The service's drain secret, as its preStop hook reads it.
    pub fn drain_token(&self) -> String {
        ate_readiness::DrainToken::read(&self.token_file)
            .unwrap()
            .secret()
            .to_owned()
    }

    /// `POST /__internal/drain` with the secret, as the hook sends it.
    pub fn drain(&self, c: &reqwest::Client) -> reqwest::RequestBuilder {
        c.post(self.url("/__internal/drain"))
            .bearer_auth(self.drain_token())
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Waits (at most 15 s) until `/ready` answers 200: the startup
    /// checks done.
    pub async fn wait_ready(&self) {
        let c = client();
        eventually(Duration::from_secs(15), || async {
            c.get(self.url("/ready"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Polls `/metrics` until it holds the sample `line` (at most 5 s).
    pub async fn wait_for_metric(&self, line: &str) {
        eventually(Duration::from_secs(5), || async {
            has_sample(&self.metrics().await, line)
        })
        .await;
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (at most 5 s) until the log holds `text`: a thread of its own
    /// copies stderr, so a line the service has just written, or wrote
    /// before it exited, may not be here yet.
    pub async fn wait_for_stderr(&self, text: &str) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if self.stderr().contains(text) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("stderr never held {text:?}: {}", self.stderr());
    }

    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends `SIG{name}` (`TERM`, `INT`) to the service.
    pub fn signal(&self, name: &str) {
        // The shell's builtin `kill`: no dependency on a kill binary.
        let ok = Command::new("sh")
            .args(["-c", &format!("kill -{name} {}", self.child.id())])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits for exit up to `bound`.
    pub fn wait_exit(&mut self, bound: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < bound {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Polls `f` until it returns true (for background work such as the
/// reconciler), failing after `bound`.
pub async fn eventually<F, Fut>(bound: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < bound {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached within {bound:?}");
}

/// The `error` text of a 400 response (`what` names the case on failure).
pub async fn refused(res: reqwest::Response, what: &str) -> String {
    assert_eq!(res.status(), 400, "{what}");
    let body: serde_json::Value = res.json().await.unwrap();
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error in {body}"))
        .to_owned()
}

/// Whether the exposition `text` holds the sample `line` (`name value` or
/// `name{labels} value`) as a whole line: a substring would also match
/// `ate_in_flight 10` for `ate_in_flight 1`, and the `# HELP` text
/// `ate_drain_in_progress 1 while draining` for the sample
/// `ate_drain_in_progress 1`.
pub fn has_sample(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

/// Starts `bin` with `var=value` on a fresh data dir, expecting it to
/// refuse to start: its stderr.
pub fn start_refused(bin: &str, var: &str, value: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env(var, value)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{bin} started with {var}={value}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
