//! The Actix middleware (feature `actix`) through actix-web's test
//! utilities and over a real socket: the same answers as the tower layer
//! (fields parsed as RFC 9651 structured fields, 429 naming the limits),
//! the key extraction table (peer, trusted proxy, chain of trusted
//! proxies, spoofed leftmost entry, malformed headers), route costs, the
//! decision hook and `Checked` for the handler.
#![cfg(feature = "actix")]

mod fields;
use fields::parse_field;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::{App, test, web};
use ate_ratelimit::actix::{Caller, Checked, RateLimit};
use ate_ratelimit::http::{ClientIp, TrustedProxies};
use ate_ratelimit::{LimitId, LimitSet, Limits, Policy, Quota, clock::ManualClock};

fn limits(n: u32) -> (Arc<Limits<ManualClock>>, LimitId, LimitId) {
    let mut set = LimitSet::new(Policy::CountDenied, ManualClock::default());
    let q = |n| Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_secs(60)).unwrap();
    let route = set.add("notify", q(n));
    let bucket = set.add("requests", q(100));
    (Arc::new(Limits::local(set)), route, bucket)
}

fn app(
    layer: RateLimit<ManualClock>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .wrap(layer)
        .route(
            "/notify",
            web::post().to(|checked: web::ReqData<Checked>| async move {
                format!("sent to {}, {} left", checked.key(), checked.remaining())
            }),
        )
        .route("/export", web::post().to(|| async { "exported" }))
        .route("/free", web::post().to(|| async { "free" }))
}

fn post(path: &str, peer: &str, headers: &[(&str, &str)]) -> test::TestRequest {
    let mut req = test::TestRequest::post()
        .uri(path)
        .peer_addr(format!("{peer}:5000").parse::<SocketAddr>().unwrap());
    for (k, v) in headers {
        req = req.append_header((*k, *v));
    }
    req
}

/// Status, headers (name, value), body of the answer to `$req`.
macro_rules! call {
    ($app:expr, $req:expr) => {{
        let res = test::call_service($app, $req.to_request()).await;
        let status = res.status().as_u16();
        let headers: Vec<(String, String)> = res
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        let body = test::read_body(res).await;
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }};
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[actix_web::test]
async fn allowed_requests_carry_the_fields_and_the_n_plus_first_gets_429() {
    let (limits, route, bucket) = limits(3);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = test::init_service(app(RateLimit::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .on_decision(move |key, decision| {
            log.lock()
                .unwrap()
                .push((key.to_owned(), decision.is_allowed()));
        })))
    .await;
    for left in (0..3i64).rev() {
        let (status, headers, body) = call!(&app, post("/notify", "203.0.113.9", &[]));
        assert_eq!(status, 200);
        assert_eq!(body, format!("sent to 203.0.113.9, {left} left"));
        assert_eq!(
            parse_field(header(&headers, "ratelimit-policy").unwrap()),
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
        let now = parse_field(header(&headers, "ratelimit").unwrap());
        assert_eq!(
            now[0],
            (
                "notify".to_owned(),
                vec![("r".to_owned(), left), ("t".to_owned(), 60)]
            )
        );
    }
    let (status, headers, body) = call!(&app, post("/notify", "203.0.113.9", &[]));
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("60"));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(
        body,
        r#"{"error":"rate_limited","denied_by":["notify"],"retry_after_secs":60}"#
    );
    assert!(
        parse_field(header(&headers, "ratelimit").unwrap())[0]
            .1
            .contains(&("r".to_owned(), 0))
    );
    // Another caller, and a path with no route, are unaffected.
    assert_eq!(call!(&app, post("/notify", "198.51.100.1", &[])).0, 200);
    let (status, headers, _) = call!(&app, post("/free", "203.0.113.9", &[]));
    assert_eq!(status, 200);
    assert!(header(&headers, "ratelimit").is_none());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "every check, allowed or denied: {seen:?}");
    assert_eq!(seen[3], ("203.0.113.9".to_owned(), false));
}

#[actix_web::test]
async fn a_heavier_route_costs_more_attempts() {
    let (limits, route, bucket) = limits(10);
    let app = test::init_service(app(RateLimit::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .route("/export", &[route, bucket], NonZeroU32::new(4).unwrap())))
    .await;
    assert_eq!(call!(&app, post("/export", "203.0.113.9", &[])).0, 200);
    assert_eq!(call!(&app, post("/export", "203.0.113.9", &[])).0, 200);
    assert_eq!(call!(&app, post("/export", "203.0.113.9", &[])).0, 429);
    // CountDenied: the denied export's 4 were recorded too (10 of 10).
    assert_eq!(call!(&app, post("/notify", "203.0.113.9", &[])).0, 429);
}

/// Peer, `X-Forwarded-For`, `Forwarded`, and the key taken or the status.
type Case<'a> = (
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Result<&'a str, u16>,
);

#[actix_web::test]
async fn the_client_ip_is_the_rightmost_untrusted_hop_and_never_the_spoofed_leftmost() {
    let (limits, route, bucket) = limits(100);
    let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
    let app = test::init_service(app(RateLimit::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(Caller::client_ip(ClientIp::x_forwarded_for(trusted)))))
    .await;
    let key = |body: String| {
        body.trim_start_matches("sent to ")
            .split(',')
            .next()
            .unwrap()
            .to_owned()
    };
    // (peer, X-Forwarded-For, Forwarded, expected key or status)
    let table: &[Case] = &[
        // No proxy: the peer; a header from a stranger is ignored.
        ("198.51.100.1", None, None, Ok("198.51.100.1")),
        ("198.51.100.1", Some("6.6.6.6"), None, Ok("198.51.100.1")),
        // One trusted proxy: the entry it appended.
        ("10.0.0.5", Some("203.0.113.9"), None, Ok("203.0.113.9")),
        // A chain of trusted proxies is skipped from the right.
        (
            "10.0.0.5",
            Some("203.0.113.9, 10.1.1.1, 10.2.2.2"),
            None,
            Ok("203.0.113.9"),
        ),
        // A spoofed leftmost entry is not taken.
        (
            "10.0.0.5",
            Some("6.6.6.6, 203.0.113.9"),
            None,
            Ok("203.0.113.9"),
        ),
        // The source is X-Forwarded-For: a Forwarded header (which the
        // client may have written itself) is never read, well-formed or
        // not; the trusted peer sent no X-Forwarded-For, so it is the key.
        (
            "10.0.0.5",
            None,
            Some(r#"for="[2001:db8::1]:443""#),
            Ok("10.0.0.5"),
        ),
        ("10.0.0.5", None, Some("for=[::1"), Ok("10.0.0.5")),
        // Malformed from a trusted proxy: a 400, not a panic, not the header.
        ("10.0.0.5", Some("not-an-ip"), None, Err(400)),
    ];
    for (peer, xff, fwd, want) in table {
        let mut headers = Vec::new();
        if let Some(v) = xff {
            headers.push(("x-forwarded-for", *v));
        }
        if let Some(v) = fwd {
            headers.push(("forwarded", *v));
        }
        let (status, _, body) = call!(&app, post("/notify", peer, &headers));
        match want {
            Ok(ip) => {
                assert_eq!(status, 200, "{peer} {xff:?} {fwd:?}: {body}");
                assert_eq!(key(body), *ip, "{peer} {xff:?} {fwd:?}");
            }
            Err(code) => {
                assert_eq!(status, *code, "{peer} {xff:?} {fwd:?}: {body}");
                let error: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert!(
                    error["error"]
                        .as_str()
                        .unwrap()
                        .contains("not an IP address")
                        || error["error"].as_str().unwrap().contains("Forwarded"),
                    "{body}"
                );
            }
        }
    }
}

#[actix_web::test]
async fn a_header_caller_must_be_given_once_in_visible_ascii() {
    let (limits, route, bucket) = limits(100);
    let app = test::init_service(app(RateLimit::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(Caller::header("X-Api-Key"))))
    .await;
    let (status, _, body) = call!(
        &app,
        post("/notify", "203.0.113.9", &[("x-api-key", "k-1")])
    );
    assert_eq!((status, body.as_str()), (200, "sent to k-1, 99 left"));
    for bad in [&[][..], &[("x-api-key", "a"), ("x-api-key", "b")][..]] {
        let (status, _, body) = call!(&app, post("/notify", "203.0.113.9", bad));
        assert_eq!(status, 400, "{bad:?}");
        assert!(body.contains("x-api-key"), "{body}");
    }
}

#[actix_web::test]
async fn over_a_socket_the_fields_reach_a_real_client() {
    let (limits, route, bucket) = limits(1);
    let layer = RateLimit::new(limits).route("/notify", &[route, bucket], NonZeroU32::MIN);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = actix_web::HttpServer::new(move || app(layer.clone()))
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/notify");
    let first = client.post(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().contains_key("ratelimit-policy"));
    assert_eq!(first.text().await.unwrap(), "sent to 127.0.0.1, 0 left");
    let second = client.post(&url).send().await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "60");
    handle.stop(true).await;
}

#[actix_web::test]
async fn the_forwarded_source_reads_its_rightmost_untrusted_for() {
    let (limits, route, bucket) = limits(100);
    let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
    let app = test::init_service(app(RateLimit::new(limits)
        .route("/notify", &[route, bucket], NonZeroU32::MIN)
        .caller(Caller::client_ip(ClientIp::forwarded(trusted)))))
    .await;
    let (status, _, body) = call!(
        &app,
        post(
            "/notify",
            "10.0.0.5",
            &[
                ("forwarded", r#"for=6.6.6.6, for="[2001:db8::1]:443""#),
                ("x-forwarded-for", "198.51.100.9"),
            ]
        )
    );
    assert_eq!(status, 200, "{body}");
    // IPv6 callers by /64; X-Forwarded-For is never read.
    assert!(body.starts_with("sent to 2001:db8::/64"), "{body}");
    let (status, _, body) = call!(
        &app,
        post("/notify", "10.0.0.5", &[("forwarded", "for=[::1")])
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Forwarded holds"), "{body}");
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

#[actix_web::test]
async fn no_url_spelling_reaches_an_actix_route_unlimited() {
    // A path table on the app, matched as Actix's router matches...
    let (limits, route, bucket) = limits(1);
    let table = test::init_service(app(RateLimit::new(limits).route(
        "/notify",
        &[route, bucket],
        NonZeroU32::MIN,
    )))
    .await;
    // ...and the limit wrapped on the resource itself.
    let (limits, route, bucket) = self::limits(1);
    let per_route = test::init_service(
        App::new().service(
            web::resource("/notify")
                .wrap(RateLimit::new(limits).limit(&[route, bucket], NonZeroU32::MIN))
                .route(web::post().to(|| async { "sent" })),
        ),
    )
    .await;
    macro_rules! every_spelling {
        ($what:expr, $app:expr) => {{
            let (status, _, body) = call!($app, post("/notify", "203.0.113.9", &[]));
            assert_eq!(status, 200, "{}: {body}", $what);
            for path in SPELLINGS {
                let (status, _, body) = call!($app, post(path, "203.0.113.9", &[]));
                assert!(
                    status == 429 || status == 404,
                    "{} {path}: {status} {body} (served past the limit)",
                    $what
                );
            }
        }};
    }
    every_spelling!("table", &table);
    every_spelling!("per route", &per_route);
}

#[actix_web::test]
async fn without_checked_the_handler_gets_no_checked_and_the_client_the_fields() {
    let (limits, route, bucket) = limits(2);
    let app = test::init_service(
        App::new()
            .wrap(
                RateLimit::new(limits)
                    .route("/notify", &[route, bucket], NonZeroU32::MIN)
                    .without_checked(),
            )
            .route(
                "/notify",
                web::post().to(|checked: Option<web::ReqData<Checked>>| async move {
                    format!("checked={}", checked.is_some())
                }),
            ),
    )
    .await;
    let (status, headers, body) = call!(&app, post("/notify", "203.0.113.9", &[]));
    assert_eq!((status, body.as_str()), (200, "checked=false"));
    assert!(
        header(&headers, "ratelimit-policy").is_some(),
        "{headers:?}"
    );
    assert!(
        header(&headers, "ratelimit")
            .unwrap()
            .contains(r#""notify";r=1"#)
    );
    let _ = call!(&app, post("/notify", "203.0.113.9", &[]));
    let (status, _, _) = call!(&app, post("/notify", "203.0.113.9", &[]));
    assert_eq!(status, 429);
}
