//! The drain endpoint asks for the process's secret and refuses
//! non-loopback peers even with it, using each framework's test utilities
//! to present a peer address.

use std::net::SocketAddr;

use ate_examples::{AppState, Config};
use axum::body::Body;
use axum::extract::ConnectInfo;
use tower::ServiceExt;

async fn state() -> (ate_examples::service::Shared, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_env(dir.path().to_path_buf()).unwrap();
    let state = AppState::new(config).await.unwrap();
    // What the binaries do once their startup checks pass.
    state.gate.mark_ready();
    (state, dir)
}

/// The `Authorization` value with the state's own secret, or another one.
fn bearer(state: &ate_examples::service::Shared, own: bool) -> String {
    let token = if own {
        state.gate.drain_token().unwrap().clone()
    } else {
        ate_readiness::DrainToken::generate().unwrap()
    };
    format!("Bearer {}", token.secret())
}

async fn axum_drain(peer: &str, own: bool) -> (u16, bool) {
    let (state, _dir) = state().await;
    let app = ate_examples::axum_app::router(state.clone());
    let mut req = axum::http::Request::post("/__internal/drain")
        .header("authorization", bearer(&state, own))
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
    let res = app.oneshot(req).await.unwrap();
    (res.status().as_u16(), state.gate.is_serving())
}

async fn actix_drain(peer: &str, own: bool) -> (u16, bool) {
    use actix_web::{App, test, web};
    let (state, _dir) = state().await;
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(state.clone()))
            .configure(ate_examples::actix_app::configure(&state)),
    )
    .await;
    let req = test::TestRequest::post()
        .uri("/__internal/drain")
        .insert_header(("authorization", bearer(&state, own)))
        .peer_addr(peer.parse::<SocketAddr>().unwrap())
        .to_request();
    let res = test::call_service(&app, req).await;
    (res.status().as_u16(), state.gate.is_serving())
}

const REFUSED: [&str; 6] = [
    "10.1.2.3:5000",
    "192.168.0.9:1",
    "8.8.8.8:443",
    "[fe80::1]:80",
    "[2001:db8::7]:9",
    "0.0.0.0:1",
];
const ALLOWED: [&str; 3] = ["127.0.0.1:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"];

#[tokio::test]
async fn axum_drain_refuses_non_loopback_peers_and_other_secrets() {
    for peer in REFUSED {
        assert_eq!(axum_drain(peer, true).await, (403, true), "{peer}");
    }
    for peer in ALLOWED {
        assert_eq!(axum_drain(peer, false).await, (403, true), "{peer}");
        assert_eq!(axum_drain(peer, true).await, (200, false), "{peer}");
    }
}

#[actix_web::test]
async fn actix_drain_refuses_non_loopback_peers_and_other_secrets() {
    for peer in REFUSED {
        assert_eq!(actix_drain(peer, true).await, (403, true), "{peer}");
    }
    for peer in ALLOWED {
        assert_eq!(actix_drain(peer, false).await, (403, true), "{peer}");
        assert_eq!(actix_drain(peer, true).await, (200, false), "{peer}");
    }
}
