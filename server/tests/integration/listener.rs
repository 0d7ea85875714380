//! The HTTP listener under slow and flooding clients, over real sockets: a request
//! that trickles in is closed after the request timeout however steadily it sends,
//! the time between requests on a kept-alive connection does not count, and one
//! peer address cannot hold every connection, so `/healthz` still answers.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::bounds::bed_with;

/// Sends `head` then `trickle`, one byte per 50 ms, until the server closes the
/// connection; answers how many trickled bytes it took (`None`: never closed).
async fn trickle_until_closed(addr: SocketAddr, head: &str, trickle: usize) -> Option<usize> {
    let conn = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = conn.into_split();
    wr.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 1024];
    for sent in 0..trickle {
        tokio::select! {
            r = rd.read(&mut buf) => {
                // An answer (a 4xx) or the close: either way the request did not
                // get to trickle on. Read to the end.
                if matches!(r, Ok(n) if n > 0) {
                    while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
                }
                return Some(sent);
            }
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                if wr.write_all(b"a").await.is_err() {
                    return Some(sent);
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn a_request_trickled_in_is_closed_after_the_request_timeout_and_keep_alive_gaps_do_not_count() {
    // Idle never: a byte comes every 50 ms. 600 bytes would take 30 s.
    let b = bed_with(|c| {
        c.net.idle_timeout = Duration::from_secs(120);
        c.net.request_timeout = Duration::from_millis(500);
    })
    .await;
    let addr = b.server.http_addr;
    let head = trickle_until_closed(addr, "GET /healthz HTTP/1.1\r\nx-slow: ", 600).await;
    assert!(
        matches!(head, Some(n) if n < 600),
        "a trickled head was kept: {head:?}"
    );
    let body = trickle_until_closed(
        addr,
        "POST /hooks/default/none HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 600\r\n\r\n",
        600,
    )
    .await;
    assert!(
        matches!(body, Some(n) if n < 600),
        "a trickled body was kept: {body:?}"
    );

    // Two requests on one connection, further apart than the request timeout: both
    // answered (the clock runs only while a request arrives).
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut answers = 0;
    for _ in 0..2 {
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200") {
            answers += 1;
        }
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    assert_eq!(answers, 2);
}

/// A connection to `addr` from the loopback address `from`.
async fn connect_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Whether `GET /healthz` on a fresh connection from `from` answers 200.
async fn healthz_from(from: [u8; 4], addr: SocketAddr) -> bool {
    let mut conn = connect_from(from, addr).await;
    if conn.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.is_err() {
        return false;
    }
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(30), conn.read_to_string(&mut text)).await;
    matches!(read, Ok(Ok(_))) && text.starts_with("HTTP/1.0 200")
}

#[tokio::test]
async fn one_peer_address_cannot_hold_every_connection_and_healthz_still_answers() {
    let b = bed_with(|c| {
        c.net.max_connections = 8;
        c.net.max_per_peer = 4;
    })
    .await;
    let addr = b.server.http_addr;
    // A flood from 127.0.0.2: as many connections as the listener takes, held open
    // (past its share of four, they are closed at once).
    let mut flood = Vec::new();
    for _ in 0..8 {
        flood.push(connect_from([127, 0, 0, 2], addr).await);
    }
    // Another address gets in.
    assert!(
        healthz_from([127, 0, 0, 1], addr).await,
        "/healthz did not answer"
    );
    assert!(
        !healthz_from([127, 0, 0, 2], addr).await,
        "the flooding address got a fifth connection"
    );
    drop(flood);
}
