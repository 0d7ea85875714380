//! The server's listeners, bounded: at most [`NetLimits::max_connections`] open
//! connections per listener (one more is accepted and closed at once, so it does not
//! wait in the backlog), at most [`NetLimits::max_per_peer`] of them from one peer
//! address (IPv6 by its /64), so one peer cannot shut others out (`/healthz`
//! answers a prober while one address floods), a connection closed when nothing has
//! been read from it for [`NetLimits::idle_timeout`], and a back-off on accept errors
//! (at the open-files limit `accept` fails at once, and retrying at once would spin a
//! core).
//!
//! On the HTTP listener a request must also arrive whole, head and body, within
//! [`NetLimits::request_timeout`] of its first byte, however steadily it trickles
//! (the idle timeout counts only silence), and its head (up to the blank line that
//! ends the headers) within the shorter [`NetLimits::header_timeout`], so
//! connections that trickle a header each few seconds hold their slots a few
//! seconds only. The connection knows little HTTP (where a head ends): the clocks
//! start at the first byte read after the server last wrote, and stop when the
//! server writes (it answers, or asks for the body with `100 Continue`, after which
//! the body starts a new clock). gRPC streams stay open for minutes without writes,
//! so that listener has no such clock.
//!
//! A live HTTP/2 peer is never idle: the gRPC server pings every third of the idle
//! timeout and the peer's answers are reads. Both the gRPC (tonic) and the HTTP (axum)
//! listener use [`BoundedListener`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Limits on a listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetLimits {
    /// Most connections open at once, per listener.
    pub max_connections: usize,
    /// A connection from which nothing was read for this long is closed.
    pub idle_timeout: Duration,
    /// Most connections open at once from one peer address (IPv6: one /64), per
    /// listener.
    pub max_per_peer: usize,
    /// HTTP listener only: a request (head and body) that has not arrived whole this
    /// long after its first byte closes its connection.
    pub request_timeout: Duration,
    /// HTTP listener only: a request whose head (its headers, to the blank line) has
    /// not arrived this long after its first byte closes its connection.
    pub header_timeout: Duration,
}

/// Default [`NetLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default [`NetLimits::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default [`NetLimits::max_per_peer`].
pub const DEFAULT_MAX_PER_PEER: usize = 256;
/// Default [`NetLimits::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`NetLimits::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// First pause after a failed accept; it doubles up to [`MAX_ACCEPT_BACKOFF`].
const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
/// Longest pause after failed accepts.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

impl Default for NetLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_per_peer: DEFAULT_MAX_PER_PEER,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

impl NetLimits {
    /// How often the gRPC server pings an HTTP/2 peer: often enough that a live
    /// peer's answers keep its connection from looking idle.
    pub(crate) fn keepalive_interval(&self) -> Duration {
        (self.idle_timeout / 3).max(Duration::from_millis(10))
    }
}

/// A TCP listener that applies [`NetLimits`].
pub(crate) struct BoundedListener {
    listener: TcpListener,
    limits: NetLimits,
    slots: Arc<Semaphore>,
    peers: Arc<Peers>,
    /// Whether requests must arrive within [`NetLimits::request_timeout`] (HTTP).
    timed_requests: bool,
    /// Which listener, for the log.
    name: &'static str,
}

/// Open connections per peer key ([`peer_key`]).
#[derive(Default)]
struct Peers(Mutex<HashMap<IpAddr, usize>>);

/// A connection's place in its peer's count; freed when dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    key: IpAddr,
}

impl Peers {
    fn take(self: &Arc<Self>, key: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            key,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self.peers.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// The address a peer is counted under: an IPv4 address as it is, an IPv6 one by its
/// /64 (one host usually holds a whole /64).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

impl BoundedListener {
    /// A listener for gRPC: no request clock (streams stay open without writes).
    pub(crate) fn new(listener: TcpListener, limits: NetLimits, name: &'static str) -> Self {
        Self {
            listener,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            peers: Arc::default(),
            limits,
            timed_requests: false,
            name,
        }
    }

    /// A listener for HTTP/1: each request must arrive within
    /// [`NetLimits::request_timeout`].
    pub(crate) fn http(listener: TcpListener, limits: NetLimits, name: &'static str) -> Self {
        Self {
            timed_requests: true,
            ..Self::new(listener, limits, name)
        }
    }

    /// The next connection within the limits. Accept errors are logged and retried
    /// after a growing pause ([`accept_with_backoff`]); connections past the limit are
    /// closed at once.
    pub(crate) async fn accept_bounded(&mut self) -> (BoundedConn, SocketAddr) {
        loop {
            let (io, peer) =
                accept_with_backoff(self.name, || self.listener.accept(), tokio::time::sleep).await;
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                tracing::warn!(
                    listener = self.name,
                    %peer,
                    limit = self.limits.max_connections,
                    "connection refused: too many open connections"
                );
                drop(io);
                continue;
            };
            let Some(peer_slot) = self
                .peers
                .take(peer_key(peer.ip()), self.limits.max_per_peer.max(1))
            else {
                tracing::warn!(
                    listener = self.name,
                    %peer,
                    limit = self.limits.max_per_peer,
                    "connection refused: too many open connections from this peer"
                );
                drop(io);
                continue;
            };
            let _ = io.set_nodelay(true);
            let clocks = self.timed_requests.then_some(RequestClocks {
                request: self.limits.request_timeout,
                head: self.limits.header_timeout.min(self.limits.request_timeout),
            });
            let conn = BoundedConn::new(io, permit, peer_slot, self.limits.idle_timeout, clocks);
            return (conn, peer);
        }
    }

    /// The connections as a stream, for tonic.
    pub(crate) fn into_stream(self) -> impl futures::Stream<Item = io::Result<BoundedConn>> + Send + 'static {
        futures::stream::unfold(self, |mut l| async move {
            let (conn, _) = l.accept_bounded().await;
            Some((Ok(conn), l))
        })
    }
}

impl axum::serve::Listener for BoundedListener {
    type Io = BoundedConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.accept_bounded().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Calls `accept` until it succeeds. After each failure (at the open-files limit
/// `accept` fails at once, again and again) it logs and waits `pause(d)` before the
/// next try, `d` doubling from [`FIRST_ACCEPT_BACKOFF`] up to [`MAX_ACCEPT_BACKOFF`],
/// so a failing accept never spins a core. `pause` is `tokio::time::sleep` but for
/// the test, which records the pauses instead.
async fn accept_with_backoff<T, A, AF, P, PF>(name: &'static str, mut accept: A, mut pause: P) -> T
where
    A: FnMut() -> AF,
    AF: Future<Output = io::Result<T>>,
    P: FnMut(Duration) -> PF,
    PF: Future<Output = ()>,
{
    let mut backoff = FIRST_ACCEPT_BACKOFF;
    loop {
        match accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                tracing::warn!(listener = name, error = %e, pause_ms = backoff.as_millis() as u64, "accept failed");
                pause(backoff).await;
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
            }
        }
    }
}

/// How long a request and its head may take to arrive (the HTTP listener's).
#[derive(Debug, Clone, Copy)]
struct RequestClocks {
    request: Duration,
    head: Duration,
}

/// The bytes that end a request's head.
const END_OF_HEAD: u32 = u32::from_be_bytes(*b"\r\n\r\n");

/// An accepted connection: holds its slots until dropped, and fails its reads once
/// nothing has been read for the idle timeout, or (with request clocks) once a
/// request has taken longer than the request timeout to arrive, or its head longer
/// than the header timeout (either closes it).
pub(crate) struct BoundedConn {
    io: TcpStream,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    /// The request clocks' lengths; while a request is arriving, the sleep until the
    /// request's end, and until its head's while that is still arriving.
    clocks: Option<RequestClocks>,
    request: Option<Pin<Box<Sleep>>>,
    head: Option<Pin<Box<Sleep>>>,
    /// The last four bytes read of the head, to find where it ends.
    head_tail: u32,
    _slot: OwnedSemaphorePermit,
    _peer: PeerSlot,
}

impl BoundedConn {
    fn new(
        io: TcpStream,
        slot: OwnedSemaphorePermit,
        peer: PeerSlot,
        idle_timeout: Duration,
        clocks: Option<RequestClocks>,
    ) -> Self {
        Self {
            io,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
            clocks,
            request: None,
            head: None,
            head_tail: 0,
            _slot: slot,
            _peer: peer,
        }
    }

    fn request_too_slow() -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, "request not received in time")
    }

    fn head_too_slow() -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, "request headers not received in time")
    }

    /// Bytes of a request were read: its first starts the clocks; the blank line
    /// after the headers stops the head's. Fails when a clock ran out, however
    /// steadily the bytes came.
    fn arrived(&mut self, bytes: &[u8], now: Instant) -> io::Result<()> {
        let Some(clocks) = self.clocks else {
            return Ok(());
        };
        if self.request.is_none() {
            self.request = Some(Box::pin(tokio::time::sleep(clocks.request)));
            self.head = Some(Box::pin(tokio::time::sleep(clocks.head)));
            self.head_tail = 0;
        }
        if self.request.as_ref().is_some_and(|r| r.deadline() <= now) {
            return Err(Self::request_too_slow());
        }
        if let Some(head) = &self.head {
            if head.deadline() <= now {
                return Err(Self::head_too_slow());
            }
            for b in bytes {
                self.head_tail = (self.head_tail << 8) | u32::from(*b);
                if self.head_tail == END_OF_HEAD {
                    self.head = None;
                    break;
                }
            }
        }
        Ok(())
    }
}

impl AsyncRead for BoundedConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let now = Instant::now();
                    let this = &mut *self;
                    this.idle.as_mut().reset(now + this.idle_timeout);
                    if let Err(e) = this.arrived(&buf.filled()[before..], now) {
                        return Poll::Ready(Err(e));
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if let Some(h) = self.head.as_mut()
                    && h.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(Self::head_too_slow()));
                }
                if let Some(r) = self.request.as_mut()
                    && r.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(Self::request_too_slow()));
                }
                match self.idle.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle for too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl BoundedConn {
    /// The server wrote: the request it answers (or whose body it asks for) has
    /// arrived, so its clock stops.
    fn wrote(&mut self, written: &Poll<io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.request = None;
            self.head = None;
        }
    }
}

impl AsyncWrite for BoundedConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for BoundedConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// EMFILE, as `accept` returns it at the open-files limit.
    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(24)
    }

    #[tokio::test]
    async fn failed_accepts_are_retried_after_a_doubling_pause_never_at_once() {
        // The accept fails 12 times at once, then succeeds; every try and every pause
        // is recorded in order.
        let log: RefCell<Vec<Result<(), Duration>>> = RefCell::default();
        let mut failures_left = 12;
        let accepted = accept_with_backoff(
            "test",
            || {
                log.borrow_mut().push(Ok(()));
                let result = if failures_left > 0 {
                    failures_left -= 1;
                    Err(emfile())
                } else {
                    Ok("conn")
                };
                std::future::ready(result)
            },
            |d| {
                log.borrow_mut().push(Err(d));
                std::future::ready(())
            },
        )
        .await;
        assert_eq!(accepted, "conn");
        let log = log.into_inner();
        let tries = log.iter().filter(|e| e.is_ok()).count();
        let pauses: Vec<u64> = log
            .iter()
            .filter_map(|e| e.err().map(|d| d.as_millis() as u64))
            .collect();
        assert_eq!(tries, 13);
        // A pause between every two tries: the loop never retries at once.
        for pair in log.windows(2) {
            assert!(
                !(pair[0].is_ok() && pair[1].is_ok()),
                "two accepts without a pause: {log:?}"
            );
        }
        assert_eq!(
            pauses,
            [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000, 1000],
            "doubling from 5 ms, capped at 1 s"
        );
    }

    #[tokio::test]
    async fn an_accept_that_succeeds_is_not_delayed() {
        let mut paused = Vec::new();
        let accepted = accept_with_backoff(
            "test",
            || std::future::ready(Ok::<_, io::Error>(7)),
            |d| {
                paused.push(d);
                std::future::ready(())
            },
        )
        .await;
        assert_eq!(accepted, 7);
        assert!(paused.is_empty());
    }
}
