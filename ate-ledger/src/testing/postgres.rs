//! A throwaway PostgreSQL server for tests of `PgStore` and of services
//! built on it (features `test-util` and `postgres`).

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The running server: a connection string without `dbname`, and the
/// wrapper holding it (closing the wrapper's stdin, which this process's
/// exit does, stops the server and removes its dir).
struct Server {
    base: String,
    _wrapper: Option<Mutex<(Child, ChildStdin)>>,
}

fn pg_bin(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin").join(name)))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.pop()
    })
}

/// [`pg_bin`], or a panic saying how to install PostgreSQL.
fn need_bin(name: &str) -> PathBuf {
    pg_bin(name).unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binary {name} not found on PATH or under \
             /usr/lib/postgresql/*/bin: install PostgreSQL (Debian: apt-get install postgresql) \
             or set ATE_TEST_POSTGRES_URL to a server these tests may create databases on"
        )
    })
}

/// Sends `SIG{sig}` to `pid` with the shell's builtin `kill`.
fn send(pid: u32, sig: &str) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid} 2>/dev/null")])
        .status();
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program` as the `postgres` user when this process is `root`
/// (PostgreSQL refuses to run as root).
fn as_server_user(program: &Path, root: bool) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn start_server() -> Server {
    if let Ok(url) = std::env::var("ATE_TEST_POSTGRES_URL") {
        return Server {
            base: url,
            _wrapper: None,
        };
    }
    let (initdb, postgres) = (need_bin("initdb"), need_bin("postgres"));
    let root = is_root();
    // As root the server runs as `postgres`, which must reach the dir: not
    // under a `TMPDIR` in root's home, so `/tmp` itself.
    let tmp = if root {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let dir = tmp.join(format!("ate-ledger-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if root {
        let ok = Command::new("chown")
            .args(["postgres:"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chown {} to the postgres user", dir.display());
    }
    let data = dir.join("data");
    let out = as_server_user(&initdb, root)
        .args(["-A", "trust", "-U", "ate", "--no-sync", "-D"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The wrapper starts the server, waits for its stdin to close (this
    // process exiting closes it) and then stops it and removes the dir.
    // SIGTERM, not SIGINT: a background job of a non-interactive shell
    // starts with SIGINT ignored, so a SIGINT sent before the server has
    // installed its handler (a test process dying right after the start)
    // was lost and left the server running. SIGKILL after 5 s bounds a
    // shutdown that waits on a session.
    let script = format!(
        "'{pg}' -D '{data}' -k '{dir}' -c listen_addresses= -c fsync=off -c max_connections=200 \
         >'{dir}/log' 2>&1 & pid=$!; cat >/dev/null; kill -TERM $pid; \
         i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; \
         kill -KILL $pid 2>/dev/null; wait $pid; rm -rf '{dir}'",
        pg = postgres.display(),
        data = data.display(),
        dir = dir.display(),
    );
    let mut child = as_server_user(Path::new("sh"), root)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let base = format!("host={} port=5432 user=ate", dir.display());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match postgres::Client::connect(&format!("{base} dbname=postgres"), postgres::NoTls) {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!(
                "the test server did not start: {e}; log: {}",
                std::fs::read_to_string(dir.join("log")).unwrap_or_default()
            ),
        }
    }
    Server {
        base,
        _wrapper: Some(Mutex::new((child, stdin))),
    }
}

/// The server every [`fresh_database`] is made on.
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start_server)
}

/// A fresh, empty database on the test server, as a connection string for
/// [`PgStore::connect`](crate::PgStore::connect).
///
/// The server is `ATE_TEST_POSTGRES_URL` if set (a connection string
/// without `dbname`, to a server where the tests may create databases).
/// Otherwise the first call starts a throwaway server from the machine's
/// PostgreSQL binaries (`initdb` and `postgres` on `PATH` or under
/// `/usr/lib/postgresql/*/bin`; as the `postgres` user when run as root),
/// in a temp dir, listening on a Unix socket only, with `fsync=off`; it is
/// stopped and its dir removed when the test process exits. Each call
/// creates a new database on it, so tests running in parallel never share
/// tables. The database is kept until the server goes: on a server of your
/// own, or for many of them (one for each case of a property test), take a
/// [`TestDatabase`], which drops its database when it is dropped.
///
/// # Panics
///
/// If neither is available (a test that needs PostgreSQL fails, saying
/// how to install it, rather than passing untested), or if the server does
/// not start within 60 s.
///
/// ```no_run
/// use ate_ledger::{Ledger, PgStore};
///
/// let store = PgStore::connect(&ate_ledger::testing::fresh_database())?;
/// let ledger = Ledger::new(store);
/// # Ok::<(), ate_ledger::Error>(())
/// ```
pub fn fresh_database() -> String {
    // On a thread of its own: the `postgres` client runs its own runtime,
    // which would panic on a thread already running one (`#[tokio::test]`).
    std::thread::spawn(create_database)
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn create_database() -> String {
    create_named().1
}

/// Creates a database: its name and connection string.
fn create_named() -> (String, String) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "ate_test_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let base = &server().base;
    admin(base)
        .expect("connect to the test server")
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let url = format!("{base} dbname={name}");
    (name, url)
}

fn admin(base: &str) -> Result<postgres::Client, postgres::Error> {
    postgres::Client::connect(&format!("{base} dbname=postgres"), postgres::NoTls)
}

/// A fresh, empty database on the test server (as [`fresh_database`]),
/// dropped when this value is. The server closes the connections still
/// open to it first (`DROP DATABASE ... WITH (FORCE)`, PostgreSQL 13 or
/// later), so a test that ends with its stores or services still holding
/// some (a panic, say) leaves nothing behind either.
///
/// Use it for a server of your own (`ATE_TEST_POSTGRES_URL`), which would
/// otherwise keep every test's database, and in property tests, whose
/// cases would otherwise leave one database each, about 8 MB apiece
/// (`PROPTEST_CASES=3000` filled a disk that way).
///
/// ```no_run
/// use ate_ledger::testing::TestDatabase;
/// use ate_ledger::{Ledger, PgStore};
///
/// let db = TestDatabase::new();
/// let ledger = Ledger::new(PgStore::connect(db.url())?);
/// // ... the test ...
/// drop(ledger);
/// drop(db); // the database is gone
/// # Ok::<(), ate_ledger::Error>(())
/// ```
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates the database.
    ///
    /// # Panics
    ///
    /// As [`fresh_database`].
    #[allow(clippy::new_without_default)] // creating a database is not a default
    pub fn new() -> Self {
        let (name, url) = std::thread::spawn(create_named)
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        Self { name, url }
    }

    /// Its connection string, for [`PgStore::connect`](crate::PgStore::connect).
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    /// Drops the database; a failure is printed, never a panic (the test
    /// may be unwinding already).
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        // A thread of its own, as for creating it (the test may run a
        // tokio runtime on this one).
        let dropped = std::thread::spawn(move || {
            admin(&server().base)?
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                // `postgres::Error` displays its kind; the reason is its source.
                let reason = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
                eprintln!("ate-ledger test database not dropped: {reason}");
            }
            Err(_) => eprintln!("ate-ledger test database not dropped: the drop panicked"),
        }
    }
}

/// A PostgreSQL server of a test's own that it can restart (fast shutdown)
/// and stall (SIGSTOP of all its processes): for tests of a service under
/// a database that goes away or hangs. Started from the machine's binaries
/// as [`fresh_database`]'s server is (as the `postgres` user when run as
/// root), listening on a Unix socket in its own directory, with
/// `fsync=off`; stopped and removed when dropped.
///
/// ```no_run
/// use std::time::Duration;
/// use ate_ledger::testing::TestPostgres;
///
/// let mut server = TestPostgres::start();
/// let url = server.url(); // host=/tmp/... port=5432 user=ate dbname=postgres
/// server.restart(); // fast shutdown, then a start
/// server.stall(Duration::from_secs(3)); // a hang, not a refusal
/// # drop(url);
/// ```
#[derive(Debug)]
pub struct TestPostgres {
    dir: PathBuf,
    root: bool,
    child: Option<Child>,
}

impl TestPostgres {
    /// Starts a server.
    ///
    /// # Panics
    ///
    /// If the PostgreSQL binaries are missing or it does not start in
    /// 30 s.
    pub fn start() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = is_root();
        let dir = PathBuf::from("/tmp").join(format!(
            "ate-ledger-test-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if root {
            let _ = Command::new("chown").arg("postgres:").arg(&dir).status();
        }
        let out = as_server_user(&need_bin("initdb"), root)
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

    fn spawn(&mut self) {
        let child = as_server_user(&need_bin("postgres"), self.root)
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

    /// The postmaster's process id.
    ///
    /// # Panics
    ///
    /// If the server is not running.
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

    /// A connection string to its `postgres` database.
    pub fn url(&self) -> String {
        format!(
            "host={} port=5432 user=ate dbname=postgres",
            self.dir.display()
        )
    }

    /// Fast shutdown (SIGINT), then a start on the same socket.
    ///
    /// # Panics
    ///
    /// If it does not stop, or start again, within 30 s.
    pub fn restart(&mut self) {
        let pid = self.pid();
        send(pid, "INT");
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

    /// Stalls every process of the server for `pause` ([`freeze`](Self::freeze),
    /// a sleep, then the thaw).
    pub fn stall(&self, pause: Duration) {
        let frozen = self.freeze();
        std::thread::sleep(pause);
        drop(frozen);
    }

    /// Stops every process of the server (`SIGSTOP`: connections stay
    /// open and nothing answers; what clients send waits in the sockets)
    /// until the answer is dropped. `runuser` (the server's parent when
    /// the suite runs as root) stops itself when its child stops, so it
    /// is continued too.
    #[must_use = "the server runs again as soon as this is dropped"]
    pub fn freeze(&self) -> Frozen {
        let stopped = self.processes();
        for &p in &stopped {
            send(p, "STOP");
        }
        Frozen {
            stopped,
            parent: self.child.as_ref().map(std::process::Child::id),
        }
    }

    /// The postmaster and every process it started.
    fn processes(&self) -> Vec<u32> {
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

impl Drop for TestPostgres {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            && let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok())
        {
            for p in self.processes() {
                send(p, "CONT");
            }
            send(pid, "QUIT");
        }
        if let Some(mut child) = self.child.take() {
            send(child.id(), "CONT");
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server stopped by [`TestPostgres::freeze`]; dropping it continues
/// every process.
#[derive(Debug)]
pub struct Frozen {
    stopped: Vec<u32>,
    parent: Option<u32>,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &p in &self.stopped {
            send(p, "CONT");
        }
        if let Some(parent) = self.parent {
            send(parent, "CONT");
        }
    }
}
