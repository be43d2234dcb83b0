//! A caller's key: its text, written inline when short, and why a
//! request has none ([`KeyError`]). The floor of the request path: every
//! other part of `http` builds on it and it imports none of them.

/// Why a request's key could not be taken: the layers answer 400 naming
/// it, never a panic and never a key the client chose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header the client address is read from, sent by a trusted
    /// proxy, holds something that is not an address where the walk
    /// reached it (or is given twice, for a single-address header).
    #[error("{header} holds {value:?}, which is not an IP address")]
    Malformed {
        /// The header's name.
        header: String,
        /// The entry, as received (cut to 64 bytes).
        value: String,
    },
    /// The header the key is read from is missing, repeated, empty or not
    /// visible ASCII.
    #[error("header {header} must be given once, 1-256 visible ASCII characters")]
    BadHeader {
        /// The header's name.
        header: String,
    },
    /// The connection's peer address is not known to the layer.
    #[error("the peer address is unknown (is the server giving the layer its connect info?)")]
    NoPeer,
    /// A [`Caller::custom`](crate::http::Caller::custom) rule refused the
    /// request; the message is the 400's.
    #[error("{message}")]
    Refused {
        /// Why, for the client.
        message: String,
    },
    /// A trusted proxy entry that is neither a CIDR nor an address.
    #[error("trusted proxy {value:?} is neither a CIDR nor an IP address")]
    BadProxy {
        /// The entry.
        value: String,
    },
    /// A client address source that is not one [`ClientIp::parse`](crate::http::ClientIp::parse) knows.
    #[error(
        "client address source {value:?} is not peer, x-forwarded-for, forwarded or a header \
         name (x-real-ip, cf-connecting-ip, ...)"
    )]
    BadSource {
        /// The text given.
        value: String,
    },
    /// An IPv6 prefix length outside 1..=128.
    #[error("IPv6 prefix length {bits} is not from 1 to 128")]
    BadPrefix {
        /// The length given.
        bits: u8,
    },
}

/// A caller's key as text, inline when it is short (an IP address or a
/// /64: up to 48 bytes), so keying a request by its address allocates
/// nothing.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct CallerKey(smallvec::SmallVec<[u8; 48]>);

impl CallerKey {
    pub(crate) fn as_str(&self) -> &str {
        // Only ever written from `&str`s (`From<String>`, `fmt::Write`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// `value`'s `Display`, written without a heap allocation while it
    /// fits inline.
    pub(crate) fn display(value: impl std::fmt::Display) -> Self {
        use std::fmt::Write;
        let mut text = Self(smallvec::SmallVec::new());
        let _ = write!(text, "{value}");
        text
    }
}

impl std::fmt::Write for CallerKey {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl From<String> for CallerKey {
    fn from(s: String) -> Self {
        Self(smallvec::SmallVec::from_vec(s.into_bytes()))
    }
}

impl std::fmt::Debug for CallerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}
