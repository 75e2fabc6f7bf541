//! The one way fleetbench's processes build a gRPC client endpoint: the controller calling its
//! agents, an agent registering with the controller, the CLI and `fleetbench-agentctl`, the
//! scale stand-ins.
//!
//! Every endpoint gets the same transport settings, so a fix made here reaches every caller:
//! a connect time-out (an address that swallows SYNs fails in seconds, not minutes),
//! `TCP_NODELAY` (small unary calls and stream messages are not held back by Nagle), and HTTP/2
//! keep-alive pings, also while idle. A peer that vanishes without closing its socket (power
//! loss, a partition, a frozen process) then ends every call and stream on the connection
//! within [`KEEP_ALIVE_INTERVAL`] + [`KEEP_ALIVE_TIMEOUT`], instead of leaving them open until
//! TCP gives up. With [`ClientTls`] it is mTLS; the connection is made lazily by the caller
//! (`connect` or `connect_lazy`).

use std::path::Path;
use std::time::Duration;

use tonic::transport::Endpoint;

use crate::tls::{TlsError, client_tls};

/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle time after which a keep-alive ping is sent.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long a ping may go unanswered before the connection is closed.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client side of mTLS for an endpoint.
#[derive(Debug, Clone, Copy)]
pub struct ClientTls<'a> {
    /// The CA the server's certificate must chain to.
    pub ca: &'a Path,
    /// This process's client certificate and its key.
    pub cert: &'a Path,
    pub key: &'a Path,
    /// The name the server's certificate must carry; `None`: the URL's host.
    pub domain: Option<&'a str>,
}

/// Why an endpoint could not be built. Each names the URL or the file.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The URL does not parse, or has no host to check a certificate against.
    #[error("{url:?} is not a usable URL: {message}")]
    Url { url: String, message: String },
    /// The TLS material could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A gRPC endpoint for `url` (`http://host:port` or, with `tls`, `https://…`) with fleetbench's
/// transport settings. Nothing connects until the caller does.
pub fn endpoint(url: &str, tls: Option<ClientTls<'_>>) -> Result<Endpoint, EndpointError> {
    let bad = |message: String| EndpointError::Url {
        url: url.to_string(),
        message,
    };
    let mut ep = Endpoint::from_shared(url.to_string())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    if let Some(t) = tls {
        let domain = match t.domain {
            Some(d) => d.to_string(),
            None => ep
                .uri()
                .host()
                .map(|h| h.trim_matches(['[', ']']).to_string())
                .ok_or_else(|| bad("no host".into()))?,
        };
        let config = client_tls(t.ca, t.cert, t.key, &domain)?;
        ep = ep.tls_config(config).map_err(|e| bad(e.to_string()))?;
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_and_a_missing_key_are_named() {
        let e = endpoint("not a url", None).unwrap_err().to_string();
        assert!(e.contains("\"not a url\" is not a usable URL"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("client.key");
        let tls = ClientTls {
            ca: &missing,
            cert: &missing,
            key: &missing,
            domain: None,
        };
        let e = endpoint("https://10.0.0.1:7070", Some(tls))
            .unwrap_err()
            .to_string();
        assert!(e.contains("client.key"), "{e}");
    }
}
