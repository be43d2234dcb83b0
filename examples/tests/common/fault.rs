//! What the chaos suite breaks beside PostgreSQL and Redis (whose test
//! servers come from ate-ledger and ate-ratelimit): HAProxy in front of the
//! replicas, and signals.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .status();
}

pub fn find_bin(name: &str, extra: &[&str]) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .or_else(|| {
            extra
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// HAProxy in front of the replicas, health-checking `/ready`.
pub struct Haproxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    pub fn start(backends: &[u16]) -> Self {
        let bin = find_bin("haproxy", &["/usr/sbin", "/usr/local/sbin"]).unwrap_or_else(|| {
            panic!("haproxy not found: install it (Debian: apt-get install haproxy); .ci/run does")
        });
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, p)| format!("  server r{i} 127.0.0.1:{p} check\n"))
            .collect();
        let config = format!(
            "global\n  maxconn 2000\n  log stderr format raw local0 info\n\
             defaults\n  mode http\n  log global\n  option httplog\n  timeout connect 1s\n  timeout client 30s\n  \
             timeout server 30s\n  retries 3\n  option redispatch\n\
             frontend front\n  bind 127.0.0.1:{port}\n  default_backend replicas\n\
             backend replicas\n  option httpchk GET /ready\n  http-check expect status 200\n  \
             default-server inter 100ms fall 2 rise 2\n{servers}"
        );
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(bin)
            .arg("-f")
            .arg(&path)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create("/tmp/chaos-haproxy.log").unwrap())
            .spawn()
            .unwrap();
        let front = Self {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        front
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits until the front answers `/ready` 200, then until every ready
    /// server is in rotation (health checks every 100 ms, rise 2).
    pub async fn wait_in_rotation(&self) {
        let c = super::client();
        super::eventually(Duration::from_secs(10), || async {
            c.get(self.url("/ready"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
