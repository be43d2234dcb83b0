//! The client's address: which peers are believed
//! ([`TrustedProxies`]), where the address is read from ([`Source`]), and
//! the forwarding-header walk that reads it ([`ClientIp`]).

use std::net::IpAddr;

use ipnet::IpNet;

use super::key::{CallerKey, KeyError};

/// Proxies whose forwarding headers are believed: load balancers and
/// ingress controllers in front of the service, as CIDRs.
///
/// ```
/// use ate_ratelimit::http::TrustedProxies;
///
/// let trusted = TrustedProxies::parse("10.0.0.0/8, 192.168.1.7")?;
/// assert!(trusted.contains("10.1.2.3".parse()?));
/// assert!(!trusted.contains("192.168.1.8".parse()?));
/// assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// No proxy is trusted: forwarding headers are ignored.
    pub fn none() -> Self {
        Self::default()
    }

    /// A comma-separated list of CIDRs or addresses (an address is its own
    /// /32 or /128); empty means none.
    ///
    /// # Errors
    ///
    /// [`KeyError::BadProxy`] naming the first entry that is neither.
    pub fn parse(list: &str) -> Result<Self, KeyError> {
        let mut nets = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let net = entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| KeyError::BadProxy {
                    value: entry.to_owned(),
                })?;
            nets.push(net);
        }
        Ok(Self(nets))
    }

    /// Whether `ip` is one of the trusted proxies (an IPv4-mapped IPv6
    /// address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .or_else(|| nat64(v6))
            .map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 address a NAT64 gateway embeds in the well-known prefix
/// `64:ff9b::/96` (RFC 6052): every IPv4 client behind one gateway would
/// otherwise share its /64, one window for all of them.
fn nat64(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let bits = u128::from(v6);
    (bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000).then(|| {
        // The low 32 bits, by the shift and mask above.
        std::net::Ipv4Addr::from((bits & 0xffff_ffff) as u32)
    })
}

/// Where the client address is read from: the operator names it, as the
/// edge in front of the service writes it. Never chosen by which header a
/// request happens to carry: a client writes any header it likes, and most
/// proxies pass a client's own `Forwarded` (or `X-Real-IP`) through
/// untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// The connection's peer address; headers are never read.
    Peer,
    /// The rightmost `X-Forwarded-For` entry that is not a trusted proxy
    /// (nginx `proxy_add_x_forwarded_for`, AWS ALB, GCP, HAProxy
    /// `option forwardfor`, Envoy).
    XForwardedFor,
    /// The rightmost RFC 7239 `Forwarded` `for=` that is not a trusted
    /// proxy (proxies that write `Forwarded`).
    Forwarded,
    /// One address that a named edge sets and overwrites: `x-real-ip`
    /// (nginx), `cf-connecting-ip` and `true-client-ip` (Cloudflare,
    /// Akamai), `fly-client-ip` (Fly.io). Believed only from a trusted
    /// peer. The name is lowercase.
    Header(String),
}

/// The client's address for the limits: where it is read from
/// ([`Source`]), which peers are believed ([`TrustedProxies`]), and how
/// IPv6 callers are keyed (by prefix: one host holds a whole /64, so a
/// key per address would hand it 2^64 fresh windows).
///
/// ```
/// use std::net::IpAddr;
/// use ate_ratelimit::http::{ClientIp, TrustedProxies};
///
/// let lb: IpAddr = "10.0.0.5".parse()?;
/// let client_ip = ClientIp::x_forwarded_for(TrustedProxies::parse("10.0.0.0/8")?);
/// // The client wrote "6.6.6.6" itself; the load balancer appended the
/// // address it saw. Junk left of what the walk reads is never parsed.
/// let xff = [b"junk, 6.6.6.6, 203.0.113.9".as_slice()];
/// assert_eq!(client_ip.address(lb, xff)?, "203.0.113.9".parse::<IpAddr>()?);
/// assert_eq!(client_ip.key(lb, xff)?, "203.0.113.9");
/// // IPv6 callers by /64 (the default).
/// let v6 = [b"2001:db8:1:2:aaaa::1".as_slice()];
/// assert_eq!(client_ip.key(lb, v6)?, "2001:db8:1:2::/64");
/// // Not from a trusted proxy: the header is ignored.
/// let stranger: IpAddr = "198.51.100.1".parse()?;
/// assert_eq!(client_ip.address(stranger, xff)?, stranger);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIp {
    source: Source,
    trusted: TrustedProxies,
    v6_prefix: u8,
}

impl Default for ClientIp {
    fn default() -> Self {
        Self::peer()
    }
}

impl ClientIp {
    /// The default IPv6 prefix: /64, a subnet's (one host or home gets a
    /// whole one).
    pub const DEFAULT_IPV6_PREFIX: u8 = 64;

    fn of(source: Source, trusted: TrustedProxies) -> Self {
        Self {
            source,
            trusted,
            v6_prefix: Self::DEFAULT_IPV6_PREFIX,
        }
    }

    /// The peer address; no header is read.
    pub fn peer() -> Self {
        Self::of(Source::Peer, TrustedProxies::none())
    }

    /// The rightmost `X-Forwarded-For` entry that is not a `trusted` proxy.
    pub fn x_forwarded_for(trusted: TrustedProxies) -> Self {
        Self::of(Source::XForwardedFor, trusted)
    }

    /// The rightmost `Forwarded` `for=` that is not a `trusted` proxy.
    pub fn forwarded(trusted: TrustedProxies) -> Self {
        Self::of(Source::Forwarded, trusted)
    }

    /// The single address header `name` (`X-Real-IP`, `CF-Connecting-IP`,
    /// `True-Client-IP`, `Fly-Client-IP`, ...), believed from a `trusted`
    /// peer only.
    pub fn header(name: &str, trusted: TrustedProxies) -> Self {
        Self::of(Source::Header(name.trim().to_ascii_lowercase()), trusted)
    }

    /// A source by name, as a setting spells it: `peer`,
    /// `x-forwarded-for`, `forwarded`, or a header name (`x-real-ip`,
    /// `cf-connecting-ip`, ...), in any case.
    ///
    /// ```
    /// use ate_ratelimit::http::{ClientIp, Source, TrustedProxies};
    ///
    /// let lb = TrustedProxies::parse("10.0.0.0/8")?;
    /// assert_eq!(ClientIp::parse("X-Real-IP", lb.clone())?.source(), &Source::Header("x-real-ip".into()));
    /// assert!(ClientIp::parse("x forwarded for", lb).is_err());
    /// # Ok::<(), ate_ratelimit::http::KeyError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyError::BadSource`] for anything that is not a header name.
    pub fn parse(source: &str, trusted: TrustedProxies) -> Result<Self, KeyError> {
        let name = source.trim().to_ascii_lowercase();
        Ok(match name.as_str() {
            "peer" => Self::of(Source::Peer, trusted),
            "x-forwarded-for" => Self::x_forwarded_for(trusted),
            "forwarded" => Self::forwarded(trusted),
            _ if !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
            {
                Self::of(Source::Header(name), trusted)
            }
            _ => {
                return Err(KeyError::BadSource {
                    value: source.chars().take(64).collect(),
                });
            }
        })
    }

    /// IPv6 callers keyed by their first `bits` (1 to 128; 128 keys each
    /// address alone). IPv4 callers are keyed by address.
    ///
    /// # Errors
    ///
    /// [`KeyError::BadPrefix`] outside 1..=128.
    pub fn ipv6_prefix(self, bits: u8) -> Result<Self, KeyError> {
        if !(1..=128).contains(&bits) {
            return Err(KeyError::BadPrefix { bits });
        }
        Ok(Self {
            v6_prefix: bits,
            ..self
        })
    }

    /// Where the address is read from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The proxies believed.
    pub fn trusted(&self) -> &TrustedProxies {
        &self.trusted
    }

    /// The header [`address`](Self::address) reads (lowercase), if any.
    pub fn header_name(&self) -> Option<&str> {
        match &self.source {
            Source::Peer => None,
            Source::XForwardedFor => Some("x-forwarded-for"),
            Source::Forwarded => Some("forwarded"),
            Source::Header(name) => Some(name),
        }
    }

    /// The client's address, from the `peer` and every line of the
    /// [`header_name`](Self::header_name) header, in order: the peer,
    /// unless it is a trusted proxy; then the source's header, walked from
    /// the right (the entries the proxies appended) past trusted proxies
    /// to the first address that is not one. The leftmost entry is
    /// whatever the client sent, so it is taken only when every hop after
    /// it is trusted; entries the walk does not reach are never read. A
    /// hop a proxy could not name (`unknown`) stops the walk at the proxy
    /// that reported it; a trusted peer that sent no such header is the
    /// client itself.
    ///
    /// # Errors
    ///
    /// [`KeyError::Malformed`] naming the header when the walk reaches
    /// something that is not an address (or a single-address header given
    /// twice).
    pub fn address<'a, I>(&self, peer: IpAddr, values: I) -> Result<IpAddr, KeyError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: DoubleEndedIterator,
    {
        let peer = canonical(peer);
        if matches!(self.source, Source::Peer) || !self.trusted.contains(peer) {
            return Ok(peer);
        }
        // Messages spell the header as people write it.
        let name = match &self.source {
            Source::XForwardedFor => "X-Forwarded-For",
            Source::Forwarded => "Forwarded",
            _ => self.header_name().unwrap_or_default(),
        };
        let mut nearest = peer;
        let mut step = |hop: Hop| match hop {
            Hop::Hidden => Some(nearest),
            Hop::Ip(ip) if self.trusted.contains(ip) => {
                nearest = ip;
                None
            }
            Hop::Ip(ip) => Some(ip),
        };
        match &self.source {
            Source::Peer => Ok(peer),
            Source::XForwardedFor => {
                for line in values.into_iter().rev() {
                    for entry in line.rsplit(|b| *b == b',') {
                        if entry.trim_ascii().is_empty() {
                            continue;
                        }
                        if let Some(ip) = step(parse_hop(entry, name)?) {
                            return Ok(ip);
                        }
                    }
                }
                Ok(nearest)
            }
            Source::Forwarded => {
                for line in values.into_iter().rev() {
                    for element in line.rsplit(|b| *b == b',') {
                        let for_value = element.split(|b| *b == b';').find_map(|pair| {
                            let eq = pair.iter().position(|b| *b == b'=')?;
                            pair[..eq]
                                .trim_ascii()
                                .eq_ignore_ascii_case(b"for")
                                .then(|| &pair[eq + 1..])
                        });
                        if let Some(value) = for_value
                            && let Some(ip) = step(parse_hop(value, name)?)
                        {
                            return Ok(ip);
                        }
                    }
                }
                Ok(nearest)
            }
            Source::Header(_) => {
                let mut lines = values.into_iter();
                match (lines.next(), lines.next()) {
                    (None, _) => Ok(peer),
                    (Some(one), None) => match parse_hop(one, name)? {
                        Hop::Ip(ip) => Ok(ip),
                        Hop::Hidden => Ok(peer),
                    },
                    (Some(_), Some(_)) => Err(KeyError::Malformed {
                        header: name.to_owned(),
                        value: "(given more than once)".into(),
                    }),
                }
            }
        }
    }

    /// The limits' key for an address: an IPv4 address as written, an
    /// IPv6 one as its prefix (`2001:db8:1:2::/64`; as written at /128).
    pub fn key_of(&self, ip: IpAddr) -> String {
        self.key_text(ip).as_str().to_owned()
    }

    /// [`key_of`](Self::key_of), inline (no heap allocation).
    pub(crate) fn key_text(&self, ip: IpAddr) -> CallerKey {
        match canonical(ip) {
            IpAddr::V4(v4) => CallerKey::ipv4(v4),
            IpAddr::V6(v6) if self.v6_prefix >= 128 => CallerKey::display(v6),
            IpAddr::V6(v6) => {
                let mask = u128::MAX << (128 - u32::from(self.v6_prefix));
                let net = std::net::Ipv6Addr::from(u128::from(v6) & mask);
                CallerKey::display(format_args!("{net}/{}", self.v6_prefix))
            }
        }
    }

    /// [`address`](Self::address), as the limits' key
    /// ([`key_of`](Self::key_of)).
    ///
    /// # Errors
    ///
    /// As for [`address`](Self::address).
    pub fn key<'a, I>(&self, peer: IpAddr, values: I) -> Result<String, KeyError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: DoubleEndedIterator,
    {
        self.address(peer, values).map(|ip| self.key_of(ip))
    }
}

/// One hop of a forwarding chain.
enum Hop {
    Ip(IpAddr),
    /// `unknown` or an obfuscated identifier (RFC 7239): no address.
    Hidden,
}

fn shown(value: &str) -> String {
    value.chars().take(64).collect()
}

/// An address as forwarding headers write it: `1.2.3.4`, `1.2.3.4:80`,
/// `2001:db8::1`, `[2001:db8::1]:443`, optionally quoted.
fn parse_hop(raw: &[u8], header: &str) -> Result<Hop, KeyError> {
    let malformed = |v: &str| KeyError::Malformed {
        header: header.to_owned(),
        value: shown(v),
    };
    let v = std::str::from_utf8(raw)
        .map_err(|_| malformed(&String::from_utf8_lossy(raw)))?
        .trim()
        .trim_matches('"');
    if v.eq_ignore_ascii_case("unknown") || v.starts_with('_') {
        return Ok(Hop::Hidden);
    }
    let port_ok = |port: &str| port.parse::<u16>().is_ok();
    let bare = if let Some(rest) = v.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        let (addr, after) = rest.split_once(']').ok_or_else(|| malformed(v))?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(port_ok)) {
            return Err(malformed(v));
        }
        addr
    } else if let Some((addr, port)) = v.split_once(':').filter(|(_, p)| !p.contains(':')) {
        // `v4:port` (a bare v6 has more than one colon).
        if !port_ok(port) {
            return Err(malformed(v));
        }
        addr
    } else {
        v
    };
    bare.parse::<IpAddr>()
        .map(|ip| Hop::Ip(canonical(ip)))
        .map_err(|_| malformed(v))
}
