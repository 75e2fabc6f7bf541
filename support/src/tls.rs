//! TLS material for mTLS between controller and agents.
//!
//! - [`server_tls`] / [`client_tls`] load PEM files into tonic's TLS configs; every error names
//!   the file that was wrong, and the files are parsed here (not first at handshake time) so a
//!   bad path or a key in the certificate slot is reported when the process starts.
//! - [`ReloadingTls`] / [`tls_incoming`]: the servers' side, rebuilt from the files when a
//!   renewal rewrites them (no restart; see `reload`).
//! - [`issue`]: a CA and the certificates of every identity (`fleetbench certs init`), so a
//!   first user gets mTLS without openssl.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Errors loading or writing TLS material. Each names the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file holds no usable PEM section of the expected kind.
    #[error("{path}: {what}")]
    BadPem { path: PathBuf, what: String },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `generate_dev_certs` would overwrite an existing file (pass `overwrite` to allow it).
    #[error("{path} exists; refusing to overwrite it (use --force)")]
    Exists { path: PathBuf },
    /// A subject alternative name is not a valid DNS name or IP address.
    #[error("subject alternative name {name:?} is not a DNS name or IP address: {reason}")]
    BadName { name: String, reason: String },
    /// Certificate generation failed inside rcgen.
    #[error("generating the {what} certificate: {reason}")]
    Generate { what: String, reason: String },
    /// The CA files could not be used to sign (`fleetbench certs issue`).
    #[error("{path}: not a usable CA: {reason}")]
    BadCa { path: PathBuf, reason: String },
}

mod files;
mod issue;
mod peer;
mod reload;
pub use files::{ClientTlsFiles, ServerTlsFiles};
pub use issue::{
    AgentCert, CertPair, DevCerts, InitOptions, Role, Usage, generate_dev_certs, init_certs,
    issue_agent_certs, parse_agent_spec,
};
pub use peer::{PeerIdentity, peer_identity};
pub use reload::{ClientAuth, HANDSHAKE_TIMEOUT, ReloadingTls, TlsIncoming, tls_incoming};

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a PEM file that must hold at least one certificate.
fn read_certs(path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(path)?;
    let mut count = 0usize;
    for item in CertificateDer::pem_slice_iter(&pem) {
        item.map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            what: format!("malformed PEM: {e}"),
        })?;
        count += 1;
    }
    if count == 0 {
        return Err(TlsError::BadPem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE section found (is this a key file?)".into(),
        });
    }
    Ok(pem)
}

/// Reads a PEM file that must hold a private key.
fn read_key(path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::BadPem {
        path: path.to_path_buf(),
        what: format!("no usable PRIVATE KEY section: {e}"),
    })?;
    Ok(pem)
}

/// Server side of mTLS: our certificate and key, and the CA a client certificate must chain to.
/// Clients without such a certificate fail the handshake.
pub fn server_tls(cert: &Path, key: &Path, client_ca: &Path) -> Result<ServerTlsConfig, TlsError> {
    let identity = Identity::from_pem(read_certs(cert)?, read_key(key)?);
    let ca = Certificate::from_pem(read_certs(client_ca)?);
    Ok(ServerTlsConfig::new()
        .identity(identity)
        .client_ca_root(ca)
        .client_auth_optional(false))
}

/// Client side of mTLS: the CA the server's certificate must chain to, our client certificate
/// and key, and the name the server's certificate must carry (`localhost`, a host name, or an IP).
pub fn client_tls(
    ca: &Path,
    cert: &Path,
    key: &Path,
    domain: &str,
) -> Result<ClientTlsConfig, TlsError> {
    let ca = Certificate::from_pem(read_certs(ca)?);
    let identity = Identity::from_pem(read_certs(cert)?, read_key(key)?);
    Ok(ClientTlsConfig::new()
        .ca_certificate(ca)
        .identity(identity)
        .domain_name(domain))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_certs_load_and_refuse_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let certs = generate_dev_certs(dir.path(), &["gpu-7.example".into()], false).unwrap();
        server_tls(&certs.agent_cert, &certs.agent_key, &certs.ca_cert).unwrap();
        client_tls(
            &certs.ca_cert,
            &certs.controller_cert,
            &certs.controller_key,
            "localhost",
        )
        .unwrap();
        let before = std::fs::read(&certs.ca_cert).unwrap();
        let err = generate_dev_certs(dir.path(), &[], false).unwrap_err();
        assert!(matches!(err, TlsError::Exists { .. }), "{err}");
        assert_eq!(before, std::fs::read(&certs.ca_cert).unwrap());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&certs.ca_key)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn loaders_name_the_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let certs = generate_dev_certs(dir.path(), &[], false).unwrap();
        // A key where a certificate belongs.
        let err = server_tls(&certs.agent_key, &certs.agent_key, &certs.ca_cert).unwrap_err();
        assert!(err.to_string().contains("agent.key"), "{err}");
        let missing = dir.path().join("nope.pem");
        let err =
            client_tls(&missing, &certs.controller_cert, &certs.controller_key, "x").unwrap_err();
        assert!(err.to_string().contains("nope.pem"), "{err}");
        // A certificate where a key belongs.
        let err =
            client_tls(&certs.ca_cert, &certs.controller_cert, &certs.ca_cert, "x").unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
    }

    #[test]
    fn bad_san_is_named_and_nothing_written() {
        let dir = tempfile::tempdir().unwrap();
        let err = generate_dev_certs(dir.path(), &["bad name!".into()], false).unwrap_err();
        assert!(err.to_string().contains("bad name!"), "{err}");
        assert!(!dir.path().join("ca.pem").exists());
    }
}
