//! The HTTP client of the OTLP/HTTP exporters: one HTTP/1.1 request per export over hyper, with
//! rustls for `https://` (the system's roots or the configured CA).
//!
//! Written here rather than taken from opentelemetry-otlp's reqwest or hyper clients: those
//! bring a second HTTP stack and TLS set-up to the binaries, and none takes our CA handling.
//! Exports run every few seconds, so a connection per export costs nothing worth pooling. The
//! SDK calls the client from its own exporter threads, outside any runtime; each request runs
//! on the telemetry guard's runtime, whose handle the client keeps.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

/// A collector's answer is a small protobuf message; anything larger is not one.
const MAX_RESPONSE: usize = 1 << 20;

#[derive(Clone)]
pub(crate) struct OtlpHttpClient {
    runtime: tokio::runtime::Handle,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
}

impl std::fmt::Debug for OtlpHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpHttpClient")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl OtlpHttpClient {
    /// `tls` is `Some(ca_pem)` for `https://` (`None` inside: the system's store).
    pub fn new(
        runtime: tokio::runtime::Handle,
        tls: Option<Option<&[u8]>>,
    ) -> Result<OtlpHttpClient, String> {
        let tls = match tls {
            None => None,
            Some(ca) => Some(Arc::new(client_config(ca)?)),
        };
        Ok(OtlpHttpClient {
            runtime,
            tls,
            timeout: Duration::from_secs(10),
        })
    }
}

fn client_config(ca: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("malformed PEM: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("unusable certificate: {e}"))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    if roots.is_empty() {
        return Err("no trusted certificate to check the collector's with".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let this = self.clone();
        let task = self.runtime.spawn(async move {
            match tokio::time::timeout(this.timeout, this.send(request)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {:?}", this.timeout).into()),
            }
        });
        task.await?
    }
}

impl OtlpHttpClient {
    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (mut parts, body) = request.into_parts();
        let authority = parts
            .uri
            .authority()
            .ok_or("the endpoint has no host")?
            .clone();
        let https = parts.uri.scheme_str() == Some("https");
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        // Origin form on the wire, the authority in Host.
        parts.uri = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()?;
        parts
            .headers
            .insert(http::header::HOST, authority.as_str().parse()?);
        let request = http::Request::from_parts(parts, Full::new(body));
        match (&self.tls, https) {
            (Some(config), true) => {
                let name = ServerName::try_from(host)?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await?;
                exchange(tls, request).await
            }
            (None, false) => exchange(tcp, request).await,
            _ => Err("the endpoint's scheme does not match the exporter's TLS set-up".into()),
        }
    }
}

async fn exchange<S>(
    io: S,
    request: http::Request<Full<Bytes>>,
) -> Result<Response<Bytes>, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let response = sender.send_request(request).await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| format!("reading the collector's answer: {e}"))?
        .to_bytes();
    Ok(Response::from_parts(parts, body))
}
