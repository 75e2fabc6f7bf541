//! Server certificates that rotate without a restart.
//!
//! cert-manager renews a certificate at two thirds of its life (day 60 of 90) by rewriting the
//! Secret's files in place (an atomic swap of the mounted directory); a package install's
//! operator does the same with `fleetbench certs issue` or their own CA. A server that read its
//! files once would present the old certificate until it expires and every mTLS handshake fails,
//! about 90 days after install. So each server here holds a [`ReloadingTls`]: every new
//! connection checks the three files' identity (inode, size, modification time) and, when any
//! changed, builds a new rustls config from them. Connections already open keep the config they
//! were accepted with (TLS checks certificates at the handshake only).
//!
//! A half-written renewal (the certificate new, the key still old) fails to load: the server
//! keeps the config it has, logs the file at fault once per change, and tries again when the
//! files change again. A renewal never takes a working server down.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::Stream;

use super::{ServerTlsFiles, TlsError, read_certs, read_key};

/// How long a client may take to finish its TLS handshake before its connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a client must present a certificate chaining to the client CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// gRPC APIs: no certificate, no connection.
    Required,
    /// `/metrics`: a scraper may prove its role with a certificate or a bearer token; a
    /// certificate that is presented must chain to the CA.
    Optional,
}

/// Which version of the three files a config was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Vec<Option<(u64, u64, u64, SystemTime)>>);

impl Stamp {
    fn of(files: &ServerTlsFiles) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp(
            [&files.cert, &files.key, &files.client_ca]
                .iter()
                .map(|p| {
                    // `metadata` follows symlinks: a Secret volume's `..data` swap shows here.
                    let m = std::fs::metadata(p).ok()?;
                    Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
                })
                .collect(),
        )
    }
}

struct State {
    loaded: Stamp,
    config: Arc<ServerConfig>,
    /// The last stamp that failed to load: not retried (nor logged) until the files change.
    failed: Option<Stamp>,
    reloads: u64,
}

/// A server's TLS config, rebuilt from its files when they change. See the module docs.
pub struct ReloadingTls {
    files: ServerTlsFiles,
    auth: ClientAuth,
    state: Mutex<State>,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("files", &self.files)
            .field("auth", &self.auth)
            .finish()
    }
}

impl ReloadingTls {
    /// Loads the files now: a bad file is an error naming it, before anything listens.
    pub fn new(files: ServerTlsFiles, auth: ClientAuth) -> Result<Arc<ReloadingTls>, TlsError> {
        let loaded = Stamp::of(&files);
        let config = build(&files, auth)?;
        Ok(Arc::new(ReloadingTls {
            files,
            auth,
            state: Mutex::new(State {
                loaded,
                config,
                failed: None,
                reloads: 0,
            }),
        }))
    }

    /// The config for a new connection: rebuilt first when the files changed since the last
    /// build (and since the last failed attempt).
    pub fn current(&self) -> Arc<ServerConfig> {
        let now = Stamp::of(&self.files);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now != s.loaded && s.failed.as_ref() != Some(&now) {
            match build(&self.files, self.auth) {
                Ok(config) => {
                    s.config = config;
                    s.loaded = now;
                    s.failed = None;
                    s.reloads += 1;
                    tracing::info!(
                        cert = %self.files.cert.display(),
                        "TLS certificate files changed: new connections use the new ones"
                    );
                }
                Err(e) => {
                    s.failed = Some(now);
                    tracing::warn!(
                        error = %e,
                        "TLS certificate files changed but do not load; still serving the \
                         previous certificate (retried when the files change again)"
                    );
                }
            }
        }
        s.config.clone()
    }

    /// How many times the files were reloaded since start.
    pub fn reloads(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).reloads
    }

    /// The certificate file this server presents.
    pub fn cert_path(&self) -> &Path {
        &self.files.cert
    }
}

fn bad(path: &Path, what: String) -> TlsError {
    TlsError::BadPem {
        path: PathBuf::from(path),
        what,
    }
}

/// One rustls config from the files: chain, key, the client CA's verifier; HTTP/2 offered by
/// ALPN (gRPC needs it; `/metrics` clients speaking HTTP/1.1 offer nothing and still connect).
fn build(files: &ServerTlsFiles, auth: ClientAuth) -> Result<Arc<ServerConfig>, TlsError> {
    let (cert, key, ca) = (&files.cert, &files.key, &files.client_ca);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read_certs(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(cert, format!("malformed PEM: {e}")))?;
    let private = PrivateKeyDer::from_pem_slice(&read_key(key)?)
        .map_err(|e| bad(key, format!("no usable PRIVATE KEY section: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&read_certs(ca)?) {
        let c = c.map_err(|e| bad(ca, format!("malformed PEM: {e}")))?;
        roots
            .add(c)
            .map_err(|e| bad(ca, format!("not a usable CA certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    );
    let verifier = match auth {
        ClientAuth::Required => verifier,
        ClientAuth::Optional => verifier.allow_unauthenticated(),
    }
    .build()
    .map_err(|e| bad(ca, format!("cannot verify clients with it: {e}")))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(cert, format!("TLS versions: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, private)
        .map_err(|e| bad(key, format!("does not match {}: {e}", cert.display())))?;
    if auth == ClientAuth::Required {
        config.alpn_protocols = vec![b"h2".to_vec()];
    }
    Ok(Arc::new(config))
}

/// The TLS connections accepted on `listener`, each with the config current when it arrived,
/// for tonic's `serve_with_incoming`. Handshakes run beside the accept loop (a slow or silent
/// client cannot hold up the next one) and are dropped after [`HANDSHAKE_TIMEOUT`]; a failed
/// handshake is logged and skipped. The accept task ends when the stream is dropped.
pub fn tls_incoming(listener: TcpListener, tls: Arc<ReloadingTls>) -> TlsIncoming {
    let (tx, rx) = mpsc::channel(16);
    TlsIncoming {
        rx,
        task: tokio::spawn(accept_loop(listener, tls, tx)),
    }
}

/// See [`tls_incoming`].
pub struct TlsIncoming {
    rx: mpsc::Receiver<TlsStream<TcpStream>>,
    task: JoinHandle<()>,
}

impl Drop for TlsIncoming {
    fn drop(&mut self) {
        // The accept loop and its handshakes (a JoinSet it owns) end with it.
        self.task.abort();
    }
}

impl Stream for TlsIncoming {
    type Item = io::Result<TlsStream<TcpStream>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|s| s.map(Ok))
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Arc<ReloadingTls>,
    tx: mpsc::Sender<TlsStream<TcpStream>>,
) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    let acceptor = TlsAcceptor::from(tls.current());
                    handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(s)) => Some(s),
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                None
                            }
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(done) = handshakes.join_next(), if !handshakes.is_empty() => {
                if let Ok(Some(stream)) = done
                    && tx.send(stream).await.is_err()
                {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}
