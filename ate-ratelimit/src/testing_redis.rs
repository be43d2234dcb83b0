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

/// `child` once its server answers `PING` on `port`; `None` if it exited
/// or did not answer in 10 s (then it is killed).
fn comes_up(mut child: Child, port: u16) -> Option<Child> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if answers(port) {
            return Some(child);
        }
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
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
        self.child = comes_up(child, self.port);
        self.child.is_some()
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id while it runs: for a test that stalls it
    /// (`SIGSTOP`, then `SIGCONT`), a hang rather than a refusal.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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

/// A throwaway Redis Cluster of 3 masters and 3 replicas (feature
/// `redis-cluster` too), from the machine's `redis-server`, on loopback,
/// keeping nothing but its node files (in a directory of its own, removed
/// when dropped). Nodes are killed when dropped.
///
/// The cluster is up when [`start`](Self::start) returns: every slot has a
/// master and every replica has finished its first sync, so a killed
/// master's replica can be promoted (after the node timeout, 1 s).
///
/// ```no_run
/// use ate_ratelimit::testing::TestCluster;
///
/// let mut cluster = TestCluster::start();
/// let seeds = cluster.urls();
/// let port = cluster.master_of("ate:{=alice}:notify");
/// cluster.kill(port); // SIGKILL
/// cluster.wait_until_ok(); // its replica took over
/// # drop(seeds);
/// ```
#[cfg(feature = "redis-cluster")]
#[derive(Debug)]
pub struct TestCluster {
    nodes: Vec<(u16, Option<Child>)>,
    dir: PathBuf,
}

#[cfg(feature = "redis-cluster")]
impl TestCluster {
    /// Starts six nodes and joins them into a cluster.
    ///
    /// # Panics
    ///
    /// If `redis-server` is missing or the cluster is not up within 30 s.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "ate-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("create the cluster's directory");
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        while cluster.nodes.len() < 6 {
            let port = cluster_port();
            if let Some(child) = cluster.spawn(port) {
                cluster.nodes.push((port, Some(child)));
            }
        }
        cluster.join();
        cluster
    }

    fn spawn(&self, port: u16) -> Option<Child> {
        let child = Command::new(redis_server())
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--cluster-enabled", "yes", "--cluster-config-file"])
            .arg(self.dir.join(format!("nodes-{port}.conf")))
            .args([
                "--cluster-node-timeout",
                "1000",
                // A replica may take over however long ago it last heard
                // from its master.
                "--cluster-replica-validity-factor",
                "0",
                "--repl-diskless-sync-delay",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--loglevel",
                "warning",
                "--dir",
            ])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        comes_up(child, port)
    }

    fn conn(port: u16) -> redis::Connection {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
        let conn = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to a cluster node");
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        conn
    }

    fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        cmd.query(&mut Self::conn(port))
    }

    /// Masters 0..3 take a third of the slots each, everyone meets, and
    /// nodes 3..6 replicate them.
    fn join(&mut self) {
        let ports: Vec<u16> = self.nodes.iter().map(|n| n.0).collect();
        let ids: Vec<String> = ports
            .iter()
            .map(|&p| Self::query(p, redis::cmd("CLUSTER").arg("MYID")).expect("CLUSTER MYID"))
            .collect();
        for (i, range) in [(0, 5460), (5461, 10922), (10923, 16383)]
            .iter()
            .enumerate()
        {
            let () = Self::query(
                ports[i],
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(range.0)
                    .arg(range.1),
            )
            .expect("CLUSTER ADDSLOTSRANGE");
        }
        for &p in &ports[1..] {
            let () = Self::query(
                ports[0],
                redis::cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(p),
            )
            .expect("CLUSTER MEET");
        }
        self.wait("every node to know the other five", |p| {
            Self::query::<String>(p, redis::cmd("CLUSTER").arg("NODES"))
                .is_ok_and(|nodes| nodes.lines().count() == 6 && !nodes.contains("handshake"))
        });
        for i in 0..3 {
            let () = Self::query(
                ports[3 + i],
                redis::cmd("CLUSTER").arg("REPLICATE").arg(&ids[i]),
            )
            .expect("CLUSTER REPLICATE");
        }
        self.wait("every node to see three replicas", |p| {
            Self::query::<String>(p, redis::cmd("CLUSTER").arg("NODES")).is_ok_and(|nodes| {
                nodes
                    .lines()
                    .filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("slave")))
                    .count()
                    == 3
            })
        });
        for &p in &ports[3..] {
            self.wait_for(&format!("the replica on {p} to sync"), || {
                Self::query::<String>(p, redis::cmd("INFO").arg("replication"))
                    .is_ok_and(|info| info.contains("master_link_status:up"))
            });
        }
        self.wait_until_ok();
    }

    fn wait(&self, what: &str, ok: impl Fn(u16) -> bool) {
        self.wait_for(what, || self.live().all(&ok));
    }

    fn wait_for(&self, what: &str, ok: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ok() {
            assert!(
                Instant::now() < deadline,
                "test cluster: waited 30 s for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn live(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().filter(|n| n.1.is_some()).map(|n| n.0)
    }

    /// Waits until every live node says the cluster is ok (every slot
    /// served by a live master).
    ///
    /// # Panics
    ///
    /// After 30 s without.
    pub fn wait_until_ok(&self) {
        self.wait("cluster_state:ok on every live node", |p| {
            Self::query::<String>(p, redis::cmd("CLUSTER").arg("INFO"))
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        });
    }

    /// Seed URLs: every node, `redis://127.0.0.1:PORT`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.0))
            .collect()
    }

    /// `(first slot, last slot, master port)` of every range, as a live
    /// node sees them now.
    fn slots(&self) -> Vec<(i64, i64, u16)> {
        let node = self.live().next().expect("a live node");
        let slots: Vec<redis::Value> =
            Self::query(node, redis::cmd("CLUSTER").arg("SLOTS")).expect("CLUSTER SLOTS");
        slots
            .iter()
            .filter_map(|range| {
                let redis::Value::Array(parts) = range else {
                    return None;
                };
                let redis::Value::Array(master) = parts.get(2)? else {
                    return None;
                };
                let port = u16::try_from(int(master.get(1)?)?).ok()?;
                Some((int(&parts[0])?, int(&parts[1])?, port))
            })
            .collect()
    }

    /// The port of the master serving `key`'s slot now, as a live node
    /// sees it.
    ///
    /// # Panics
    ///
    /// If no live node answers, or none serves the slot.
    pub fn master_of(&self, key: &str) -> u16 {
        let node = self.live().next().expect("a live node");
        let slot: i64 =
            Self::query(node, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).expect("KEYSLOT");
        self.slots()
            .into_iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, port)| port)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The ports of the masters now.
    pub fn masters(&self) -> Vec<u16> {
        let mut masters: Vec<u16> = self.slots().into_iter().map(|r| r.2).collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// The process id of the node on `port` while it runs: for a test
    /// that stalls it (`SIGSTOP`, then `SIGCONT`), a hang rather than a
    /// refusal.
    pub fn pid(&self, port: u16) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.0 == port)
            .and_then(|n| n.1.as_ref().map(Child::id))
    }

    /// Makes the node on `port` tell clients it is on `announced` (a
    /// relay in front of it: `cluster-announce-port`; the cluster bus
    /// stays direct), and waits until every live node's slot map says so.
    ///
    /// # Panics
    ///
    /// If the node refuses, or the others do not learn it within 30 s.
    pub fn announce(&self, port: u16, announced: u16) {
        let () = Self::query(
            port,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-announce-bus-port")
                .arg(port + 10_000)
                .arg("cluster-announce-port")
                .arg(announced),
        )
        .expect("CONFIG SET cluster-announce-port");
        let address = format!(" 127.0.0.1:{announced}@");
        self.wait(&format!("node {port} to be known as {announced}"), |p| {
            Self::query::<String>(p, redis::cmd("CLUSTER").arg("NODES"))
                .is_ok_and(|nodes| nodes.contains(&address))
        });
    }

    /// Kills the node on `port` (SIGKILL, as a crash).
    pub fn kill(&mut self, port: u16) {
        for node in &mut self.nodes {
            if node.0 == port
                && let Some(mut child) = node.1.take()
            {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

#[cfg(feature = "redis-cluster")]
fn int(v: &redis::Value) -> Option<i64> {
    match v {
        redis::Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// A free port whose cluster bus port (+10,000) is free too.
#[cfg(feature = "redis-cluster")]
fn cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

#[cfg(feature = "redis-cluster")]
impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.1.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
