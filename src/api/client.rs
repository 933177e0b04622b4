//! The API client every request of the operator goes through, built for networks that fail without
//! saying so (a dead node, a black-holed route, a stuck load balancer: no FIN, no RST).
//!
//! - **Every request has a deadline** (`--request-timeout`): its answer and its whole body must arrive
//!   within it, or the request fails with [`DeadlineExceeded`]; callers retry it like a 5xx.
//! - **A watch must keep talking.** The API server ends every watch at its `timeoutSeconds`, and sends
//!   bookmarks meanwhile; a watch response silent for longer than that plus [`WATCH_MARGIN`] is dead,
//!   and fails with [`DeadlineExceeded::Silent`]. This covers every watch of the process (raw events,
//!   policies, namespace labels).
//! - **An abandoned request never lands late.** Connections close with a reset (`SO_LINGER` 0), so
//!   the bytes of a request given up on are dropped by the kernel instead of being retransmitted
//!   when the network heals, possibly after another replica has taken over. `TCP_USER_TIMEOUT` and
//!   keepalive let the kernel give up on a peer that stopped acknowledging.
//! - **Replicas are told apart**: the User-Agent names this replica, so the API server's audit log
//!   shows who wrote what.
//!
//! The stack is kube's own (TLS from the kubeconfig, base URI, authentication, extra headers) around
//! a TCP connector with those options, plus the deadline layer.

use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::{Body as KubeBody, ConfigExt};
use kube::{Client, Config};
use std::error::Error as StdError;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service, ServiceBuilder};

/// How much longer than its `timeoutSeconds` a watch may stay silent before it counts as dead: the
/// API server closes a watch at that timeout, late only by its own scheduling.
pub const WATCH_MARGIN: Duration = Duration::from_secs(5);

/// Interval of TCP keepalive probes on idle connections.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// How this process talks to the API server.
#[derive(Clone, Debug)]
pub struct Options {
    /// The deadline of every request that is not a watch.
    pub request_timeout: Duration,
    /// Sent as User-Agent: the program, its version and this replica's identity.
    pub user_agent: String,
}

/// A request that passed its deadline: answered as a 5xx would be (retried with backoff), counted
/// as `code="timeout"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeadlineExceeded {
    #[error("no answer within the request deadline")]
    Answer,
    #[error("the response body did not complete within the request deadline")]
    Body,
    #[error("the watch went silent (nothing, not even a bookmark, for longer than its timeout)")]
    Silent,
}

/// The [`DeadlineExceeded`] somewhere in an error's chain, if the error is one.
pub fn deadline_of(e: &(dyn StdError + 'static)) -> Option<DeadlineExceeded> {
    let mut current = Some(e);
    while let Some(e) = current {
        if let Some(d) = e.downcast_ref::<DeadlineExceeded>() {
            return Some(*d);
        }
        // An `io::Error` wrapping another error reports that error's source, not the error itself.
        current = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Whether a kube call failed because a deadline passed.
pub fn timed_out(e: &kube::Error) -> bool {
    deadline_of(e).is_some()
}

/// The client of this process, from a resolved kubeconfig.
pub fn build(config: Config, options: &Options) -> anyhow::Result<Client> {
    // kube's own stack would tunnel through it; this one connects directly, so refuse rather than
    // silently bypass a proxy the kubeconfig asks for.
    if let Some(proxy) = &config.proxy_url {
        anyhow::bail!("the kubeconfig's proxy-url ({proxy}) is not supported");
    }
    let mut config = config;
    // The writer and the watch own retries (backoff with jitter, Retry-After, coalescing while
    // waiting, metrics per answer); a retry inside the client would hide them.
    config.default_retry = false;
    if let Ok(agent) = http::HeaderValue::from_str(&options.user_agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(options.request_timeout));
    tcp.set_keepalive(Some(KEEPALIVE));
    tcp.set_keepalive_interval(Some(KEEPALIVE));
    // TCP_USER_TIMEOUT is Linux's (the kubectl plugin also builds for macOS, without it).
    #[cfg(target_os = "linux")]
    tcp.set_tcp_user_timeout(Some(options.request_timeout.max(Duration::from_secs(1))));
    let tls = config.rustls_https_connector_with_connector(Abortive(tcp))?;
    let http: hyper_util::client::legacy::Client<_, KubeBody> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(tls);
    let service = ServiceBuilder::new()
        .layer(Deadlines {
            request_timeout: options.request_timeout,
        })
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// TCP connections that close with a reset, dropping unsent bytes.
#[derive(Clone)]
struct Abortive(HttpConnector);

impl Service<http::Uri> for Abortive {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            io.inner().set_zero_linger()?;
            Ok(io)
        })
    }
}

/// When a response must be complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// Answer and body within this time of the request.
    Total(Duration),
    /// A watch: the answer within the request deadline, then no silence longer than this.
    Watch { answer: Duration, silence: Duration },
}

impl Deadline {
    /// The deadline of a request to `uri`: a watch (`watch=true` or `watch=1`) streams for its
    /// `timeoutSeconds` (kube-runtime's default, 290 s, when absent), anything else is bounded by
    /// `request_timeout`.
    pub fn of(uri: &http::Uri, request_timeout: Duration) -> Deadline {
        let mut watch = false;
        let mut timeout_secs = None;
        for pair in uri.query().unwrap_or("").split('&') {
            match pair.split_once('=') {
                Some(("watch", v)) => watch = v == "true" || v == "1",
                Some(("timeoutSeconds", v)) => timeout_secs = v.parse::<u64>().ok(),
                _ => {}
            }
        }
        if watch {
            Deadline::Watch {
                answer: request_timeout,
                silence: Duration::from_secs(timeout_secs.unwrap_or(290)) + WATCH_MARGIN,
            }
        } else {
            Deadline::Total(request_timeout)
        }
    }
}

/// The layer that gives every request its [`Deadline`].
#[derive(Clone, Copy, Debug)]
struct Deadlines {
    request_timeout: Duration,
}

impl<S> Layer<S> for Deadlines {
    type Service = WithDeadlines<S>;

    fn layer(&self, inner: S) -> WithDeadlines<S> {
        WithDeadlines {
            inner,
            request_timeout: self.request_timeout,
        }
    }
}

#[derive(Clone)]
struct WithDeadlines<S> {
    inner: S,
    request_timeout: Duration,
}

impl<S, B> Service<Request<KubeBody>> for WithDeadlines<S>
where
    S: Service<Request<KubeBody>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Bounded<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<KubeBody>) -> Self::Future {
        let deadline = Deadline::of(request.uri(), self.request_timeout);
        let answering = self.inner.call(request);
        Box::pin(async move {
            let started = Instant::now();
            let answer = match deadline {
                Deadline::Total(d) => d,
                Deadline::Watch { answer, .. } => answer,
            };
            let response = tokio::time::timeout(answer, answering)
                .await
                .map_err(|_| DeadlineExceeded::Answer)?
                .map_err(Into::into)?;
            let timer = match deadline {
                Deadline::Total(d) => Timer::Total(started + d),
                Deadline::Watch { silence, .. } => Timer::Silence(silence),
            };
            Ok(response.map(|body| Bounded::new(body, timer)))
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum Timer {
    /// The body must end by then.
    Total(Instant),
    /// Each frame must follow the previous one within this time.
    Silence(Duration),
}

/// A response body under its deadline.
pub struct Bounded<B> {
    inner: B,
    timer: Timer,
    sleep: Pin<Box<Sleep>>,
    expired: bool,
}

impl<B> Bounded<B> {
    fn new(inner: B, timer: Timer) -> Bounded<B> {
        let at = match timer {
            Timer::Total(at) => at,
            Timer::Silence(d) => Instant::now() + d,
        };
        Bounded {
            inner,
            timer,
            sleep: Box::pin(tokio::time::sleep_until(at)),
            expired: false,
        }
    }
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if let (Some(Ok(_)), Timer::Silence(d)) = (&frame, this.timer) {
                this.sleep.as_mut().reset(Instant::now() + d);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        ready!(this.sleep.as_mut().poll(cx));
        this.expired = true;
        let e = match this.timer {
            Timer::Total(_) => DeadlineExceeded::Body,
            Timer::Silence(_) => DeadlineExceeded::Silent,
        };
        Poll::Ready(Some(Err(Box::new(e))))
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn a_watch_may_stream_for_its_timeout_anything_else_has_the_request_deadline() {
        let t = Duration::from_secs(30);
        assert_eq!(
            Deadline::of(&uri("/api/v1/events?limit=500"), t),
            Deadline::Total(t)
        );
        assert_eq!(
            Deadline::of(&uri("/api/v1/events?watch=false&timeoutSeconds=9"), t),
            Deadline::Total(t)
        );
        assert_eq!(
            Deadline::of(
                &uri("/api/v1/events?&watch=true&timeoutSeconds=10&allowWatchBookmarks=true"),
                t
            ),
            Deadline::Watch {
                answer: t,
                silence: Duration::from_secs(10) + WATCH_MARGIN
            }
        );
        assert_eq!(
            Deadline::of(&uri("/apis/x/v1/y?watch=1"), t),
            Deadline::Watch {
                answer: t,
                silence: Duration::from_secs(290) + WATCH_MARGIN
            }
        );
    }

    type Frames = futures::channel::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>;
    type FramesBody = http_body_util::StreamBody<
        futures::channel::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>,
    >;

    /// A body fed by a channel: frames arrive when the test sends them.
    fn channel_body() -> (Frames, FramesBody) {
        let (tx, rx) = futures::channel::mpsc::channel(8);
        (tx, http_body_util::StreamBody::new(rx))
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_keeps_talking_lives_a_silent_one_fails() {
        let (mut tx, body) = channel_body();
        let mut body = Bounded::new(body, Timer::Silence(Duration::from_secs(10)));
        // A frame every 8 s keeps it alive well past 10 s in total.
        for _ in 0..4 {
            tokio::time::advance(Duration::from_secs(8)).await;
            tx.try_send(Ok(Frame::data(Bytes::from_static(b"{}\n"))))
                .unwrap();
            assert!(body.frame().await.unwrap().is_ok());
        }
        // Then silence: 10 s later it fails as silent, and ends.
        let waited = Instant::now();
        let e = body.frame().await.unwrap().unwrap_err();
        assert_eq!(waited.elapsed(), Duration::from_secs(10));
        assert_eq!(deadline_of(&*e), Some(DeadlineExceeded::Silent));
        assert!(body.frame().await.is_none());
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_must_complete_within_the_request_deadline_however_it_trickles() {
        let (mut tx, body) = channel_body();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut body = Bounded::new(body, Timer::Total(deadline));
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(5)).await;
            tx.try_send(Ok(Frame::data(Bytes::from_static(b"x"))))
                .unwrap();
            assert!(body.frame().await.unwrap().is_ok());
        }
        let e = body.frame().await.unwrap().unwrap_err();
        assert_eq!(Instant::now(), deadline);
        assert_eq!(deadline_of(&*e), Some(DeadlineExceeded::Body));
    }

    #[test]
    fn a_deadline_is_found_through_io_and_kube_wrappers() {
        // What kube's watch stream makes of a body error: io::Error::other(BoxError).
        let boxed: BoxError = Box::new(DeadlineExceeded::Silent);
        let e = kube::Error::ReadEvents(std::io::Error::other(boxed));
        assert!(timed_out(&e));
        let e = kube::Error::Service(Box::new(DeadlineExceeded::Answer));
        assert!(timed_out(&e));
        let e = kube::Error::Service("connection refused".into());
        assert!(!timed_out(&e));
    }
}
