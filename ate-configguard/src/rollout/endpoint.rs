//! What a probe asks: the endpoint behind an `httpGet`, `exec`, `grpc` or
//! `tcpSocket` probe, with named ports resolved and URL paths spelled one
//! way, so that two spellings of one endpoint compare equal.

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One endpoint a probe (or a hook) reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// An HTTP path on a port (the path as [`normal_path`] spells it).
    Http { port: i32, path: String },
    /// A command run in the container.
    Exec(Vec<String>),
    /// A gRPC health service on a port.
    Grpc { port: i32, service: String },
    /// A TCP connect to a port.
    Tcp(i32),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Http { port, path } => write!(f, "httpGet {path} on port {port}"),
            Self::Exec(argv) => write!(f, "exec {argv:?}"),
            Self::Grpc { port, service } if service.is_empty() => {
                write!(f, "grpc on port {port}")
            }
            Self::Grpc { port, service } => write!(f, "grpc {service} on port {port}"),
            Self::Tcp(port) => write!(f, "tcpSocket on port {port}"),
        }
    }
}

/// A port a probe names, resolved against the container's declared ports:
/// a number as it is, a name to the port of that name, or `Err` naming a
/// name the container does not declare (the kubelet fails every probe).
pub(super) fn resolve_port(port: &IntOrString, container: &Container) -> Result<i32, String> {
    match port {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<i32>() {
                return Ok(n);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| {
                    format!(
                        "port `{name}`, which container {} does not declare (the kubelet fails \
                         every such probe)",
                        container.name
                    )
                })
        }
    }
}

/// The endpoint a probe reaches; `Ok(None)` for a probe with no handler
/// (the API server refuses one, so it is unusable input upstream).
pub(super) fn probe_endpoint(
    probe: &Probe,
    container: &Container,
) -> Result<Option<Endpoint>, String> {
    if let Some(h) = &probe.http_get {
        return Ok(Some(Endpoint::Http {
            port: resolve_port(&h.port, container)?,
            path: normal_path(h.path.as_deref().unwrap_or("/")),
        }));
    }
    if let Some(e) = &probe.exec {
        return Ok(Some(Endpoint::Exec(e.command.clone().unwrap_or_default())));
    }
    if let Some(g) = &probe.grpc {
        return Ok(Some(Endpoint::Grpc {
            port: g.port,
            service: g.service.clone().unwrap_or_default(),
        }));
    }
    if let Some(t) = &probe.tcp_socket {
        return Ok(Some(Endpoint::Tcp(resolve_port(&t.port, container)?)));
    }
    Ok(None)
}

/// A URL path spelled one way: no query or fragment, `%XX` of unreserved
/// characters decoded, empty and `.` segments dropped, `..` applied, no
/// trailing slash. `/ready`, `/ready/`, `//ready`, `/./ready`,
/// `/re%61dy` and `/ready?probe=live` are one path, as HTTP routers
/// (axum, actix, Go's mux after its redirect) serve them alike.
pub(super) fn normal_path(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let bytes = path.as_bytes();
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = path.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
            && (b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        {
            decoded.push(b as char);
            i += 3;
            continue;
        }
        let c = path[i..].chars().next().unwrap_or('\u{fffd}');
        decoded.push(c);
        i += c.len_utf8().max(1);
    }
    let mut segments: Vec<&str> = Vec::new();
    for s in decoded.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    format!("/{}", segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::normal_path;

    #[test]
    fn five_spellings_of_one_path_are_one_path() {
        for p in [
            "/ready",
            "/ready/",
            "//ready",
            "/./ready",
            "/re%61dy",
            "/ready?probe=live",
            "ready",
            "/x/../ready",
        ] {
            assert_eq!(normal_path(p), "/ready", "{p}");
        }
        assert_eq!(normal_path(""), "/");
        assert_eq!(normal_path("/health"), "/health");
        assert_ne!(normal_path("/Ready"), "/ready", "paths are case-sensitive");
        // A reserved character stays encoded.
        assert_eq!(normal_path("/a%2Fb"), "/a%2Fb");
    }
}
