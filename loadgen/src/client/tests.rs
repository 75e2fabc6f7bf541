//! The keep-alive race: a server that closes an idle connection just as the next request is
//! sent on it. llama-server (cpp-httplib) closes connections idle for 5 s, so this happens in
//! real runs whenever a stream slot waits that long between requests.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

fn response() -> Vec<u8> {
    let events = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n";
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{events}\r\n0\r\n\r\n",
        events.len()
    )
    .into_bytes()
}

/// Answers one request on one connection, keeps it open (no `Connection: close`), then closes
/// it without a word.
async fn answer_once_then_close() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        s.write_all(&response()).await.expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(s);
    });
    addr
}

fn target(addr: SocketAddr) -> Target {
    Target {
        addr,
        authority: addr.to_string(),
        prefix: String::new(),
        base_url: format!("http://{addr}"),
        tls: None,
        headers: Default::default(),
        stats: Default::default(),
    }
}

fn request(addr: SocketAddr) -> http::Request<Full<Bytes>> {
    target(addr).request(
        http::Method::POST,
        "/v1/completions",
        Bytes::from_static(b"{}"),
    )
}

#[tokio::test]
async fn a_request_sent_as_the_server_closes_fails_instead_of_hanging() {
    let addr = answer_once_then_close().await;
    let mut conn = Conn::open(&target(addr)).await.expect("connect");
    let mut scratch = Scratch::default();
    let first = stream_request(&mut conn, request(addr), &mut scratch).await;
    assert!(first.is_ok(), "{first:?}");
    assert!(conn.is_open(), "kept alive after a complete answer");
    // The server's FIN is waiting in the socket when the next request goes out: the driver
    // sees the close before it takes the request, which must then fail, not wait forever.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut sent = None;
    let second = tokio::time::timeout(Duration::from_secs(5), conn.send(request(addr), &mut sent))
        .await
        .expect("a request on a connection the server closed must fail, not hang");
    let failure = second.expect_err("no server is left to answer");
    assert_eq!(failure.kind, FailureKind::StreamClosedEarly, "{failure:?}");
    assert!(conn.send_failed && conn.served == 1);
}

#[test]
fn an_error_body_that_echoes_the_key_is_redacted() {
    let secrets = vec![b"Bearer sk-abc123".to_vec(), b"k9x".to_vec()];
    assert_eq!(
        redact(
            "invalid key sk-abc123 in header `Bearer sk-abc123`; k9x",
            &secrets
        ),
        "invalid key [redacted] in header `[redacted]`; k9x",
        "the key alone and with its scheme; values under 4 bytes are left (too short to mean it)"
    );
    assert_eq!(redact("nothing here", &secrets), "nothing here");
}
