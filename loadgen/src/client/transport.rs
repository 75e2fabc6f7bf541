//! The byte stream under a connection: plain TCP, or TLS over TCP for `https://` endpoints, and
//! what opening one cost.
//!
//! Opening is timed in two parts (TCP connect, TLS handshake) and summed per [`Target`], so a
//! report can say how much connection set-up happened while the clock ran: a closed-loop level
//! opens its connections before its clock starts, but an open-loop slot opens its connection
//! for its first request, whose TTFT then includes the handshake.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The TLS side of an `https://` target: whom to trust and the name the certificate must carry.
#[derive(Clone)]
pub(crate) struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish()
    }
}

impl Tls {
    /// Trusts the certificates in `ca_cert` only, or else the operating system's store
    /// (`SSL_CERT_FILE`/`SSL_CERT_DIR` are honoured). Offers HTTP/1.1 by ALPN: the client speaks
    /// nothing else.
    pub fn new(host: &str, ca_cert: Option<&Path>) -> Result<Tls, String> {
        let mut roots = rustls::RootCertStore::empty();
        match ca_cert {
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let mut found = 0usize;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert =
                        cert.map_err(|e| format!("{}: malformed PEM: {e}", path.display()))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("{}: unusable certificate: {e}", path.display()))?;
                    found += 1;
                }
                if found == 0 {
                    return Err(format!(
                        "{}: no CERTIFICATE section found (is this a key file?)",
                        path.display()
                    ));
                }
            }
            None => {
                let loaded = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(loaded.certs);
                if added == 0 {
                    let why = loaded
                        .errors
                        .first()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default();
                    return Err(format!(
                        "no trusted certificates found in the system's store{why}; give the CA \
                         to trust with --ca-cert"
                    ));
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host:?} cannot be checked against a certificate: {e}"))?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }
}

/// A connection's byte stream.
pub(crate) enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Connection set-up summed over a target's life (set-up calls and warm-up included).
#[derive(Debug, Default)]
pub(crate) struct ConnectStats {
    opened: AtomicU64,
    connect_ns: AtomicU64,
    handshake_ns: AtomicU64,
}

/// What opening connections has cost so far; subtract two snapshots for a span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Connections opened (successfully).
    pub opened: u64,
    /// Time in TCP connect, summed.
    pub tcp_connect: Duration,
    /// Time in the TLS handshake, summed (zero for `http://`).
    pub tls_handshake: Duration,
}

impl ConnectionStats {
    /// The set-up that happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ConnectionStats) -> ConnectionStats {
        ConnectionStats {
            opened: self.opened.saturating_sub(earlier.opened),
            tcp_connect: self.tcp_connect.saturating_sub(earlier.tcp_connect),
            tls_handshake: self.tls_handshake.saturating_sub(earlier.tls_handshake),
        }
    }
}

impl ConnectStats {
    pub fn snapshot(&self) -> ConnectionStats {
        ConnectionStats {
            opened: self.opened.load(Ordering::Relaxed),
            tcp_connect: Duration::from_nanos(self.connect_ns.load(Ordering::Relaxed)),
            tls_handshake: Duration::from_nanos(self.handshake_ns.load(Ordering::Relaxed)),
        }
    }
}

/// Why opening failed: the TCP connect (with the OS error, to classify) or the TLS handshake.
pub(crate) enum OpenError {
    Connect(io::Error),
    Handshake(io::Error),
}

/// Connects to `addr`, then shakes hands when `tls` is given; counts the cost into `stats`.
pub(crate) async fn open(
    addr: std::net::SocketAddr,
    tls: Option<&Tls>,
    stats: &ConnectStats,
) -> Result<Io, OpenError> {
    let t0 = Instant::now();
    let stream = TcpStream::connect(addr).await.map_err(OpenError::Connect)?;
    let _ = stream.set_nodelay(true);
    let t1 = Instant::now();
    let io = match tls {
        None => Io::Plain(stream),
        Some(tls) => Io::Tls(Box::new(
            tls.connector
                .connect(tls.name.clone(), stream)
                .await
                .map_err(OpenError::Handshake)?,
        )),
    };
    let t2 = Instant::now();
    stats.opened.fetch_add(1, Ordering::Relaxed);
    stats
        .connect_ns
        .fetch_add(nanos(t1 - t0), Ordering::Relaxed);
    stats
        .handshake_ns
        .fetch_add(nanos(t2 - t1), Ordering::Relaxed);
    Ok(io)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
