//! A throwaway `redis-server` for tests (features `test-util` and
//! `redis`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of the test's own, from the machine's binaries, on a
/// free loopback port, keeping nothing on disk. It is killed when dropped;
/// [`kill`](Self::kill) and [`restart`](Self::restart) let a test take it
/// away and bring it back (empty) on the same port.
///
/// ```no_run
/// use ate_ratelimit::testing::TestRedis;
///
/// let mut server = TestRedis::start();
/// let url = server.url(); // redis://127.0.0.1:PORT/0
/// server.kill();          // as a crash: SIGKILL
/// server.restart();       // the same port, empty
/// # drop(url);
/// ```
#[derive(Debug)]
pub struct TestRedis {
    port: u16,
    child: Option<Child>,
}

fn redis_server() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("redis-server"))
                .find(|p| p.is_file())
        })
        .or_else(|| Some(PathBuf::from("/usr/bin/redis-server")).filter(|p| p.is_file()))
        .unwrap_or_else(|| {
            panic!(
                "redis-server not found on PATH or in /usr/bin: install it \
                 (Debian: apt-get install redis-server); .ci/run does"
            )
        })
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

/// Whether a server answers `PING` on `port`.
fn answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl TestRedis {
    /// Starts a server.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed, or no server came up in five
    /// tries (a port taken meanwhile).
    pub fn start() -> Self {
        for _ in 0..5 {
            let mut server = Self {
                port: free_port(),
                child: None,
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("redis-server did not start in five tries");
    }

    /// Spawns the server on `self.port`; whether it came up.
    fn spawn(&mut self) -> bool {
        let child = Command::new(redis_server())
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
                "--dir",
            ])
            .arg(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if answers(self.port) {
                return true;
            }
            if let Some(child) = &mut self.child
                && child.try_wait().ok().flatten().is_some()
            {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill();
        false
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL, as a crash) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    ///
    /// # Panics
    ///
    /// If it does not come up (the port was taken meanwhile).
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not come back on port {}",
            self.port
        );
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
