//! A TCP relay whose flows can die without a word, for the tests that
//! put one between the store and a Redis node.
// Each test file uses the part it needs.
#![allow(dead_code)]

use std::sync::Arc;

/// A TCP relay to `target` whose flows can die without a word: after
/// `freeze`, the connections it holds stop forwarding (nothing closes,
/// nothing answers: a dropped NAT or load-balancer entry), while new
/// connections are forwarded as before.
pub(crate) struct Relay {
    port: u16,
    frozen: Arc<std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>>,
    /// Where new connections go (a DNS name or proxy after a failover).
    target: Arc<std::sync::atomic::AtomicU16>,
}

impl Relay {
    pub(crate) async fn start(target: u16) -> Self {
        use std::sync::atomic::AtomicBool;
        let target = Arc::new(std::sync::atomic::AtomicU16::new(target));
        let to = target.clone();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen: Arc<std::sync::Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let flows = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let target = to.load(std::sync::atomic::Ordering::SeqCst);
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let dead = Arc::new(AtomicBool::new(false));
                flows.lock().unwrap().push(dead.clone());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, dead.clone()));
                tokio::spawn(pump(sr, cw, dead));
            }
        });
        Self {
            port,
            frozen,
            target,
        }
    }

    /// New connections go to `port` from now on.
    pub(crate) fn point_at(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Every flow open now stops forwarding, silently.
    pub(crate) fn freeze(&self) {
        for dead in self.frozen.lock().unwrap().iter() {
            dead.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Copies `from` to `to` until the flow dies; then reads and drops.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    dead: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if dead.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
