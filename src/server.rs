//! The operations HTTP server: `/metrics` (Prometheus text), `/healthz` (the process serves),
//! `/readyz` (the engine has been rebuilt and the watch is live).

use crate::metrics::encode;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;

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

fn route(path: &str, registry: &Registry, ready: &AtomicBool) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            encode(registry),
        ),
        "/healthz" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if ready.load(Ordering::Relaxed) => {
            respond(StatusCode::OK, "text/plain", "ok\n".into())
        }
        "/readyz" => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "recovering\n".into(),
        ),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `addr` and serves until the process ends. Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    ready: Arc<AtomicBool>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (registry, ready) = (registry.clone(), ready.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let response = route(req.uri().path(), &registry, &ready);
                    async move { Ok::<_, Infallible>(response) }
                });
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(error = %e, "metrics connection ended");
                }
            });
        }
    });
    Ok(bound)
}
