//! Both services answer methods the same way over real sockets: HEAD where
//! GET is served (load balancers and uptime checkers send it), 405 with
//! `Allow` for a method a path does not serve, 404 for an unknown path.

mod common;

use common::*;

#[tokio::test]
async fn head_is_served_with_get_and_other_methods_get_405_with_allow() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let c = client();
        for path in ["/health", "/ready", "/metrics"] {
            let r = c.head(s.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 200, "{bin}: HEAD {path}");
            assert!(
                r.bytes().await.unwrap().is_empty(),
                "{bin}: HEAD {path} has no body"
            );
        }
        for (method, path, allow) in [
            (reqwest::Method::DELETE, "/ready", "GET"),
            (reqwest::Method::POST, "/health", "GET"),
            (reqwest::Method::GET, "/__internal/drain", "POST"),
            (reqwest::Method::GET, "/notify", "POST"),
            (reqwest::Method::GET, "/invoke", "POST"),
            (reqwest::Method::DELETE, "/objects/a", "PUT"),
        ] {
            let r = c.request(method.clone(), s.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 405, "{bin}: {method} {path}");
            let allowed = r.headers()["allow"].to_str().unwrap().to_owned();
            assert!(
                allowed.contains(allow),
                "{bin}: {method} {path}: Allow {allowed}"
            );
        }
        let r = c.get(s.url("/no-such-route")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{bin}");
        // A GET of the drain endpoint is refused, so it drains nothing.
        assert_eq!(
            c.get(s.url("/ready")).send().await.unwrap().status(),
            200,
            "{bin}"
        );
    }
}
