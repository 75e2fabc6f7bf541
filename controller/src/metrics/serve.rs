//! The Prometheus scrape endpoint: `GET /metrics` in the text exposition format, over plain
//! HTTP or HTTPS, open or for viewers only ([`ScrapePolicy`], from the config's `[metrics]`);
//! `GET /healthz` answers "ok" to anyone (liveness probes carry no credentials).
//!
//! Why it can ask for a role: the series carry job ids, host names, models and config names,
//! which is what a viewer reads through the API, so a scraper beyond loopback proves the same
//! role (a bearer token or a client certificate), checked on every request.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fleetbench_support::tls::{PeerIdentity, ReloadingTls, peer_identity};
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};

use super::Metrics;
use crate::authz::{self, ApiRole};

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// A client gets this long for its TLS handshake and for its request head.
const CLIENT_WAIT: Duration = Duration::from_secs(10);

/// Who may scrape, over what.
#[derive(Clone, Default)]
pub struct ScrapePolicy {
    /// Rebuilt from its files when a renewal rewrites them.
    tls: Option<Arc<ReloadingTls>>,
    /// `(token, role)`, compared in constant time.
    tokens: Arc<Vec<(String, ApiRole)>>,
    /// Only a viewer, operator or admin may scrape.
    viewer_only: bool,
}

impl std::fmt::Debug for ScrapePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrapePolicy")
            .field("tls", &self.tls.is_some())
            .field("tokens", &self.tokens.len())
            .field("viewer_only", &self.viewer_only)
            .finish()
    }
}

impl ScrapePolicy {
    /// Anyone who reaches the port, plain HTTP (loopback, or the named opt-in).
    pub fn open() -> Self {
        Self::default()
    }

    /// As the config says: HTTPS when `tls` is given; a viewer's role when `viewer_only`.
    pub fn new(
        tls: Option<Arc<ReloadingTls>>,
        tokens: Vec<(String, ApiRole)>,
        viewer_only: bool,
    ) -> Self {
        ScrapePolicy {
            tls,
            tokens: Arc::new(tokens),
            viewer_only,
        }
    }

    /// `Err((status, why))` when this request may not scrape.
    fn authorize(
        &self,
        auth_header: Option<&str>,
        peer: Option<&PeerIdentity>,
    ) -> Result<(), (StatusCode, String)> {
        if !self.viewer_only {
            return Ok(());
        }
        let needs = "needs the role viewer, operator or admin";
        if let Some(h) = auth_header {
            let token = h.strip_prefix("Bearer ").unwrap_or(h).trim();
            let role = self
                .tokens
                .iter()
                .find(|(t, _)| authz::constant_time_eq(token.as_bytes(), t.as_bytes()))
                .map(|(_, r)| *r)
                .ok_or((
                    StatusCode::UNAUTHORIZED,
                    "bearer token does not match".to_string(),
                ))?;
            return if authz::READ.contains(&role) {
                Ok(())
            } else {
                Err((
                    StatusCode::FORBIDDEN,
                    format!("/metrics {needs}; this token is a {}", role.as_str()),
                ))
            };
        }
        if let Some(id) = peer {
            return match id.role.map(authz::cert_role) {
                Some(r) if authz::READ.contains(&r) => Ok(()),
                _ => Err((
                    StatusCode::FORBIDDEN,
                    format!("/metrics {needs}; the client certificate is {id}"),
                )),
            };
        }
        Err((
            StatusCode::UNAUTHORIZED,
            format!(
                "/metrics {needs}: send `authorization: Bearer TOKEN`{}",
                if self.tls.is_some() {
                    " or a client certificate"
                } else {
                    ""
                }
            ),
        ))
    }
}

fn respond(
    metrics: &Metrics,
    policy: &ScrapePolicy,
    peer: Option<&PeerIdentity>,
    req: &Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: String| {
        let mut r = Response::new(Full::new(Bytes::from(text + "\n")));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        r
    };
    // Liveness for probes (the kubelet sends no credentials): says nothing but "up".
    if req.uri().path() == "/healthz" {
        return plain(StatusCode::OK, "ok".into());
    }
    if req.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "only /metrics and /healthz are served here".into(),
        );
    }
    if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics".into());
    }
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Err((status, why)) = policy.authorize(auth, peer) {
        return plain(status, why);
    }
    let mut r = Response::new(Full::new(Bytes::from(metrics.render_prometheus())));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(TEXT_FORMAT),
    );
    r
}

async fn serve_http<I>(
    io: I,
    metrics: Arc<Metrics>,
    policy: ScrapePolicy,
    peer: Option<PeerIdentity>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let r = respond(&metrics, &policy, peer.as_ref(), &req);
        async move { Ok::<_, Infallible>(r) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_WAIT)
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

async fn connection(metrics: Arc<Metrics>, policy: ScrapePolicy, tcp: tokio::net::TcpStream) {
    match policy.tls.clone() {
        None => serve_http(tcp, metrics, policy, None).await,
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
            let Ok(Ok(stream)) = tokio::time::timeout(CLIENT_WAIT, acceptor.accept(tcp)).await
            else {
                return; // a failed handshake (no CA match, plain HTTP) is the client's answer
            };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|d| peer_identity(d.as_ref()));
            serve_http(stream, metrics, policy, peer).await
        }
    }
}

/// Serves `/metrics` to anyone on `listener` until the task is dropped or the listener fails.
pub async fn serve(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
) -> std::io::Result<()> {
    serve_with(
        metrics,
        listener,
        ScrapePolicy::open(),
        std::future::pending(),
    )
    .await
}

/// Serves `/metrics` to anyone on `listener` until `shutdown` completes.
pub async fn serve_until(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(metrics, listener, ScrapePolicy::open(), shutdown).await
}

/// Serves `/metrics` on `listener` under `policy` until `shutdown` completes; connections in
/// flight are tracked and ended at shutdown (a scrape is short and idempotent).
pub async fn serve_with(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
    policy: ScrapePolicy,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut conns = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    conns.spawn(connection(metrics.clone(), policy.clone(), tcp));
                }
                Err(e) => {
                    // Out of descriptors and the like: pass, then accept again.
                    tracing::warn!(error = %e, "/metrics accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    Ok(())
}
