//! WebSockets: open sessions keep echoing after the drain; a new upgrade is
//! accepted and then closed with 1001 (not an HTTP error).

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[tokio::test]
async fn open_sessions_keep_echoing_and_new_ones_get_1001_after_accept() {
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let ws_url = s.url("/ws").replace("http://", "ws://");
        let (mut old, resp) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
        assert_eq!(resp.status(), 101);
        old.send(Message::text("before")).await.unwrap();
        assert_eq!(
            old.next().await.unwrap().unwrap(),
            Message::text("before"),
            "{bin}"
        );

        client()
            .post(s.url("/__internal/drain"))
            .send()
            .await
            .unwrap();

        old.send(Message::text("after")).await.unwrap();
        assert_eq!(
            old.next().await.unwrap().unwrap(),
            Message::text("after"),
            "{bin}: open session cut"
        );

        let (mut new, resp) = tokio_tungstenite::connect_async(&ws_url)
            .await
            .unwrap_or_else(|e| panic!("{bin}: the upgrade must be accepted while draining: {e}"));
        assert_eq!(resp.status(), 101);
        match new.next().await {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(frame.code, CloseCode::Away, "{bin}")
            }
            other => panic!("{bin}: expected a 1001 close frame, got {other:?}"),
        }
    }
}
