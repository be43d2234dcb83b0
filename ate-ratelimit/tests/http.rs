//! The HTTP layer (feature `tower`): who a request is (peer, header,
//! client IP behind trusted proxies, spoofed and malformed forwarding
//! headers), and the layer in axum: 429 with Retry-After and a body naming
//! the limits, route costs, and the RateLimit fields as an RFC 9651
//! parser reads them.
#![cfg(feature = "tower")]

mod fields;
use fields::parse_field;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use ate_ratelimit::http::{ClientIp, KeyError, TrustedProxies};
use ate_ratelimit::tower::{Caller, Checked, RateLimitLayer};
use ate_ratelimit::{LimitId, LimitSet, Limits, Policy, Quota, clock::ManualClock};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request};
use axum::routing::post;
use http_body_util::BodyExt;
use tower::ServiceExt;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The client address from `X-Forwarded-For` lines through `trusted`.
fn client_ip<'a>(
    peer: IpAddr,
    xff: impl IntoIterator<Item = &'a [u8], IntoIter: DoubleEndedIterator>,
    trusted: &TrustedProxies,
) -> Result<IpAddr, KeyError> {
    ClientIp::x_forwarded_for(trusted.clone()).address(peer, xff)
}

/// The client address over a table of peers, headers, sources and trusted
/// proxies.
#[test]
fn the_client_ip_is_taken_from_the_right_through_trusted_proxies_only() {
    let lb = TrustedProxies::parse("10.0.0.0/8, 2001:db8:ffff::/48").unwrap();
    let none = TrustedProxies::none();
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        &'a TrustedProxies,
        &'a str,
    );
    let cases: [Case<'_>; 13] = [
        (
            "no proxies: the header is ignored",
            "203.0.113.9",
            &["6.6.6.6"],
            &[],
            &none,
            "203.0.113.9",
        ),
        (
            "untrusted peer: ignored",
            "198.51.100.1",
            &["6.6.6.6"],
            &[],
            &lb,
            "198.51.100.1",
        ),
        (
            "trusted peer, no header",
            "10.0.0.5",
            &[],
            &[],
            &lb,
            "10.0.0.5",
        ),
        (
            "one trusted proxy",
            "10.0.0.5",
            &["203.0.113.9"],
            &[],
            &lb,
            "203.0.113.9",
        ),
        (
            "spoofed leftmost entry",
            "10.0.0.5",
            &["6.6.6.6, 203.0.113.9"],
            &[],
            &lb,
            "203.0.113.9",
        ),
        (
            "a chain of trusted proxies",
            "10.0.0.5",
            &["203.0.113.9, 10.1.1.1, 10.2.2.2"],
            &[],
            &lb,
            "203.0.113.9",
        ),
        (
            "header lines in order",
            "10.0.0.5",
            &["6.6.6.6", "203.0.113.9, 10.1.1.1"],
            &[],
            &lb,
            "203.0.113.9",
        ),
        (
            "every hop trusted: the leftmost",
            "10.0.0.5",
            &["10.9.9.9, 10.1.1.1"],
            &[],
            &lb,
            "10.9.9.9",
        ),
        (
            "ports and brackets",
            "10.0.0.5",
            &["[2001:db8::7]:4711, 10.1.1.1:80"],
            &[],
            &lb,
            "2001:db8::7",
        ),
        (
            "source Forwarded: its rightmost untrusted for=",
            "10.0.0.5",
            &["6.6.6.6"],
            &["for=192.0.2.60;proto=https, for=\"[2001:db8:ffff::1]:443\""],
            &lb,
            "192.0.2.60",
        ),
        (
            "source X-Forwarded-For: a client's own Forwarded is never read",
            "10.0.0.5",
            &["203.0.113.9"],
            &["for=192.0.2.60"],
            &lb,
            "203.0.113.9",
        ),
        (
            "unknown stops at the proxy that said it",
            "10.0.0.5",
            &[],
            &["for=unknown, for=10.1.1.1"],
            &lb,
            "10.1.1.1",
        ),
        (
            "an IPv4-mapped peer is its IPv4 address",
            "::ffff:10.0.0.5",
            &["203.0.113.9"],
            &[],
            &lb,
            "203.0.113.9",
        ),
    ];
    for (what, peer, xff, fwd, trusted, want) in cases {
        // The operator names the source: Forwarded where the case's
        // description says so, else X-Forwarded-For.
        let got = if what.starts_with("source Forwarded") || what.starts_with("unknown") {
            ClientIp::forwarded(trusted.clone()).address(ip(peer), fwd.iter().map(|s| s.as_bytes()))
        } else {
            ClientIp::x_forwarded_for(trusted.clone())
                .address(ip(peer), xff.iter().map(|s| s.as_bytes()))
        };
        assert_eq!(got, Ok(ip(want)), "{what}");
    }
}

/// A trusted proxy's header that holds no address is a 400 naming it,
/// never a panic and never a key the client chose; an untrusted peer's
/// header is not even read.
#[test]
fn malformed_forwarding_headers_are_errors_naming_them() {
    let lb = TrustedProxies::parse("10.0.0.0/8").unwrap();
    for bad in [
        "not-an-ip",
        "203.0.113.9, ",
        "1.2.3.4.5",
        "[::1",
        "[::1]x",
        "1.2.3.4:port",
        "\u{e9}",
    ] {
        let got = client_ip(ip("10.0.0.5"), [bad.as_bytes()], &lb);
        if bad == "203.0.113.9, " {
            assert_eq!(got, Ok(ip("203.0.113.9")), "an empty entry is skipped");
            continue;
        }
        let err = got.unwrap_err();
        assert!(
            matches!(
                err,
                KeyError::Malformed { ref header, .. } if header == "X-Forwarded-For"
            ),
            "{bad}: {err}"
        );
    }
    let bytes: &[u8] = &[0xff, 0xfe];
    assert!(client_ip(ip("10.0.0.5"), [bytes], &lb).is_err());
    assert_eq!(
        client_ip(ip("198.51.100.1"), [bytes], &lb),
        Ok(ip("198.51.100.1"))
    );
    let long = "x".repeat(5_000);
    let err = client_ip(ip("10.0.0.5"), [long.as_bytes()], &lb).unwrap_err();
    assert!(err.to_string().len() < 200, "the value is cut: {err}");
    assert!(matches!(
        TrustedProxies::parse("10.0.0.0/8, lb.internal"),
        Err(KeyError::BadProxy { value }) if value == "lb.internal"
    ));
}

fn limits(n: u32) -> (Arc<Limits<ManualClock>>, LimitId, LimitId) {
    let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
    let q = |n| Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_secs(60)).unwrap();
    let route = set.add("notify", q(n));
    let bucket = set.add("requests", q(100));
    (Arc::new(Limits::local(set)), route, bucket)
}

fn app(layer: RateLimitLayer<ManualClock>) -> Router {
    Router::new()
        .route("/notify", post(|| async { "sent" }))
        .route("/export", post(|| async { "exported" }))
        .route("/free", post(|| async { "free" }))
        .layer(layer)
}

fn axum_peer() -> Caller {
    Caller::peer().peer_from(|parts| {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    })
}

async fn call(
    app: &Router,
    path: &str,
    peer: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap, String) {
    let mut req = Request::post(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req.body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo(
        format!("{peer}:5000").parse::<SocketAddr>().unwrap(),
    ));
    let res = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&body).into(),
    )
}

#[tokio::test]
async fn allowed_requests_carry_the_ratelimit_fields_and_the_n_plus_first_gets_429() {
    let (limits, route, bucket) = limits(3);
    let app = app(RateLimitLayer::new(limits.clone())
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(axum_peer()));
    for left in (0..3i64).rev() {
        let (status, headers, body) = call(&app, "/notify", "203.0.113.9", &[]).await;
        assert_eq!((status, body.as_str()), (200, "sent"));
        let policy = parse_field(headers["ratelimit-policy"].to_str().unwrap());
        assert_eq!(
            policy,
            [
                (
                    "notify".to_owned(),
                    vec![("q".to_owned(), 3), ("w".to_owned(), 60)]
                ),
                (
                    "requests".to_owned(),
                    vec![("q".to_owned(), 100), ("w".to_owned(), 60)]
                ),
            ]
        );
        let now = parse_field(headers["ratelimit"].to_str().unwrap());
        assert_eq!(
            now[0],
            (
                "notify".to_owned(),
                vec![("r".to_owned(), left), ("t".to_owned(), 60)]
            )
        );
        assert_eq!(now[1].1[0], ("r".to_owned(), 97 + left));
    }
    let (status, headers, body) = call(&app, "/notify", "203.0.113.9", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "60");
    assert_eq!(
        body,
        r#"{"error":"rate_limited","denied_by":["notify"],"retry_after_secs":60}"#
    );
    assert!(
        parse_field(headers["ratelimit"].to_str().unwrap())[0]
            .1
            .contains(&("r".to_owned(), 0))
    );
    // Another caller, and a path with no route, are unaffected.
    assert_eq!(call(&app, "/notify", "198.51.100.1", &[]).await.0, 200);
    let (status, headers, _) = call(&app, "/free", "203.0.113.9", &[]).await;
    assert_eq!(status, 200);
    assert!(headers.get("ratelimit").is_none());
}

#[tokio::test]
async fn a_heavier_route_costs_more_attempts() {
    let (limits, route, bucket) = limits(10);
    let app = app(RateLimitLayer::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .route("/export", &[route, bucket], NonZeroU32::new(4).unwrap())
        .caller(axum_peer()));
    assert_eq!(call(&app, "/export", "203.0.113.9", &[]).await.0, 200);
    assert_eq!(call(&app, "/export", "203.0.113.9", &[]).await.0, 200);
    let (status, _, body) = call(&app, "/export", "203.0.113.9", &[]).await;
    assert_eq!(status, 429, "8 used, 4 more do not fit: {body}");
    // CountDenied: the denied export's 4 were recorded too (10 of 10).
    assert_eq!(call(&app, "/notify", "203.0.113.9", &[]).await.0, 429);
}

#[tokio::test]
async fn a_spoofed_forwarding_header_does_not_buy_a_fresh_window() {
    let (limits, route, bucket) = limits(2);
    let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
    let caller = Caller::client_ip(ClientIp::x_forwarded_for(trusted)).peer_from(|parts| {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    });
    let app = app(RateLimitLayer::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(caller));
    // Through the load balancer, the client claims another address each
    // time; the balancer appends the one it saw.
    for fake in ["1.1.1.1", "2.2.2.2"] {
        let xff = format!("{fake}, 203.0.113.9");
        assert_eq!(
            call(&app, "/notify", "10.0.0.5", &[("x-forwarded-for", &xff)])
                .await
                .0,
            200
        );
    }
    let xff = "3.3.3.3, 203.0.113.9";
    assert_eq!(
        call(&app, "/notify", "10.0.0.5", &[("x-forwarded-for", xff)])
            .await
            .0,
        429
    );
    // Straight to the pod, bypassing the balancer: its header is ignored.
    assert_eq!(
        call(
            &app,
            "/notify",
            "198.51.100.7",
            &[("x-forwarded-for", "203.0.113.77")]
        )
        .await
        .0,
        200
    );
    let (status, _, body) = call(
        &app,
        "/notify",
        "10.0.0.5",
        &[("x-forwarded-for", "nonsense")],
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body.contains("X-Forwarded-For holds \\\"nonsense\\\""),
        "{body}"
    );
}

#[tokio::test]
async fn a_header_caller_must_be_given_once_in_visible_ascii() {
    let (limits, route, bucket) = limits(5);
    let app = app(RateLimitLayer::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(Caller::header(axum::http::HeaderName::from_static(
            "x-api-key",
        ))));
    assert_eq!(
        call(&app, "/notify", "203.0.113.9", &[("x-api-key", "k-1")])
            .await
            .0,
        200
    );
    for bad in [
        &[][..],
        &[("x-api-key", "")][..],
        &[("x-api-key", "a"), ("x-api-key", "b")][..],
        &[("x-api-key", "a b")][..],
    ] {
        let (status, _, body) = call(&app, "/notify", "203.0.113.9", bad).await;
        assert_eq!(status, 400, "{bad:?}");
        assert!(body.contains("x-api-key"), "{body}");
    }
}

#[tokio::test]
async fn a_peer_the_server_does_not_give_is_a_400_not_a_panic() {
    let (limits, route, bucket) = limits(5);
    // The default caller reads a `SocketAddr` extension axum does not set.
    let app = app(RateLimitLayer::new(limits).route("/notify", &[route, bucket], NonZeroU32::MIN));
    let (status, _, body) = call(&app, "/notify", "203.0.113.9", &[]).await;
    assert_eq!(status, 400);
    assert!(body.contains("peer address is unknown"), "{body}");
}

#[test]
fn entries_the_walk_never_reaches_are_never_parsed() {
    let lb = TrustedProxies::parse("10.0.0.0/8").unwrap();
    // Whatever a client writes left of what its proxies appended.
    for junk in ["not an address", "1.2.3.4.5", "\u{e9}", "[::1"] {
        let line = format!("{junk}, 203.0.113.9, 10.1.1.1");
        assert_eq!(
            client_ip(ip("10.0.0.5"), [line.as_bytes()], &lb),
            Ok(ip("203.0.113.9")),
            "{junk}"
        );
        // In a line of its own, before the proxies' line.
        assert_eq!(
            client_ip(
                ip("10.0.0.5"),
                [junk.as_bytes(), b"203.0.113.9".as_slice()],
                &lb
            ),
            Ok(ip("203.0.113.9")),
            "{junk}"
        );
    }
    let bytes: &[u8] = b"\xff\xfe, 203.0.113.9";
    assert_eq!(
        client_ip(ip("10.0.0.5"), [bytes], &lb),
        Ok(ip("203.0.113.9"))
    );
    // Reached: a 400 naming the header.
    let e = client_ip(ip("10.0.0.5"), [b"203.0.113.9, bogus".as_slice()], &lb).unwrap_err();
    assert!(e.to_string().contains("X-Forwarded-For"), "{e}");
}

#[test]
fn a_single_address_header_is_read_only_from_a_trusted_peer_and_only_once() {
    let lb = TrustedProxies::parse("10.0.0.0/8").unwrap();
    let real_ip = ClientIp::parse("X-Real-IP", lb.clone()).unwrap();
    assert_eq!(real_ip.header_name(), Some("x-real-ip"));
    assert_eq!(
        real_ip.address(ip("10.0.0.5"), [b"203.0.113.9".as_slice()]),
        Ok(ip("203.0.113.9"))
    );
    // From anyone else: the peer.
    assert_eq!(
        real_ip.address(ip("198.51.100.1"), [b"203.0.113.9".as_slice()]),
        Ok(ip("198.51.100.1"))
    );
    // The edge did not set it: the peer (the edge) itself.
    assert_eq!(real_ip.address(ip("10.0.0.5"), []), Ok(ip("10.0.0.5")));
    // Twice: which one the edge wrote is unknowable, a 400.
    let twice = real_ip.address(
        ip("10.0.0.5"),
        [b"1.1.1.1".as_slice(), b"203.0.113.9".as_slice()],
    );
    assert!(
        matches!(twice, Err(KeyError::Malformed { .. })),
        "{twice:?}"
    );
    for bad in ["", "x forwarded for", "peer;drop"] {
        assert!(
            matches!(
                ClientIp::parse(bad, lb.clone()),
                Err(KeyError::BadSource { .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn ipv6_callers_are_keyed_by_prefix_and_mapped_ipv4_as_ipv4() {
    let peer = ClientIp::peer();
    let key = |c: &ClientIp, a: &str| c.key(ip(a), []).unwrap();
    assert_eq!(key(&peer, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
    assert_eq!(key(&peer, "2001:db8:1:2:ffff::9"), "2001:db8:1:2::/64");
    assert_ne!(key(&peer, "2001:db8:1:3::1"), key(&peer, "2001:db8:1:2::1"));
    assert_eq!(key(&peer, "::ffff:203.0.113.9"), "203.0.113.9");
    assert_eq!(key(&peer, "203.0.113.9"), "203.0.113.9");
    // Behind a NAT64 gateway each IPv4 client keeps its own window.
    assert_eq!(key(&peer, "64:ff9b::203.0.113.9"), "203.0.113.9");
    assert_eq!(key(&peer, "64:ff9b::198.51.100.1"), "198.51.100.1");
    // Only the well-known /96: a neighbour of it is an IPv6 caller.
    assert_eq!(key(&peer, "64:ff9b:0:1::cb00:7109"), "64:ff9b:0:1::/64");
    let p48 = ClientIp::peer().ipv6_prefix(48).unwrap();
    assert_eq!(key(&p48, "2001:db8:1:2::1"), "2001:db8:1::/48");
    let each = ClientIp::peer().ipv6_prefix(128).unwrap();
    assert_eq!(key(&each, "2001:db8:1:2::1"), "2001:db8:1:2::1");
    assert!(matches!(
        ClientIp::peer().ipv6_prefix(0),
        Err(KeyError::BadPrefix { bits: 0 })
    ));
    assert!(ClientIp::peer().ipv6_prefix(129).is_err());
}

/// The attack the reviewer ran: a client that writes its own `Forwarded`
/// behind a proxy that appends only to `X-Forwarded-For` (nginx, AWS ALB,
/// GCP) picked its own key whenever `Forwarded` was present.
#[tokio::test]
async fn a_client_written_forwarded_header_never_picks_the_key() {
    let (limits, route, bucket) = limits(1);
    let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
    let caller = Caller::client_ip(ClientIp::x_forwarded_for(trusted)).peer_from(|parts| {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    });
    let app = app(RateLimitLayer::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(caller));
    let mut allowed = 0;
    for i in 0..20 {
        let own = format!("for=198.51.100.{i}");
        let (status, _, _) = call(
            &app,
            "/notify",
            "10.0.0.5",
            &[("forwarded", &own), ("x-forwarded-for", "203.0.113.9")],
        )
        .await;
        allowed += usize::from(status == 200);
    }
    assert_eq!(allowed, 1, "one of 20 under a limit of 1");
}

/// Every way a client might spell the limited URL.
const SPELLINGS: [&str; 10] = [
    "/notify",
    "/%6Eotify",
    "/notif%79",
    "/%6e%6f%74%69%66%79",
    "/notify/",
    "//notify",
    "/NOTIFY",
    "/Notify",
    "/notify?x=1",
    "/./notify",
];

/// A caller with a limit of 1 used up: each spelling must be refused by
/// the limit (429) or never reach the handler (404), never served.
async fn no_spelling_is_served_unlimited(app: &Router) {
    assert_eq!(call(app, "/notify", "203.0.113.9", &[]).await.0, 200);
    for path in SPELLINGS {
        let (status, _, body) = call(app, path, "203.0.113.9", &[]).await;
        assert!(
            status == 429 || status == 404,
            "{path}: {status} {body} (served past the limit)"
        );
    }
}

#[tokio::test]
async fn no_url_spelling_reaches_an_axum_route_unlimited() {
    // A path table on the router...
    let (limits, route, bucket) = limits(1);
    let table = app(RateLimitLayer::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(axum_peer()));
    no_spelling_is_served_unlimited(&table).await;
    // ...and the limit bound to the route itself.
    let (set, route, bucket) = self::limits(1);
    let per_route = Router::new().route(
        "/notify",
        post(|| async { "sent" }).layer(
            RateLimitLayer::new(set)
                .limit(&[route, bucket], NonZeroU32::MIN)
                .caller(axum_peer()),
        ),
    );
    no_spelling_is_served_unlimited(&per_route).await;
}

#[tokio::test]
async fn a_shadow_limit_counts_and_reports_but_never_refuses() {
    let (limits, route, bucket) = self::limits(1);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let shadowed = Router::new().route(
        "/notify",
        post(
            |axum::Extension(checked): axum::Extension<Checked>| async move {
                format!("shadow_denied={}", checked.shadow_denied())
            },
        )
        .layer(
            RateLimitLayer::new(limits)
                .limit(&[route, bucket], NonZeroU32::MIN)
                .shadow(&[route])
                .caller(axum_peer())
                .on_decision(move |_, d| log.lock().unwrap().push(d.is_allowed())),
        ),
    );
    for i in 0..3 {
        let (status, headers, body) = call(&shadowed, "/notify", "203.0.113.9", &[]).await;
        assert_eq!(status, 200, "a shadow limit never refuses");
        assert_eq!(body, format!("shadow_denied={}", i > 0));
        // The fields speak of the enforced limits alone: a client is never
        // told to slow down to a shadow limit.
        let field = headers["ratelimit"].to_str().unwrap().to_owned();
        assert!(!field.contains("notify"), "{field}");
        assert!(field.contains(r#""requests";r="#), "{field}");
        let policy = headers["ratelimit-policy"].to_str().unwrap().to_owned();
        assert!(!policy.contains("notify"), "{policy}");
    }
    // Each request: the enforced check, then the shadow limit's own.
    assert_eq!(
        *seen.lock().unwrap(),
        [true, true, true, false, true, false]
    );
    // A limit not in shadow mode still refuses: the bucket of 100 here.
    let (limits, route, bucket) = self::limits(1);
    let strict = app(RateLimitLayer::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .shadow(&[bucket])
        .caller(axum_peer()));
    assert_eq!(call(&strict, "/notify", "203.0.113.9", &[]).await.0, 200);
    assert_eq!(call(&strict, "/notify", "203.0.113.9", &[]).await.0, 429);
}

/// A route with a real limit of `real` a minute beside a shadow limit
/// (`shadow_n` per `shadow_window`), under `policy`.
fn real_beside_shadow(policy: Policy, real: u32, shadow_n: u32, shadow_window: Duration) -> Router {
    let mut set = LimitSet::new(policy, ManualClock::default());
    let q = |n, w| Quota::new(NonZeroU32::new(n).unwrap(), w).unwrap();
    let enforced = set.add("real", q(real, Duration::from_secs(60)));
    let shadow = set.add("trial", q(shadow_n, shadow_window));
    app(RateLimitLayer::new(Arc::new(Limits::local(set)))
        .route("/notify", &[enforced, shadow], NonZeroU32::MIN)
        .shadow(&[shadow])
        .caller(axum_peer()))
}

#[tokio::test]
async fn a_shadow_limit_never_changes_what_the_enforced_ones_decide() {
    // Under AllowedOnly nothing was recorded once the shadow limit denied:
    // the real 3/min let 20 of 20 through.
    for policy in [Policy::AllowedOnly, Policy::CountDenied] {
        let app = real_beside_shadow(policy, 3, 1, Duration::from_secs(60));
        let mut allowed = 0;
        for _ in 0..20 {
            allowed += u32::from(call(&app, "/notify", "203.0.113.9", &[]).await.0 == 200);
        }
        assert_eq!(allowed, 3, "{policy:?}");
    }
}

#[tokio::test]
async fn a_shadow_limit_never_stretches_a_refusals_retry_after() {
    // A real 3/min beside a shadow 2/day answered Retry-After: 86400.
    let app = real_beside_shadow(Policy::CountDenied, 3, 2, Duration::from_secs(86_400));
    for _ in 0..3 {
        assert_eq!(call(&app, "/notify", "203.0.113.9", &[]).await.0, 200);
    }
    let (status, headers, body) = call(&app, "/notify", "203.0.113.9", &[]).await;
    assert_eq!(status, 429, "{body}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(!body.contains("trial"), "{body}");
    for name in ["ratelimit", "ratelimit-policy"] {
        let field = headers[name].to_str().unwrap();
        assert!(!field.contains("trial"), "{name}: {field}");
    }
}

#[test]
fn a_fresh_windows_reset_is_never_past_the_window() {
    // With a real clock between ticks, the first attempt is stamped at
    // the next tick and left a window and a fraction from now: `t=61`.
    let mut set = LimitSet::new(Policy::CountDenied, ate_ratelimit::MonotonicClock::new());
    let id = set.add(
        "notify",
        Quota::new(NonZeroU32::new(150).unwrap(), Duration::from_secs(60)).unwrap(),
    );
    for caller in 0..200 {
        let d = set.check(&[id], &format!("c{caller}"));
        let field = ate_ratelimit::http::ratelimit_field(&d);
        assert_eq!(field, r#""notify";r=149;t=60"#);
    }
}

#[tokio::test]
async fn without_checked_the_handler_gets_no_checked_and_the_client_the_fields() {
    let (limits, route, bucket) = self::limits(2);
    let router = Router::new().route(
        "/notify",
        post(|checked: Option<axum::Extension<Checked>>| async move {
            format!("checked={}", checked.is_some())
        })
        .layer(
            RateLimitLayer::new(limits)
                .limit(&[route, bucket], NonZeroU32::MIN)
                .caller(axum_peer())
                .without_checked(),
        ),
    );
    let (status, headers, body) = call(&router, "/notify", "203.0.113.9", &[]).await;
    assert_eq!((status, body.as_str()), (200, "checked=false"));
    assert!(headers.contains_key("ratelimit-policy"), "{headers:?}");
    assert!(
        headers["ratelimit"]
            .to_str()
            .unwrap()
            .contains(r#""notify";r=1"#)
    );
    // Still limited: the third is refused.
    let _ = call(&router, "/notify", "203.0.113.9", &[]).await;
    let (status, _, _) = call(&router, "/notify", "203.0.113.9", &[]).await;
    assert_eq!(status, 429);
}
