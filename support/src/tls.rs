//! TLS material for mTLS between controller and agents.
//!
//! - [`server_tls`] / [`client_tls`] load PEM files into tonic's TLS configs; every error names
//!   the file that was wrong, and the files are parsed here (not first at handshake time) so a
//!   bad path or a key in the certificate slot is reported when the process starts.
//! - [`generate_dev_certs`] writes a development CA plus an agent (server) and a controller
//!   (client) certificate, so a first user gets mTLS without openssl.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
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
    Generate { what: &'static str, reason: String },
}

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

/// The files [`generate_dev_certs`] wrote.
#[derive(Debug, Clone)]
pub struct DevCerts {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub agent_cert: PathBuf,
    pub agent_key: PathBuf,
    pub controller_cert: PathBuf,
    pub controller_key: PathBuf,
}

impl DevCerts {
    /// The paths inside `dir` (whether or not the files exist yet).
    pub fn in_dir(dir: &Path) -> Self {
        DevCerts {
            ca_cert: dir.join("ca.pem"),
            ca_key: dir.join("ca.key"),
            agent_cert: dir.join("agent.pem"),
            agent_key: dir.join("agent.key"),
            controller_cert: dir.join("controller.pem"),
            controller_key: dir.join("controller.key"),
        }
    }

    fn all(&self) -> [&PathBuf; 6] {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.agent_cert,
            &self.agent_key,
            &self.controller_cert,
            &self.controller_key,
        ]
    }
}

fn gen_err(what: &'static str) -> impl Fn(rcgen::Error) -> TlsError {
    move |e| TlsError::Generate {
        what,
        reason: e.to_string(),
    }
}

/// Writes a development CA (`ca.pem`, `ca.key`), an agent server certificate (`agent.pem`,
/// `agent.key`; SANs `localhost`, `127.0.0.1` and `agent_sans`) and a controller client
/// certificate (`controller.pem`, `controller.key`) into `dir` (created if missing). Keys are
/// written mode 0600. Existing files are left alone and reported unless `overwrite`; on any
/// error nothing is written.
pub fn generate_dev_certs(
    dir: &Path,
    agent_sans: &[String],
    overwrite: bool,
) -> Result<DevCerts, TlsError> {
    let out = DevCerts::in_dir(dir);
    if !overwrite && let Some(p) = out.all().into_iter().find(|p| p.exists()) {
        return Err(TlsError::Exists { path: p.clone() });
    }

    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    for s in agent_sans {
        if !sans.contains(s) {
            sans.push(s.clone());
        }
    }

    // CA
    let ca_key = KeyPair::generate().map_err(gen_err("CA"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err("CA"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "fleetbench development CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(gen_err("CA"))?;

    // Agent (server)
    let agent_key = KeyPair::generate().map_err(gen_err("agent"))?;
    if let Some(bad) = sans.iter().find(|s| !valid_san(s)) {
        return Err(TlsError::BadName {
            name: bad.clone(),
            reason: "expected an IP address or a host name of letters, digits, '-' and '.'".into(),
        });
    }
    let mut agent_params = CertificateParams::new(sans.clone()).map_err(gen_err("agent"))?;
    agent_params
        .distinguished_name
        .push(DnType::CommonName, "fleetbench agent");
    agent_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    agent_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let agent_cert = agent_params
        .signed_by(&agent_key, &ca)
        .map_err(gen_err("agent"))?;

    // Controller (client)
    let ctl_key = KeyPair::generate().map_err(gen_err("controller"))?;
    let mut ctl_params = CertificateParams::new(vec!["fleetbench-controller".to_string()])
        .map_err(gen_err("controller"))?;
    ctl_params
        .distinguished_name
        .push(DnType::CommonName, "fleetbench controller");
    ctl_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    ctl_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let ctl_cert = ctl_params
        .signed_by(&ctl_key, &ca)
        .map_err(gen_err("controller"))?;

    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write_file(&out.ca_cert, ca.pem().as_bytes(), false)?;
    write_file(&out.ca_key, ca_key_pem.as_bytes(), true)?;
    write_file(&out.agent_cert, agent_cert.pem().as_bytes(), false)?;
    write_file(&out.agent_key, agent_key.serialize_pem().as_bytes(), true)?;
    write_file(&out.controller_cert, ctl_cert.pem().as_bytes(), false)?;
    write_file(
        &out.controller_key,
        ctl_key.serialize_pem().as_bytes(),
        true,
    )?;
    Ok(out)
}

fn valid_san(name: &str) -> bool {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn write_file(path: &Path, data: &[u8], secret: bool) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(err)?;
    f.write_all(data).map_err(err)
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
