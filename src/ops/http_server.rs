//! A small HTTP/1 server for the health and metrics endpoints that bounds what
//! one client can hold.
//!
//! `axum::serve` has no header-read timeout, no request timeout and no cap on
//! open connections, so a slow-loris client (one that opens connections and never
//! finishes its request head) or a flood of connections could exhaust the
//! process and starve the kubelet's probes. This accept loop serves an axum
//! [`Router`] through hyper's HTTP/1 connection builder instead:
//!
//! - hyper closes a connection whose request head is not complete within
//!   [`Limits::header_read_timeout`] (this also ends idle keep-alive connections);
//! - `tower_http`'s timeout layer answers 503 when handling a request takes
//!   longer than [`Limits::request_timeout`];
//! - at most [`Limits::max_connections`] connections are served at once; a
//!   connection beyond the cap is closed as soon as it is accepted instead of
//!   being queued;
//! - at most [`Limits::max_connections_per_peer`] of them come from one peer
//!   IP address, so one pod cannot hold every slot and make the kubelet's
//!   probes fail (and the kubelet restart the operator).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower_http::timeout::TimeoutLayer;

/// What one listener allows its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send a complete request head (also the idle time
    /// allowed between requests on a kept-alive connection).
    pub header_read_timeout: Duration,
    /// Time a handler has to produce the response; after that the client gets 503.
    pub request_timeout: Duration,
    /// Connections served at once; further connections are closed on accept.
    pub max_connections: usize,
    /// Connections served at once from one peer IP address; further
    /// connections from that address are closed on accept.
    pub max_connections_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_connections: 64,
            max_connections_per_peer: 8,
        }
    }
}

/// Headers that describe one connection, not the message (RFC 9110 7.6.1),
/// and so are never passed on.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes the hop-by-hop headers: the fixed ones and every header the
/// Connection header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Open connections by peer IP address. An entry exists only while its
/// count is above 0, so the map never holds more entries than there are
/// open connections.
#[derive(Debug, Default)]
struct PeerCounts {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One counted connection; dropping it gives the peer's slot back.
struct PeerSlot {
    counts: Arc<PeerCounts>,
    peer: IpAddr,
}

impl PeerCounts {
    /// A slot for one more connection from `peer`, unless it holds `max` already.
    fn try_acquire(self: &Arc<Self>, peer: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut open = self.open.lock().expect("lock");
        let count = open.entry(peer).or_insert(0);
        if *count >= max {
            // `max` is 0 only when misconfigured: remove the entry just made.
            if *count == 0 {
                open.remove(&peer);
            }
            return None;
        }
        *count += 1;
        Some(PeerSlot { counts: self.clone(), peer })
    }

    #[cfg(test)]
    fn peers(&self) -> usize {
        self.open.lock().expect("lock").len()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().expect("lock");
        if let Some(count) = open.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// Serves `router` on `listener` within `limits`, forever.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits) {
    let app = router.layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, limits.request_timeout));
    let builder = http1_builder(&limits);
    accept(listener, limits, move |io| builder.serve_connection(io, TowerToHyperService::new(app.clone()))).await
}

/// An HTTP/1 connection builder closing connections whose request head
/// takes longer than `limits.header_read_timeout`.
pub fn http1_builder(limits: &Limits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder
}

/// Accepts connections on `listener` within the connection caps of
/// `limits` and runs each future `connection` makes of one, forever.
/// (`limits.request_timeout` is for [`serve`]'s router: a `connection`
/// bounds its own requests.)
pub async fn accept<F, C>(listener: TcpListener, limits: Limits, connection: F)
where
    F: Fn(TokioIo<TcpStream>) -> C,
    C: Future<Output = Result<(), hyper::Error>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers = Arc::new(PeerCounts::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        // The peer's own cap first: a peer at its cap never takes a global slot.
        let Some(peer_slot) = peers.try_acquire(peer.ip(), limits.max_connections_per_peer) else {
            tracing::debug!(%peer, max = limits.max_connections_per_peer, "per-peer connection limit reached; closing connection");
            drop(stream);
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, max = limits.max_connections, "connection limit reached; closing connection");
            drop(stream);
            continue;
        };
        // No Nagle: a streamed answer (server-sent events, a WebSocket
        // relayed by the gate) goes out as written, not after the client's
        // delayed ACK (40 ms per stream on Linux, measured: docs/benchmarks.md).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let conn = connection(TokioIo::new(stream));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
            drop(peer_slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Instant;

    #[tokio::test]
    async fn accepted_connections_send_without_nagle() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, mut told) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(accept(listener, Limits::default(), move |io: TokioIo<TcpStream>| {
            seen.send(io.inner().nodelay().unwrap()).unwrap();
            async { Ok(()) }
        }));
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let nodelay = tokio::time::timeout(Duration::from_secs(10), told.recv()).await.unwrap().unwrap();
        assert!(nodelay, "TCP_NODELAY on the accepted connection");
    }

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Generous bound for anything the server should do "soon" on a busy machine.
    const PATIENCE: Duration = Duration::from_secs(5);

    async fn start(limits: Limits) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/ok", get(|| async { "ok\n" })).route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late\n"
            }),
        );
        tokio::spawn(serve(listener, router, limits));
        addr
    }

    /// Reads until EOF or a reset; `None` if the server kept the connection
    /// open for longer than [`PATIENCE`].
    async fn read_to_close(stream: &mut TcpStream) -> Option<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// One `GET path` with `Connection: close`; the raw response, or `None`
    /// when the connection could not be made.
    async fn get_raw(addr: SocketAddr, path: &str) -> Option<String> {
        let mut s = tokio::time::timeout(PATIENCE, TcpStream::connect(addr)).await.ok()?.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let body = read_to_close(&mut s).await.expect("server neither answered nor closed");
        Some(String::from_utf8_lossy(&body).into_owned())
    }

    fn limits(header_ms: u64, request_ms: u64, max_connections: usize) -> Limits {
        Limits {
            header_read_timeout: Duration::from_millis(header_ms),
            request_timeout: Duration::from_millis(request_ms),
            max_connections,
            max_connections_per_peer: max_connections,
        }
    }

    #[tokio::test]
    async fn a_plain_get_is_answered() {
        let addr = start(Limits::default()).await;
        let resp = get_raw(addr, "/ok").await.unwrap();
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.ends_with("ok\n"), "{resp}");
    }

    #[tokio::test]
    async fn an_unfinished_request_head_is_closed_after_the_header_timeout() {
        let addr = start(limits(300, 10_000, 8)).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        s.write_all(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
        let got = read_to_close(&mut s).await.expect("server kept a half-sent request open");
        assert!(started.elapsed() >= Duration::from_millis(250), "closed before the timeout: {:?}", started.elapsed());
        let got = String::from_utf8_lossy(&got);
        assert!(!got.contains(" 200 "), "an unfinished request was served: {got}");
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
        let addr = start(limits(300, 10_000, 8)).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let got = read_to_close(&mut s).await.expect("server kept a silent connection open");
        assert!(!String::from_utf8_lossy(&got).contains(" 200 "));
    }

    #[tokio::test]
    async fn a_slow_handler_gets_503_after_the_request_timeout() {
        let addr = start(limits(10_000, 300, 8)).await;
        let started = Instant::now();
        let resp = get_raw(addr, "/slow").await.unwrap();
        assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
        assert!(started.elapsed() < PATIENCE, "took {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_and_a_freed_slot_serves_again() {
        let addr = start(limits(30_000, 10_000, 2)).await;
        // Two idle connections take both slots; a request on one proves it is being served.
        let mut first = TcpStream::connect(addr).await.unwrap();
        first.write_all(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(PATIENCE, first.read(&mut buf)).await.unwrap().unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
        let second = TcpStream::connect(addr).await.unwrap();

        // The third connection is accepted by the kernel but closed unserved.
        let resp = get_raw(addr, "/ok").await.unwrap_or_default();
        assert!(!resp.contains(" 200 "), "a connection beyond the cap was served: {resp}");

        // Closing one held connection frees its slot (the server notices the
        // EOF asynchronously, so retry for a while).
        drop(second);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let resp = get_raw(addr, "/ok").await.unwrap_or_default();
            if resp.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(Instant::now() < deadline, "no request served after a slot was freed: {resp}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(first);
    }

    /// Sends one request on `stream` (kept alive) and reads the first chunk of the answer.
    async fn request_on(stream: &mut TcpStream) -> String {
        stream.write_all(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await.expect("no answer").unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// A connection from `source` (a loopback address other than 127.0.0.1
    /// gives the server another peer).
    async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(source.parse().unwrap(), 0)).unwrap();
        tokio::time::timeout(PATIENCE, socket.connect(addr)).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn one_peer_cannot_take_every_slot() {
        let limits = Limits { max_connections_per_peer: 3, ..limits(30_000, 10_000, 64) };
        let addr = start(limits).await;
        // 127.0.0.1 holds its cap of served, idle (kept-alive) connections.
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut s = connect_from("127.0.0.1", addr).await;
            let resp = request_on(&mut s).await;
            assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
            held.push(s);
        }
        // Its next connection is closed unserved, well before the header timeout.
        let mut extra = connect_from("127.0.0.1", addr).await;
        let _ = extra.write_all(b"GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
        let got = read_to_close(&mut extra).await.expect("a connection beyond the peer's cap was kept open");
        assert!(!String::from_utf8_lossy(&got).contains(" 200 "), "served beyond the peer's cap");

        // Another peer is still served while the first holds its cap.
        let mut other = connect_from("127.0.0.2", addr).await;
        let resp = request_on(&mut other).await;
        assert!(resp.starts_with("HTTP/1.1 200"), "another peer was refused: {resp}");

        // Closing one of the first peer's connections gives it a slot back.
        drop(held.pop());
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut s = connect_from("127.0.0.1", addr).await;
            let _ = s.write_all(b"GET /ok HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await;
            let got = read_to_close(&mut s).await.unwrap_or_default();
            if got.starts_with(b"HTTP/1.1 200") {
                break;
            }
            assert!(Instant::now() < deadline, "the freed per-peer slot never served again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[test]
    fn per_peer_counts_are_capped_and_forget_idle_peers() {
        let counts = Arc::new(PeerCounts::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let held: Vec<PeerSlot> = (0..2).map(|_| counts.try_acquire(a, 2).expect("under the cap")).collect();
        assert!(counts.try_acquire(a, 2).is_none(), "a third connection from one peer");
        let other = counts.try_acquire(b, 2).expect("another peer has its own cap");
        assert_eq!(counts.peers(), 2);
        drop(other);
        assert_eq!(counts.peers(), 1, "a peer with no connection left is forgotten");
        drop(held);
        assert_eq!(counts.peers(), 0);
        assert!(counts.try_acquire(a, 0).is_none(), "a cap of 0 refuses");
        assert_eq!(counts.peers(), 0, "a refusal leaves no entry behind");
    }
}
