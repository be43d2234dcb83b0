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

    /// An IPv4 address in dotted decimal, as its `Display` writes it,
    /// without the formatting machinery (the common key: it costs what the
    /// limit's whole check costs through `Display`).
    pub(crate) fn ipv4(ip: std::net::Ipv4Addr) -> Self {
        let mut text = Self(smallvec::SmallVec::new());
        for (i, octet) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                text.0.push(b'.');
            }
            push_decimal(&mut text.0, u64::from(octet));
        }
        text
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

/// Appends `n` in decimal to `out`, without the formatting machinery.
pub(crate) fn push_decimal<A: smallvec::Array<Item = u8>>(out: &mut smallvec::SmallVec<A>, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        // `n % 10` is below 10: the cast keeps it whole.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::{CallerKey, push_decimal};

    #[test]
    fn decimals_and_ipv4_keys_read_as_display_writes_them() {
        for n in [
            0,
            7,
            10,
            99,
            100,
            255,
            65_535,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = smallvec::SmallVec::<[u8; 8]>::new();
            push_decimal(&mut out, n);
            assert_eq!(std::str::from_utf8(&out).unwrap(), n.to_string());
        }
        for ip in ["0.0.0.0", "10.0.0.7", "192.168.100.255", "255.255.255.255"] {
            let ip: std::net::Ipv4Addr = ip.parse().unwrap();
            assert_eq!(CallerKey::ipv4(ip).as_str(), ip.to_string());
        }
    }
}
