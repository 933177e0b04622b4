//! The operations HTTP server: `/metrics` (Prometheus text), `/healthz` (the process serves),
//! `/readyz` ([`Health`]: rebuilt, the watch alive, the writes going through).
//!
//! The port cannot be starved (SPEC Operations): a request's headers must arrive within
//! [`HEADER_READ_TIMEOUT`], at most [`MAX_CONNECTIONS`] connections stay open (a new one closes the
//! oldest, so the kubelet's probe gets through a flood of idle connections), and a failing `accept`
//! never spins: out of file descriptors it closes the oldest connection to free one, out of memory
//! it pauses.

use crate::health::Health;
use crate::metrics::encode;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::AbortHandle;

/// Open connections per server. The kubelet and Prometheus need a handful; at the cap a new
/// connection closes the oldest, so a flood of idle connections costs at most this many descriptors
/// (and buffers) and never keeps a probe out. Idle attackers do not reconnect, and every connection
/// is cut by [`HEADER_READ_TIMEOUT`] anyway.
pub const MAX_CONNECTIONS: usize = 256;

/// Deadline to read a request's headers, and to wait for the next request on a kept-alive connection
/// (hyper restarts it whenever a connection goes idle): a client that sends nothing, or half a header,
/// is cut after it. Probes and scrapes send their headers at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause before accepting again after an accept failed for lack of resources (memory, or descriptors
/// when this server holds none to give back). Retrying at once spins a core while nothing changes;
/// the pending connection waits in the kernel's backlog meanwhile.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Connections the kernel completes and queues before they are accepted (capped by
/// `net.core.somaxconn`). Tokio's default, 128, fills within a burst of a flood; a probe's SYN then is
/// dropped and resent only a second later, the kubelet's whole default probe timeout.
pub const LISTEN_BACKLOG: u32 = 1024;

/// A connection's read buffer, hence the largest request head: probes and scrapes (a bearer token
/// included) send a few KiB; hyper's default (~400 KiB) would let [`MAX_CONNECTIONS`] slow clients
/// hold 100 MB. A larger head is answered 431.
pub const MAX_REQUEST_HEAD_BYTES: usize = 32 * 1024;

/// How often at most a repeated condition (accept failures, evictions) is logged.
const LOG_EVERY: Duration = Duration::from_secs(1);

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn route(path: &str, registry: &Registry, health: &Health) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            encode(registry),
        ),
        "/healthz" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match health.readiness(std::time::Instant::now()) {
            Ok(()) => respond(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(why) => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{}\n", why.as_str()),
            ),
        },
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `addr` and serves until the process ends. Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    health: Arc<Health>,
) -> std::io::Result<SocketAddr> {
    serve_with(addr, registry, health, Limits::default()).await
}

/// The bounds of one server: the constants above, shorter in tests.
#[derive(Clone, Copy, Debug)]
struct Limits {
    max_connections: usize,
    header_read_timeout: Duration,
    accept_pause: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            header_read_timeout: HEADER_READ_TIMEOUT,
            accept_pause: ACCEPT_PAUSE,
        }
    }
}

async fn serve_with(
    addr: SocketAddr,
    registry: Registry,
    health: Arc<Health>,
    limits: Limits,
) -> std::io::Result<SocketAddr> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(LISTEN_BACKLOG)?;
    let bound = listener.local_addr()?;
    let registry = Arc::new(registry);
    tokio::spawn(accept_loop(listener, registry, health, limits));
    Ok(bound)
}

async fn accept_loop(
    listener: TcpListener,
    registry: Arc<Registry>,
    health: Arc<Health>,
    limits: Limits,
) {
    let mut open = Connections::new(limits.max_connections);
    let (mut failures, mut evictions) = (Throttle::default(), Throttle::default());
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if open.make_room()
                    && let Some(unlogged) = evictions.admit(Instant::now())
                {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        unlogged,
                        "connection cap reached: closed the oldest connection"
                    );
                }
                let task = tokio::spawn(connection(
                    stream,
                    registry.clone(),
                    health.clone(),
                    limits.header_read_timeout,
                ));
                open.push(task.abort_handle());
            }
            Err(e) => match after_accept_error(&e) {
                AcceptError::NextConnection => {
                    tracing::trace!(error = %e, "accept failed for one connection");
                }
                AcceptError::OutOfDescriptors if open.evict_oldest() => {
                    if let Some(unlogged) = failures.admit(Instant::now()) {
                        tracing::warn!(error = %e, unlogged,
                            "accept failed: closed the oldest connection to free a descriptor");
                    }
                    // The descriptor is released when the runtime drops the aborted task.
                    tokio::task::yield_now().await;
                }
                AcceptError::OutOfDescriptors | AcceptError::Pause => {
                    if let Some(unlogged) = failures.admit(Instant::now()) {
                        tracing::warn!(error = %e, unlogged, pause = ?limits.accept_pause,
                            "accept failed; pausing before the next one");
                    }
                    tokio::time::sleep(limits.accept_pause).await;
                }
            },
        }
    }
}

/// Serves one connection until the client closes it, its headers are late, or it is evicted.
async fn connection(
    stream: TcpStream,
    registry: Arc<Registry>,
    health: Arc<Health>,
    header_read_timeout: Duration,
) {
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let response = route(req.uri().path(), &registry, &health);
        async move { Ok::<_, Infallible>(response) }
    });
    if let Err(e) = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "metrics connection ended");
    }
}

/// What the accept loop does after `accept` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AcceptError {
    /// The failure belongs to one pending connection (reset or aborted before it was accepted, a
    /// network error Linux reports through `accept`): accept the next one at once.
    NextConnection,
    /// The process or the system is out of file descriptors (possibly held by this server's own idle
    /// connections, when the limit is below the cap): close the oldest connection and accept again,
    /// so that a probe queued behind a flood is not kept waiting for header deadlines; with no
    /// connection to close, as [`AcceptError::Pause`].
    OutOfDescriptors,
    /// Out of buffers or memory, or an unknown failure: retrying at once would fail the same way in
    /// a busy loop, so pause [`ACCEPT_PAUSE`] first (the pending connection waits in the backlog).
    Pause,
}

fn after_accept_error(e: &std::io::Error) -> AcceptError {
    match e.raw_os_error() {
        Some(
            libc::ECONNABORTED
            | libc::ECONNRESET
            | libc::EINTR
            | libc::EAGAIN
            | libc::EPROTO
            | libc::EPERM
            | libc::ETIMEDOUT
            | libc::ENETDOWN
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::EHOSTUNREACH
            | libc::ENONET
            | libc::ENOPROTOOPT
            | libc::EOPNOTSUPP,
        ) => AcceptError::NextConnection,
        Some(libc::EMFILE | libc::ENFILE) => AcceptError::OutOfDescriptors,
        // ENOBUFS, ENOMEM, and anything not known to be per connection.
        _ => AcceptError::Pause,
    }
}

/// The open connections of one server in accept order, so that the oldest can be closed.
struct Connections {
    cap: usize,
    tasks: VecDeque<AbortHandle>,
}

impl Connections {
    fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Connections {
            cap,
            tasks: VecDeque::with_capacity(cap),
        }
    }

    /// Makes room for one more connection: at the cap, forgets the finished ones (O(cap)), then, if
    /// still full, evicts the oldest. Whether it evicted one.
    fn make_room(&mut self) -> bool {
        if self.tasks.len() < self.cap {
            return false;
        }
        self.tasks.retain(|task| !task.is_finished());
        self.tasks.len() >= self.cap && self.evict_oldest()
    }

    /// Aborts the oldest live connection's task, which drops (closes) its connection. Whether there
    /// was one.
    fn evict_oldest(&mut self) -> bool {
        while let Some(task) = self.tasks.pop_front() {
            if !task.is_finished() {
                task.abort();
                return true;
            }
        }
        false
    }

    fn push(&mut self, task: AbortHandle) {
        self.tasks.push_back(task);
    }
}

/// Lets a repeated log line through at most once per [`LOG_EVERY`]; counts the ones held back.
#[derive(Debug, Default)]
struct Throttle {
    last: Option<Instant>,
    unlogged: u64,
}

impl Throttle {
    /// `Some(lines held back since the last one)` when this one may be logged.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < LOG_EVERY => {
                self.unlogged += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.unlogged))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Clients are plain blocking sockets (tokio's io-util is not built): each test runs on a
    //! multi-thread runtime, the server on its workers, the client on the test's own thread.
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;

    /// A server on 127.0.0.1 with `limits`, ready.
    async fn server(limits: Limits) -> SocketAddr {
        server_of(Registry::default(), limits).await
    }

    async fn server_of(registry: Registry, limits: Limits) -> SocketAddr {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let health = Health::new(Duration::from_secs(60), Duration::from_secs(30));
        health.set_recovered(true);
        serve_with(addr, registry, Arc::new(health), limits)
            .await
            .expect("binds")
    }

    /// Reads until the server closes the connection (EOF or reset) or `within` passes: what it sent
    /// and when it closed, `None` if it did not.
    fn until_closed(s: &mut TcpStream, within: Duration) -> (String, Option<Duration>) {
        let started = Instant::now();
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        let closed = loop {
            let Some(left) = within.checked_sub(started.elapsed()) else {
                break None;
            };
            s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .expect("sets a timeout");
            match s.read(&mut buf) {
                Ok(0) => break Some(started.elapsed()),
                Ok(n) => text.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break Some(started.elapsed()),
            }
        };
        (String::from_utf8_lossy(&text).into_owned(), closed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_sent_header_is_cut_at_the_deadline() {
        let deadline = Duration::from_millis(300);
        let addr = server(Limits {
            header_read_timeout: deadline,
            ..Limits::default()
        })
        .await;
        let mut s = TcpStream::connect(addr).expect("connects");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHo").expect("writes");
        let (_, closed) = until_closed(&mut s, Duration::from_secs(5));
        let closed = closed.expect("the server closes a half-sent header");
        assert!(
            closed >= deadline - Duration::from_millis(50) && closed < Duration::from_secs(2),
            "closed after {closed:?}, deadline {deadline:?}"
        );
    }

    /// The header deadline also bounds the wait for the next request on a kept-alive connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_kept_alive_connection_is_cut_at_the_deadline() {
        let deadline = Duration::from_millis(300);
        let addr = server(Limits {
            header_read_timeout: deadline,
            ..Limits::default()
        })
        .await;
        let mut s = TcpStream::connect(addr).expect("connects");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("writes");
        let (text, closed) = until_closed(&mut s, Duration::from_secs(5));
        assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
        assert!(text.ends_with("ok\n"), "{text:?}");
        let closed = closed.expect("the server closes an idle kept-alive connection");
        assert!(
            closed >= deadline - Duration::from_millis(50) && closed < Duration::from_secs(2),
            "closed after {closed:?}, deadline {deadline:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_the_cap_a_new_connection_evicts_the_oldest_and_is_served() {
        let addr = server(Limits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(60),
            ..Limits::default()
        })
        .await;
        // Accepted in connect order (the kernel's backlog is a queue).
        let mut oldest = TcpStream::connect(addr).expect("connects");
        let mut second = TcpStream::connect(addr).expect("connects");
        let mut probe = TcpStream::connect(addr).expect("connects");
        probe
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("writes");
        let (text, closed) = until_closed(&mut probe, Duration::from_secs(5));
        assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
        assert!(closed.is_some(), "Connection: close");

        let (_, closed) = until_closed(&mut oldest, Duration::from_secs(5));
        assert!(closed.is_some(), "the oldest connection is evicted");
        let (_, closed) = until_closed(&mut second, Duration::from_millis(300));
        assert_eq!(closed, None, "the second connection stays open");
    }

    /// Finished connections are forgotten before anyone is evicted.
    #[tokio::test]
    async fn at_the_cap_finished_connections_make_room_first() {
        let mut open = Connections::new(2);
        let done = tokio::spawn(async {});
        let pending = tokio::spawn(std::future::pending::<()>());
        open.push(done.abort_handle());
        open.push(pending.abort_handle());
        done.await.expect("finishes");
        assert!(!open.make_room(), "the finished one makes room");
        assert!(!pending.is_finished());
        open.push(tokio::spawn(std::future::pending::<()>()).abort_handle());
        assert!(
            open.make_room(),
            "full of live connections: the oldest goes"
        );
        assert!(pending.await.expect_err("aborted").is_cancelled());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_head_over_the_buffer_is_refused() {
        let addr = server(Limits::default()).await;
        let mut s = TcpStream::connect(addr).expect("connects");
        let big = "a".repeat(MAX_REQUEST_HEAD_BYTES * 2);
        let request = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
        // The server may close before it has read everything: a failed write is fine.
        let _ = s.write_all(request.as_bytes());
        let (text, closed) = until_closed(&mut s, Duration::from_secs(5));
        assert!(closed.is_some(), "closed");
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 431"),
            "{text:?}"
        );
    }

    /// The buffer bounds what is read, not what is written: a `/metrics` page larger than it is
    /// sent whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_metrics_page_larger_than_the_buffer_is_sent_whole() {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        let family = Family::<Vec<(String, String)>, Counter>::default();
        for i in 0..5_000 {
            family
                .get_or_create(&vec![("n".into(), i.to_string())])
                .inc();
        }
        let mut registry = Registry::default();
        registry.register("big", "many series", family);
        let addr = server_of(registry, Limits::default()).await;
        let mut s = TcpStream::connect(addr).expect("connects");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("writes");
        let (text, closed) = until_closed(&mut s, Duration::from_secs(5));
        assert!(closed.is_some(), "Connection: close");
        assert!(
            text.starts_with("HTTP/1.1 200"),
            "{}",
            &text[..100.min(text.len())]
        );
        assert!(
            text.len() > 2 * MAX_REQUEST_HEAD_BYTES,
            "{} bytes",
            text.len()
        );
        assert!(text.ends_with("# EOF\n"), "cut short: {} bytes", text.len());
    }

    #[test]
    fn an_accept_error_moves_on_frees_a_descriptor_or_pauses() {
        let os = std::io::Error::from_raw_os_error;
        for errno in [libc::EMFILE, libc::ENFILE] {
            assert_eq!(
                after_accept_error(&os(errno)),
                AcceptError::OutOfDescriptors,
                "{errno}"
            );
        }
        for errno in [libc::ENOBUFS, libc::ENOMEM] {
            assert_eq!(
                after_accept_error(&os(errno)),
                AcceptError::Pause,
                "{errno}"
            );
        }
        for errno in [
            libc::ECONNABORTED,
            libc::ECONNRESET,
            libc::EINTR,
            libc::EPROTO,
        ] {
            assert_eq!(
                after_accept_error(&os(errno)),
                AcceptError::NextConnection,
                "{errno}"
            );
        }
        assert_eq!(
            after_accept_error(&std::io::Error::from(ErrorKind::Other)),
            AcceptError::Pause,
            "unknown: no busy loop"
        );
    }

    #[test]
    fn repeated_log_lines_pass_once_per_second_with_a_count() {
        let mut throttle = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(throttle.admit(t0), Some(0));
        assert_eq!(throttle.admit(t0 + Duration::from_millis(500)), None);
        assert_eq!(throttle.admit(t0 + Duration::from_millis(999)), None);
        assert_eq!(throttle.admit(t0 + Duration::from_millis(1000)), Some(2));
        assert_eq!(throttle.admit(t0 + Duration::from_millis(1500)), None);
    }
}
