//! Who a request is, for the limits ([`Caller`]), read from the
//! framework's request head ([`Head`]).

use std::net::IpAddr;
use std::sync::Arc;

use super::client_ip::ClientIp;
use super::key::{CallerKey, KeyError};

/// A request head the limits can read: its header values and the peer
/// address of its connection. Implemented for `http::request::Parts`
/// (feature `tower`) and Actix's `HttpRequest` (feature `actix`).
pub trait Head {
    /// Every value of header `name` (lowercase), in order.
    fn header_values(&self, name: &str) -> Vec<&[u8]>;
    /// The peer address the server recorded, if it did.
    fn peer(&self) -> Option<IpAddr>;
}

type PeerFn<R> = Arc<dyn Fn(&R) -> Option<IpAddr> + Send + Sync>;
type KeyFn<R> = Arc<dyn Fn(&R) -> Result<String, KeyError> + Send + Sync>;

/// Who a request is, for the limits: its key. `R` is the framework's
/// request head ([`Head`]).
pub struct Caller<R> {
    kind: CallerKind<R>,
    peer: PeerFn<R>,
}

enum CallerKind<R> {
    ClientIp(ClientIp),
    Header(String),
    Custom(KeyFn<R>),
}

impl<R> Clone for Caller<R> {
    fn clone(&self) -> Self {
        let kind = match &self.kind {
            CallerKind::ClientIp(c) => CallerKind::ClientIp(c.clone()),
            CallerKind::Header(h) => CallerKind::Header(h.clone()),
            CallerKind::Custom(f) => CallerKind::Custom(f.clone()),
        };
        Self {
            kind,
            peer: self.peer.clone(),
        }
    }
}

impl<R> std::fmt::Debug for Caller<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            CallerKind::ClientIp(c) => format!("{c:?}"),
            CallerKind::Header(h) => format!("header {h}"),
            CallerKind::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("Caller").field("kind", &kind).finish()
    }
}

impl<R: Head + 'static> Default for Caller<R> {
    fn default() -> Self {
        Self::peer()
    }
}

impl<R: Head + 'static> Caller<R> {
    fn of(kind: CallerKind<R>) -> Self {
        Self {
            kind,
            peer: Arc::new(|r: &R| r.peer()),
        }
    }

    /// The peer's IP address (the default; IPv6 peers by /64). Behind a
    /// proxy every client shares the proxy's address: use
    /// [`client_ip`](Self::client_ip).
    pub fn peer() -> Self {
        Self::of(CallerKind::ClientIp(ClientIp::peer()))
    }

    /// The client's address as `client_ip` reads it
    /// ([`ClientIp::key`]): from the source the operator named, through
    /// trusted proxies only, IPv6 callers by prefix. Never the
    /// client-controlled leftmost entry on its own.
    pub fn client_ip(client_ip: ClientIp) -> Self {
        Self::of(CallerKind::ClientIp(client_ip))
    }

    /// A header's value (an API key): given once, 1-256 visible ASCII
    /// characters, else 400.
    pub fn header(name: impl AsRef<str>) -> Self {
        Self::of(CallerKind::Header(name.as_ref().to_ascii_lowercase()))
    }

    /// Your own rule (say, the authenticated account); its
    /// [`KeyError::Refused`] message is the 400's.
    pub fn custom(key: impl Fn(&R) -> Result<String, KeyError> + Send + Sync + 'static) -> Self {
        Self::of(CallerKind::Custom(Arc::new(key)))
    }

    /// Where the peer address comes from, if not where [`Head::peer`]
    /// finds it (axum: its `ConnectInfo` extension).
    #[must_use]
    pub fn peer_from(self, peer: impl Fn(&R) -> Option<IpAddr> + Send + Sync + 'static) -> Self {
        Self {
            peer: Arc::new(peer),
            ..self
        }
    }

    /// The key of the request whose head is `head`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the request does not say who it is as required.
    pub fn key(&self, head: &R) -> Result<String, KeyError> {
        self.key_text(head).map(|k| k.as_str().to_owned())
    }

    /// [`key`](Self::key), without a heap allocation for an address key.
    pub(crate) fn key_text(&self, head: &R) -> Result<CallerKey, KeyError> {
        if let CallerKind::ClientIp(client_ip) = &self.kind {
            let peer = (self.peer)(head).ok_or(KeyError::NoPeer)?;
            let ip = match client_ip.header_name() {
                None => peer,
                Some(name) => client_ip.address(peer, head.header_values(name))?,
            };
            return Ok(client_ip.key_text(ip));
        }
        self.slow_key(head).map(CallerKey::from)
    }

    /// The keys other than an address's (which `key_text` writes inline).
    fn slow_key(&self, head: &R) -> Result<String, KeyError> {
        match &self.kind {
            CallerKind::ClientIp(_) => self.key_text(head).map(|k| k.as_str().to_owned()),
            CallerKind::Header(name) => match head.header_values(name).as_slice() {
                [v] if (1..=256).contains(&v.len()) && v.iter().all(u8::is_ascii_graphic) => {
                    Ok(String::from_utf8_lossy(v).into_owned())
                }
                _ => Err(KeyError::BadHeader {
                    header: name.clone(),
                }),
            },
            CallerKind::Custom(key) => key(head),
        }
    }
}
