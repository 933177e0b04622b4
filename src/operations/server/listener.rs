//! The listener under both servers, and its bounds (Operations: the ports cannot be starved).
//!
//! A request's headers (and, for HTTPS, the TLS handshake) must arrive within
//! [`HEADER_READ_TIMEOUT`]; at most [`MAX_CONNECTIONS`] connections stay open across both servers
//! (a new one closes the oldest, so the kubelet's probe gets through a flood of idle connections on
//! either port); and a failing `accept` never spins: out of file descriptors it closes the oldest
//! connection, of either server, to free one; out of memory it pauses. What is answered is the
//! caller's ([`Respond`]).

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

/// What a server answers to one request.
pub trait Respond: Send + Sync + 'static {
    /// `peer`: the address the connection came from (a budget per peer, see `auth`).
    fn respond(
        &self,
        req: &Request<Incoming>,
        peer: IpAddr,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send;
}

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

/// The open connections of all servers, so that either may close the oldest of both.
#[derive(Clone)]
pub struct Pool(Arc<Mutex<Connections>>);

impl Pool {
    pub fn new() -> Pool {
        Pool::with_cap(MAX_CONNECTIONS)
    }

    pub(super) fn with_cap(cap: usize) -> Pool {
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

/// The bounds of one server: the constants above, shorter in tests.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub accept_pause: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            accept_pause: ACCEPT_PAUSE,
        }
    }
}

/// One listening server: what it answers, whether it speaks TLS, its bounds.
struct Server<R> {
    site: R,
    tls: Option<TlsAcceptor>,
    limits: Limits,
}

/// Binds `addr` and serves `site` until the process ends, over TLS when `tls` is given. Returns the
/// bound address (port 0 picks one).
pub async fn serve<R: Respond>(
    addr: SocketAddr,
    site: R,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    pool: Pool,
) -> std::io::Result<SocketAddr> {
    let server = Server { site, tls, limits };
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

async fn accept_loop<R: Respond>(listener: TcpListener, server: Arc<Server<R>>, pool: Pool) {
    let (mut failures, mut evictions) = (Throttle::default(), Throttle::default());
    let pause = server.limits.accept_pause;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if pool.lock().make_room()
                    && let Some(unlogged) = evictions.admit(Instant::now())
                {
                    tracing::warn!(
                        max_connections = MAX_CONNECTIONS,
                        unlogged,
                        "connection cap reached: closed the oldest connection"
                    );
                }
                let task = tokio::spawn(connection(stream, peer.ip(), server.clone()));
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
async fn connection<R: Respond>(stream: TcpStream, peer: IpAddr, server: Arc<Server<R>>) {
    let deadline = server.limits.header_read_timeout;
    match &server.tls {
        None => http(TokioIo::new(stream), peer, server).await,
        Some(acceptor) => match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => http(TokioIo::new(tls), peer, server).await,
            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(?deadline, "TLS handshake not done within the deadline"),
        },
    }
}

async fn http<I, R: Respond>(io: I, peer: IpAddr, server: Arc<Server<R>>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let deadline = server.limits.header_read_timeout;
    let service = service_fn(move |req: Request<Incoming>| {
        let server = server.clone();
        async move { Ok::<_, Infallible>(server.site.respond(&req, peer).await) }
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

/// "Machine is not on the network": Linux's alone (the kubectl plugin also builds for macOS, where
/// no error has this value).
#[cfg(target_os = "linux")]
const ENONET: i32 = libc::ENONET;
#[cfg(not(target_os = "linux"))]
const ENONET: i32 = i32::MIN;

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
            | ENONET
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
    use super::*;
    use std::io::ErrorKind;

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
