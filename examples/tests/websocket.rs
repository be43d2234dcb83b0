//! WebSockets: open sessions keep echoing after the drain; a new upgrade is
//! accepted and then closed with 1001 (not an HTTP error).

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[tokio::test]
async fn open_sessions_keep_echoing_and_new_ones_get_1001_after_accept() {
    // Under either admission policy: the strict one refuses HTTP work while
    // draining, but an upgrade is still accepted, then closed.
    for (bin, policy) in SERVICES
        .iter()
        .flat_map(|bin| [(*bin, "lame-duck"), (*bin, "strict")])
    {
        let s = Service::start(bin, &[("ATE_ADMISSION_POLICY", policy)]);
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
            .bearer_auth(s.drain_token())
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
            .unwrap_or_else(|e| {
                panic!("{bin} {policy}: the upgrade must be accepted while draining: {e}")
            });
        assert_eq!(resp.status(), 101);
        match new.next().await {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(frame.code, CloseCode::Away, "{bin} {policy}")
            }
            other => panic!("{bin} {policy}: expected a 1001 close frame, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn sessions_still_open_when_the_in_flight_wait_ends_are_closed_with_1001() {
    // A session keeps running through the drain, and counts as in flight.
    // When the bounded wait ends the process exits: a session cut without a
    // close frame is an abnormal closure (1006), which clients count as a
    // server failure; 1001 tells them to reconnect elsewhere.
    for bin in SERVICES {
        let mut s = Service::start(bin, &[("ATE_DRAIN_TIMEOUT_SECS", "1")]);
        let ws_url = s.url("/ws").replace("http://", "ws://");
        let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
        s.wait_for_metric("ate_in_flight 1").await;
        s.sigterm();
        // Still echoing during the wait.
        ws.send(Message::text("draining")).await.unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text("draining"),
            "{bin}"
        );
        let closed = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("{bin}: no close within 10 s"));
        match closed {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(frame.code, CloseCode::Away, "{bin}: {frame:?}")
            }
            other => panic!("{bin}: expected a 1001 close frame, got {other:?}"),
        }
        let status =
            tokio::task::spawn_blocking(move || s.wait_exit(std::time::Duration::from_secs(10)))
                .await
                .unwrap();
        assert!(status.is_some_and(|st| st.success()), "{bin}: {status:?}");
    }
}

#[tokio::test]
async fn a_close_from_the_client_is_answered_with_its_own_code() {
    // RFC 6455 5.5.1: the endpoint that receives a Close frame answers with
    // one, echoing the status code, before the TCP connection closes. A
    // service that just drops the socket leaves the client with an abnormal
    // closure (1006 in a browser), which it counts as a server failure; an
    // answer without the code is 1005 ("no status").
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let ws_url = s.url("/ws").replace("http://", "ws://");
        let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
        s.wait_for_metric("ate_in_flight 1").await;
        ws.send(Message::Close(Some(CloseFrame {
            code: CloseCode::Library(4000),
            reason: "bye".into(),
        })))
        .await
        .unwrap();
        match ws.next().await {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(frame.code, CloseCode::Library(4000), "{bin}: {frame:?}")
            }
            other => panic!("{bin}: expected the close frame echoed, got {other:?}"),
        }
        // The closing handshake is complete: the stream ends, no error.
        let end = ws.next().await;
        assert!(end.is_none(), "{bin}: after the handshake: {end:?}");
        // And the session no longer counts as in flight.
        s.wait_for_metric("ate_in_flight 0").await;
    }
}

/// RFC 6455 7.1.1: the server closes the TCP connection once the closing
/// handshake is done. The Axum service, having sent its own close frame,
/// waits (up to `CLOSE_HANDSHAKE`, 500 ms) for the client's answer instead
/// of hanging up with that answer still to come. Read with a raw socket,
/// since a WebSocket client hides when the connection ended.
#[tokio::test]
async fn axum_waits_for_the_answer_to_its_own_close_frame() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let s = Service::start(SERVICES[0], &[]);
    client()
        .post(s.url("/__internal/drain"))
        .bearer_auth(s.drain_token())
        .send()
        .await
        .unwrap();
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.port))
        .await
        .unwrap();
    tcp.write_all(
        b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    // The 101 head, then the server's close frame: FIN + close, payload
    // 1001 and a reason.
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let frame_at = loop {
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the close frame: {got:?}");
        got.extend_from_slice(&buf[..n]);
        if let Some(head) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let frame = &got[head + 4..];
            if frame.len() >= 2 && frame.len() >= 2 + usize::from(frame[1] & 0x7f) {
                break head + 4;
            }
        }
    };
    let sent_close = Instant::now();
    assert!(got.starts_with(b"HTTP/1.1 101"), "{got:?}");
    assert_eq!(got[frame_at], 0x88, "a close frame");
    assert_eq!(&got[frame_at + 2..frame_at + 4], &1001u16.to_be_bytes());
    // No answer from this client: the connection stays open for the
    // handshake's bound, then the server hangs up.
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("the server never hung up")
        .unwrap_or(0);
    let waited = sent_close.elapsed();
    assert_eq!(n, 0, "nothing after the close frame");
    assert!(
        waited >= Duration::from_millis(250),
        "hung up {waited:?} after its close frame, without waiting for the answer"
    );
}

/// The largest message either service echoes: the request-body bound.
const MAX_MESSAGE: usize = 1 << 20;

/// A received item, short: its kind and length, never a megabyte of payload.
fn short(item: &Option<Result<Message, tokio_tungstenite::tungstenite::Error>>) -> String {
    match item {
        Some(Ok(Message::Close(frame))) => format!("close {frame:?}"),
        Some(Ok(m)) => format!("a message of {} bytes", m.len()),
        Some(Err(e)) => format!("error {e}"),
        None => "the end of the stream".into(),
    }
}

/// The next message, failing the test (instead of hanging it) after 10 s.
async fn next<S: StreamExt + Unpin>(ws: &mut S) -> Option<S::Item> {
    tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
        .await
        .expect("no message within 10 s")
}

#[tokio::test]
async fn a_fragmented_message_and_one_of_the_largest_size_are_echoed_whole() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    // A message may come in several frames (RFC 6455 5.4): the echo is the
    // whole message, once. And up to the request-body bound, on both
    // services alike (actix-ws cut anything over 64 KiB, with no code).
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let ws_url = s.url("/ws").replace("http://", "ws://");
        let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
        let parts = [
            Frame::message(&b"ab"[..], OpCode::Data(Data::Text), false),
            Frame::message(&b"cd"[..], OpCode::Data(Data::Continue), false),
            Frame::message(&b"ef"[..], OpCode::Data(Data::Continue), true),
        ];
        for frame in parts {
            ws.send(Message::Frame(frame)).await.unwrap();
        }
        let got = next(&mut ws).await;
        assert!(
            matches!(&got, Some(Ok(m)) if *m == Message::text("abcdef")),
            "{bin}: {}",
            short(&got)
        );
        let largest = vec![7u8; MAX_MESSAGE];
        ws.send(Message::binary(largest.clone())).await.unwrap();
        let got = next(&mut ws).await;
        assert!(
            matches!(&got, Some(Ok(m)) if *m == Message::binary(largest)),
            "{bin}: {}",
            short(&got)
        );
    }
}

#[tokio::test]
async fn a_message_over_the_bound_not_utf8_or_badly_framed_is_closed_with_its_code() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    // RFC 6455 7.4.1: 1009 for a message too big to process (over the
    // bound in one frame, or in fragments that only together are), 1007 for
    // text that is not UTF-8, 1002 for bad framing; the session's place in
    // flight is given back.
    let too_big = |fragmented: bool| -> Vec<Message> {
        if fragmented {
            let half = vec![1u8; MAX_MESSAGE / 2 + 1];
            vec![
                Message::Frame(Frame::message(
                    half.clone(),
                    OpCode::Data(Data::Binary),
                    false,
                )),
                Message::Frame(Frame::message(half, OpCode::Data(Data::Continue), true)),
            ]
        } else {
            vec![Message::binary(vec![1u8; MAX_MESSAGE + 1])]
        }
    };
    let not_utf8 = vec![Message::Frame(Frame::message(
        &[0xff, 0xfe][..],
        OpCode::Data(Data::Text),
        true,
    ))];
    // A continuation frame with no message to continue: bad framing.
    let stray = vec![Message::Frame(Frame::message(
        &b"x"[..],
        OpCode::Data(Data::Continue),
        true,
    ))];
    for bin in SERVICES {
        let s = Service::start(bin, &[]);
        let ws_url = s.url("/ws").replace("http://", "ws://");
        for (what, messages, code) in [
            ("one frame", too_big(false), CloseCode::Size),
            ("fragments", too_big(true), CloseCode::Size),
            ("not UTF-8", not_utf8.clone(), CloseCode::Invalid),
            ("stray continuation", stray.clone(), CloseCode::Protocol),
        ] {
            let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
            for m in messages {
                // The service may close while the rest is still on its way.
                if ws.send(m).await.is_err() {
                    break;
                }
            }
            let got = next(&mut ws).await;
            match &got {
                Some(Ok(Message::Close(Some(frame)))) => {
                    assert_eq!(frame.code, code, "{bin} {what}: {frame:?}")
                }
                other => panic!(
                    "{bin} {what}: expected a {code} close frame, got {}",
                    short(other)
                ),
            }
        }
        s.wait_for_metric("ate_in_flight 0").await;
    }
}
