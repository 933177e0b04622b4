//! The operations servers: `/metrics` (Prometheus text; HTTPS with a checked bearer token by
//! default, [`auth`], [`tls`]) and, on a port of their own, `/healthz` (the process serves) and
//! `/readyz` ([`Health`]: rebuilt, the watch alive, the writes going through).
//!
//! The ports cannot be starved (SPEC Operations): a request's headers (and, for HTTPS, the TLS
//! handshake) must arrive within [`HEADER_READ_TIMEOUT`]; at most [`MAX_CONNECTIONS`] connections
//! stay open across both servers (a new one closes the oldest, so the kubelet's probe gets through a
//! flood of idle connections on either port); and a failing `accept` never spins: out of file
//! descriptors it closes the oldest connection, of either server, to free one; out of memory it
//! pauses.

pub mod auth;
pub mod tls;

use crate::health::Health;
use crate::metrics::encode;
use auth::{Authorizer, Decision};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

/// Open connections of the process's servers together. The kubelet and Prometheus need a handful;
/// at the cap a new connection closes the oldest, so a flood of idle connections costs at most this
/// many descriptors (and buffers) and never keeps a probe out. Idle attackers do not reconnect, and
/// every connection is cut by [`HEADER_READ_TIMEOUT`] anyway.
pub const MAX_CONNECTIONS: usize = 256;

/// Deadline to finish the TLS handshake, to read a request's headers, and to wait for the next
/// request on a kept-alive connection (hyper restarts it whenever a connection goes idle): a client
/// that sends nothing, or half a header, is cut after it. Probes and scrapes send their headers at
/// once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause before accepting again after an accept failed for lack of resources (memory, or descriptors
/// when no server holds one to give back). Retrying at once spins a core while nothing changes;
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

/// How `/metrics` is served.
pub enum MetricsAccess {
    /// Plain HTTP, no authentication (`--metrics-secure=false`: local development, `just demo`).
    Open,
    /// HTTPS; a request must carry a bearer token the API server accepts for a user who may `get`
    /// `/metrics`.
    Secure {
        tls: TlsAcceptor,
        auth: Arc<Authorizer>,
    },
}

/// What one server answers.
enum Site {
    Health(Arc<Health>),
    Metrics {
        registry: Registry,
        auth: Option<Arc<Authorizer>>,
    },
}

/// One listening server: what it answers, whether it speaks TLS, its bounds.
struct Server {
    site: Site,
    tls: Option<TlsAcceptor>,
    limits: Limits,
}

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

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    respond(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

/// A refusal that tells the client what to do next (`WWW-Authenticate`, `Retry-After`).
fn text_with(
    status: StatusCode,
    body: &str,
    header: hyper::header::HeaderName,
    value: &'static str,
) -> Response<Full<Bytes>> {
    let mut response = text(status, body);
    response
        .headers_mut()
        .insert(header, hyper::header::HeaderValue::from_static(value));
    response
}

impl Server {
    async fn answer(&self, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        match &self.site {
            Site::Health(health) => match path {
                "/healthz" => text(StatusCode::OK, "ok"),
                "/readyz" => match health.readiness(Instant::now()) {
                    Ok(()) => text(StatusCode::OK, "ok"),
                    Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, why.as_str()),
                },
                _ => text(StatusCode::NOT_FOUND, "not found"),
            },
            Site::Metrics { registry, auth } => {
                if path != "/metrics" {
                    return text(StatusCode::NOT_FOUND, "not found");
                }
                if req.method() != Method::GET && req.method() != Method::HEAD {
                    return text(StatusCode::METHOD_NOT_ALLOWED, "only GET");
                }
                if let Some(auth) = auth {
                    let header = req.headers().get(hyper::header::AUTHORIZATION);
                    match auth.check(header).await {
                        Ok(Decision::Allowed) => {}
                        Ok(Decision::Unauthenticated) => {
                            return text_with(
                                StatusCode::UNAUTHORIZED,
                                "a bearer token the API server accepts is required",
                                hyper::header::WWW_AUTHENTICATE,
                                "Bearer",
                            );
                        }
                        Ok(Decision::Forbidden) => {
                            return text(
                                StatusCode::FORBIDDEN,
                                "this user may not get /metrics \
                                 (ClusterRole event-series-metrics-reader grants it)",
                            );
                        }
                        Err(e) => {
                            if !matches!(e, auth::ReviewError::Throttled) {
                                tracing::warn!(error = %e, "could not check a metrics request's token");
                            }
                            return text_with(
                                StatusCode::SERVICE_UNAVAILABLE,
                                "the token could not be checked with the API server",
                                hyper::header::RETRY_AFTER,
                                "1",
                            );
                        }
                    }
                }
                respond(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    encode(registry),
                )
            }
        }
    }
}

/// The open connections of all servers, so that either may close the oldest of both.
#[derive(Clone)]
pub struct Pool(Arc<Mutex<Connections>>);

impl Pool {
    pub fn new() -> Pool {
        Pool::with_cap(MAX_CONNECTIONS)
    }

    fn with_cap(cap: usize) -> Pool {
        Pool(Arc::new(Mutex::new(Connections::new(cap))))
    }

    /// The table; a panic while it was held (there is none to have) cannot corrupt a queue of
    /// handles, so a poisoned lock is used as is.
    fn lock(&self) -> std::sync::MutexGuard<'_, Connections> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

/// Binds `addr` and serves `/healthz` and `/readyz` over plain HTTP until the process ends. Returns
/// the bound address (port 0 picks one).
pub async fn serve_health(
    addr: SocketAddr,
    health: Arc<Health>,
    pool: &Pool,
) -> std::io::Result<SocketAddr> {
    let server = Server {
        site: Site::Health(health),
        tls: None,
        limits: Limits::default(),
    };
    serve_with(addr, server, pool.clone()).await
}

/// Binds `addr` and serves `/metrics` until the process ends. Returns the bound address.
pub async fn serve_metrics(
    addr: SocketAddr,
    registry: Registry,
    access: MetricsAccess,
    pool: &Pool,
) -> std::io::Result<SocketAddr> {
    let (tls, auth) = match access {
        MetricsAccess::Open => (None, None),
        MetricsAccess::Secure { tls, auth } => (Some(tls), Some(auth)),
    };
    let server = Server {
        site: Site::Metrics { registry, auth },
        tls,
        limits: Limits::default(),
    };
    serve_with(addr, server, pool.clone()).await
}

/// The bounds of one server: the constants above, shorter in tests.
#[derive(Clone, Copy, Debug)]
struct Limits {
    header_read_timeout: Duration,
    accept_pause: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            accept_pause: ACCEPT_PAUSE,
        }
    }
}

async fn serve_with(addr: SocketAddr, server: Server, pool: Pool) -> std::io::Result<SocketAddr> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(LISTEN_BACKLOG)?;
    let bound = listener.local_addr()?;
    tokio::spawn(accept_loop(listener, Arc::new(server), pool));
    Ok(bound)
}

async fn accept_loop(listener: TcpListener, server: Arc<Server>, pool: Pool) {
    let (mut failures, mut evictions) = (Throttle::default(), Throttle::default());
    let pause = server.limits.accept_pause;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if pool.lock().make_room()
                    && let Some(unlogged) = evictions.admit(Instant::now())
                {
                    tracing::warn!(
                        max_connections = MAX_CONNECTIONS,
                        unlogged,
                        "connection cap reached: closed the oldest connection"
                    );
                }
                let task = tokio::spawn(connection(stream, server.clone()));
                pool.lock().push(task.abort_handle());
            }
            Err(e) => match after_accept_error(&e) {
                AcceptError::NextConnection => {
                    tracing::trace!(error = %e, "accept failed for one connection");
                }
                AcceptError::OutOfDescriptors if pool.lock().evict_oldest() => {
                    if let Some(unlogged) = failures.admit(Instant::now()) {
                        tracing::warn!(error = %e, unlogged,
                            "accept failed: closed the oldest connection to free a descriptor");
                    }
                    // The descriptor is released when the runtime drops the aborted task.
                    tokio::task::yield_now().await;
                }
                AcceptError::OutOfDescriptors | AcceptError::Pause => {
                    if let Some(unlogged) = failures.admit(Instant::now()) {
                        tracing::warn!(error = %e, unlogged, ?pause,
                            "accept failed; pausing before the next one");
                    }
                    tokio::time::sleep(pause).await;
                }
            },
        }
    }
}

/// Serves one connection until the client closes it, its handshake or headers are late, or it is
/// evicted.
async fn connection(stream: TcpStream, server: Arc<Server>) {
    let deadline = server.limits.header_read_timeout;
    match &server.tls {
        None => http(TokioIo::new(stream), server).await,
        Some(acceptor) => match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => http(TokioIo::new(tls), server).await,
            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(?deadline, "TLS handshake not done within the deadline"),
        },
    }
}

async fn http<I>(io: I, server: Arc<Server>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let deadline = server.limits.header_read_timeout;
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let server = server.clone();
        async move { Ok::<_, Infallible>(server.answer(&req).await) }
    });
    if let Err(e) = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(deadline)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .serve_connection(io, service)
        .await
    {
        tracing::debug!(error = %e, "connection ended");
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

/// Open connections in accept order, so that the oldest can be closed.
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

    fn ready() -> Arc<Health> {
        let health = Health::new(Duration::from_secs(60), Duration::from_secs(30));
        health.set_recovered(true);
        Arc::new(health)
    }

    /// A health server on 127.0.0.1 with `limits` and its own pool of `cap` connections, ready.
    async fn health_server(limits: Limits, cap: usize) -> SocketAddr {
        let server = Server {
            site: Site::Health(ready()),
            tls: None,
            limits,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        serve_with(addr, server, Pool::with_cap(cap))
            .await
            .expect("binds")
    }

    async fn server(limits: Limits) -> SocketAddr {
        health_server(limits, MAX_CONNECTIONS).await
    }

    /// An open (plain, unauthenticated) metrics server for `registry`.
    async fn metrics_server(registry: Registry) -> SocketAddr {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        serve_metrics(addr, registry, MetricsAccess::Open, &Pool::new())
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

    /// The connection `s` is closed by the server at `deadline` (within scheduling slack).
    fn assert_cut_at(s: &mut TcpStream, deadline: Duration, what: &str) {
        let (_, closed) = until_closed(s, Duration::from_secs(5));
        let closed = closed.unwrap_or_else(|| panic!("the server does not close {what}"));
        assert!(
            closed >= deadline - Duration::from_millis(50) && closed < Duration::from_secs(2),
            "{what}: closed after {closed:?}, deadline {deadline:?}"
        );
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
        s.write_all(b"GET /readyz HTTP/1.1\r\nHo").expect("writes");
        assert_cut_at(&mut s, deadline, "a half-sent header");
    }

    /// A client that opens the HTTPS port and never says hello holds a connection no longer than
    /// one that sends half a header.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_client_is_cut_at_the_tls_handshake_deadline() {
        let deadline = Duration::from_millis(300);
        let server = Server {
            site: Site::Metrics {
                registry: Registry::default(),
                auth: None,
            },
            tls: Some(tls::acceptor(None, vec!["localhost".into()]).expect("a certificate")),
            limits: Limits {
                header_read_timeout: deadline,
                ..Limits::default()
            },
        };
        let addr = serve_with(SocketAddr::from(([127, 0, 0, 1], 0)), server, Pool::new())
            .await
            .expect("binds");
        let mut s = TcpStream::connect(addr).expect("connects");
        assert_cut_at(&mut s, deadline, "a silent TLS client");
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
        let addr = health_server(
            Limits {
                header_read_timeout: Duration::from_secs(60),
                ..Limits::default()
            },
            2,
        )
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
        let addr = metrics_server(registry).await;
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
