//! The operations servers: `/metrics` (Prometheus text; HTTPS with a checked bearer token by
//! default, [`auth`], [`tls`]) and, on a port of their own, `/healthz` (the process serves) and
//! `/readyz` ([`Health`]: rebuilt, the watch alive, the writes going through).
//!
//! This module routes and answers; [`listener`] accepts connections within the bounds that keep
//! the ports from being starved (Operations).

pub mod auth;
pub mod listener;
pub mod tls;

use crate::operations::health::Health;
use crate::operations::metrics::encode;
use auth::{Authorizer, Decision, ReviewError};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
pub use listener::Pool;
use listener::{Limits, Respond};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio_rustls::TlsAcceptor;

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

type Answer = Response<Full<Bytes>>;

fn respond(status: StatusCode, content_type: &str, body: String) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn text(status: StatusCode, body: &str) -> Answer {
    respond(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

/// What a token check answers when it does not let the scrape through: `None` when it does. A
/// refusal tells the client what to do next (`WWW-Authenticate`, `Retry-After`).
fn refusal(check: Result<Decision, ReviewError>) -> Option<Answer> {
    let (status, body, header): (_, _, Option<(HeaderName, &'static str)>) = match check {
        Ok(Decision::Allowed) => return None,
        Ok(Decision::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            "a bearer token the API server accepts is required",
            Some((WWW_AUTHENTICATE, "Bearer")),
        ),
        Ok(Decision::Forbidden) => (
            StatusCode::FORBIDDEN,
            "this user may not get /metrics (ClusterRole event-series-metrics-reader grants it)",
            None,
        ),
        Err(e) => {
            if !matches!(e, ReviewError::Throttled) {
                tracing::warn!(error = %e, "could not check a metrics request's token");
            }
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the token could not be checked with the API server",
                Some((RETRY_AFTER, "1")),
            )
        }
    };
    let mut response = text(status, body);
    if let Some((name, value)) = header {
        response
            .headers_mut()
            .insert(name, hyper::header::HeaderValue::from_static(value));
    }
    Some(response)
}

impl Respond for Site {
    async fn respond(&self, req: &Request<Incoming>, peer: std::net::IpAddr) -> Answer {
        let path = req.uri().path();
        match self {
            Site::Health(health) => match path {
                "/healthz" => match health.liveness(Instant::now()) {
                    Ok(()) => text(StatusCode::OK, "ok"),
                    Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, why.as_str()),
                },
                "/readyz" => match health.readiness(Instant::now()) {
                    Ok(()) => text(StatusCode::OK, "ok"),
                    Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, why.as_str()),
                },
                _ => text(StatusCode::NOT_FOUND, "not found"),
            },
            Site::Metrics { .. } if path != "/metrics" => text(StatusCode::NOT_FOUND, "not found"),
            Site::Metrics { .. } if req.method() != Method::GET && req.method() != Method::HEAD => {
                text(StatusCode::METHOD_NOT_ALLOWED, "only GET")
            }
            Site::Metrics { registry, auth } => {
                if let Some(auth) = auth {
                    let header = req.headers().get(hyper::header::AUTHORIZATION);
                    if let Some(refused) = refusal(auth.check(header, peer).await) {
                        return refused;
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

/// Binds `addr` and serves `/healthz` and `/readyz` over plain HTTP until the process ends. Returns
/// the bound address (port 0 picks one).
pub async fn serve_health(
    addr: SocketAddr,
    health: Arc<Health>,
    pool: &Pool,
) -> std::io::Result<SocketAddr> {
    let site = Site::Health(health);
    listener::serve(addr, site, None, Limits::default(), pool.clone()).await
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
    let site = Site::Metrics { registry, auth };
    listener::serve(addr, site, tls, Limits::default(), pool.clone()).await
}

#[cfg(test)]
mod tests {
    //! Clients are plain blocking sockets (tokio's io-util is not built): each test runs on a
    //! multi-thread runtime, the server on its workers, the client on the test's own thread.
    use super::listener::{MAX_CONNECTIONS, MAX_REQUEST_HEAD_BYTES};
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    fn ready() -> Arc<Health> {
        let health = Health::new(Duration::from_secs(60), Duration::from_secs(30));
        health.set_recovered(true);
        Arc::new(health)
    }

    /// A health server on 127.0.0.1 with `limits` and its own pool of `cap` connections, ready.
    async fn health_server(limits: Limits, cap: usize) -> SocketAddr {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        listener::serve(
            addr,
            Site::Health(ready()),
            None,
            limits,
            Pool::with_cap(cap),
        )
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
        let site = Site::Metrics {
            registry: Registry::default(),
            auth: None,
        };
        let tls = Some(tls::acceptor(None, vec!["localhost".into()]).expect("a certificate"));
        let limits = Limits {
            header_read_timeout: deadline,
            ..Limits::default()
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let addr = listener::serve(addr, site, tls, limits, Pool::new())
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
}
