//! What the chaos suite breaks: a PostgreSQL server it can restart and
//! stall, HAProxy in front of the replicas, and signals.

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

pub fn pg_bin(name: &str) -> PathBuf {
    let mut dirs: Vec<String> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin").display().to_string())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    find_bin(name, &dirs).unwrap_or_else(|| {
        panic!("{name} not found: install PostgreSQL (Debian: apt-get install postgresql)")
    })
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A PostgreSQL server of the suite's own that it can restart and stall.
pub struct Pg {
    dir: PathBuf,
    root: bool,
    child: Option<Child>,
}

impl Pg {
    pub fn start() -> Self {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        let dir = PathBuf::from("/tmp").join(format!("ate-chaos-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if root {
            let _ = Command::new("chown").arg("postgres:").arg(&dir).status();
        }
        let out = Self::as_server(root, &pg_bin("initdb"))
            .args(["-A", "trust", "-U", "ate", "--no-sync", "-D"])
            .arg(dir.join("data"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Self {
            dir,
            root,
            child: None,
        };
        pg.spawn();
        pg
    }

    fn as_server(root: bool, program: &Path) -> Command {
        if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn spawn(&mut self) {
        let child = Self::as_server(self.root, &pg_bin("postgres"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-k")
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=100",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ready() {
            assert!(Instant::now() < deadline, "postgres did not start in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `postmaster.pid` says ready.
    fn ready(&self) -> bool {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .is_ok_and(|s| s.lines().nth(7).is_some_and(|l| l.trim() == "ready"))
    }

    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn url(&self) -> String {
        format!(
            "host={} port=5432 user=ate dbname=postgres",
            self.dir.display()
        )
    }

    /// Fast shutdown (SIGINT), then a start.
    pub fn restart(&mut self) {
        let pid = self.pid();
        signal(pid, "INT");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "postgres did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.spawn();
    }

    /// Stalls every process of the server for `pause`. `runuser` (the
    /// server's parent when the suite runs as root) stops itself when its
    /// child stops, so it is continued too.
    pub fn stall(&self, pause: Duration) {
        let stalled = self.processes();
        for &p in &stalled {
            signal(p, "STOP");
        }
        std::thread::sleep(pause);
        for &p in &stalled {
            signal(p, "CONT");
        }
        if let Some(child) = &self.child {
            signal(child.id(), "CONT");
        }
    }

    /// The postmaster and every process it started.
    pub fn processes(&self) -> Vec<u32> {
        let master = self.pid();
        let mut out = vec![master];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces, so after ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(master) {
                out.push(pid);
            }
        }
        out
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            && let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok())
        {
            for p in self.processes() {
                signal(p, "CONT");
            }
            signal(pid, "QUIT");
        }
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "CONT");
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
