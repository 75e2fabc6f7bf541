//! Issuing fleetbench's certificates: one CA, and one certificate per identity with the usages
//! that identity needs and no others.
//!
//! | file | role | usage | names (SAN) |
//! |---|---|---|---|
//! | `ca.pem`, `ca.key` | CA | signs | — |
//! | `controller-server.pem` | controller | serverAuth (its API) | `localhost`, `127.0.0.1`, `fleetbench-controller`, `--controller-name` |
//! | `controller.pem` | controller | clientAuth (it dials agents) | `fleetbench-controller` |
//! | `agent.pem` | agent | serverAuth + clientAuth (serves; registers) | `localhost`, `127.0.0.1`, `--agent-name` |
//! | `agents/NAME.pem` | agent | serverAuth + clientAuth | `NAME` and its address |
//! | `operator.pem`, `viewer.pem` | operator, viewer | clientAuth (the CLI) | — |
//!
//! Each subject carries the identity as `CN=<name>, OU=<role>, O=fleetbench`, so that a server
//! can authorize a peer by what its certificate says it is ([`Role`] is the one vocabulary for
//! that). A certificate used to serve must carry serverAuth: rustls clients (the CLI, agents)
//! refuse a server certificate whose extended key usage lacks it.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::TlsError;

/// Who a certificate speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Controller,
    Agent,
    /// A person or pipeline that submits and cancels jobs.
    Operator,
    /// A person or dashboard that only reads.
    Viewer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Controller, Role::Agent, Role::Operator, Role::Viewer];

    /// The name written into the subject's OU.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Agent => "agent",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }

    /// The role an OU names, if any.
    pub fn from_ou(ou: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == ou)
    }
}

/// What a key may be used for (the extended key usage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// TLS server authentication: the certificate may serve.
    Server,
    /// TLS client authentication: the certificate may dial an mTLS server.
    Client,
}

/// One certificate and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertPair {
    fn in_dir(dir: &Path, stem: &str) -> CertPair {
        CertPair {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
        }
    }
}

/// A per-agent certificate: `agents/<name>.pem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCert {
    pub name: String,
    /// The names the certificate carries: the agent's name and its address's host.
    pub sans: Vec<String>,
    pub files: CertPair,
}

/// What `fleetbench certs init` issues besides the fixed identities.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// Extra names of the shared agent certificate (`agent.pem`).
    pub agent_names: Vec<String>,
    /// Per-agent certificates: `(name, address)`; the address may carry a port.
    pub agents: Vec<(String, Option<String>)>,
    /// Extra names of the controller's server certificate (its Service or DNS name).
    pub controller_names: Vec<String>,
    /// Replace existing files.
    pub overwrite: bool,
}

/// The files [`init_certs`] wrote.
#[derive(Debug, Clone)]
pub struct DevCerts {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    /// Shared agent certificate (serverAuth + clientAuth).
    pub agent_cert: PathBuf,
    pub agent_key: PathBuf,
    /// The controller's client certificate (clientAuth), used to dial agents.
    pub controller_cert: PathBuf,
    pub controller_key: PathBuf,
    /// The controller's server certificate (serverAuth), for its API.
    pub controller_server: CertPair,
    pub operator: CertPair,
    pub viewer: CertPair,
    pub agents: Vec<AgentCert>,
}

impl DevCerts {
    /// The fixed paths inside `dir` (whether or not the files exist yet).
    pub fn in_dir(dir: &Path) -> Self {
        DevCerts {
            ca_cert: dir.join("ca.pem"),
            ca_key: dir.join("ca.key"),
            agent_cert: dir.join("agent.pem"),
            agent_key: dir.join("agent.key"),
            controller_cert: dir.join("controller.pem"),
            controller_key: dir.join("controller.key"),
            controller_server: CertPair::in_dir(dir, "controller-server"),
            operator: CertPair::in_dir(dir, "operator"),
            viewer: CertPair::in_dir(dir, "viewer"),
            agents: Vec::new(),
        }
    }

    fn all(&self) -> Vec<&PathBuf> {
        let mut v = vec![
            &self.ca_cert,
            &self.ca_key,
            &self.agent_cert,
            &self.agent_key,
            &self.controller_cert,
            &self.controller_key,
        ];
        for p in [&self.controller_server, &self.operator, &self.viewer] {
            v.extend([&p.cert, &p.key]);
        }
        for a in &self.agents {
            v.extend([&a.files.cert, &a.files.key]);
        }
        v
    }
}

/// One certificate to issue.
struct Spec<'a> {
    role: Role,
    /// The subject's CN: the identity's name.
    name: &'a str,
    sans: Vec<String>,
    usages: &'a [Usage],
}

/// A signed certificate in PEM, with its key.
struct Issued {
    cert_pem: String,
    key_pem: String,
}

fn gen_err(what: &str) -> impl Fn(rcgen::Error) -> TlsError + '_ {
    move |e| TlsError::Generate {
        what: what.to_string(),
        reason: e.to_string(),
    }
}

fn issue_one<S: rcgen::SigningKey>(ca: &Issuer<'_, S>, spec: &Spec) -> Result<Issued, TlsError> {
    let what = format!("{} {}", spec.role.as_str(), spec.name);
    if let Some(bad) = spec.sans.iter().find(|s| !valid_san(s)) {
        return Err(TlsError::BadName {
            name: bad.clone(),
            reason: "expected an IP address or a host name of letters, digits, '-' and '.'".into(),
        });
    }
    let key = KeyPair::generate().map_err(gen_err(&what))?;
    let mut params = CertificateParams::new(spec.sans.clone()).map_err(gen_err(&what))?;
    let dn = &mut params.distinguished_name;
    dn.push(DnType::CommonName, spec.name);
    dn.push(DnType::OrganizationalUnitName, spec.role.as_str());
    dn.push(DnType::OrganizationName, "fleetbench");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if spec.usages.contains(&Usage::Server) {
        // RSA key exchange needs it; harmless for the ECDSA keys rcgen makes.
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
    }
    params.extended_key_usages = spec
        .usages
        .iter()
        .map(|u| match u {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        })
        .collect();
    let cert = params.signed_by(&key, ca).map_err(gen_err(&what))?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// `localhost`, `127.0.0.1` then `extra`, without repeats.
fn with_loopback(extra: &[String]) -> Vec<String> {
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    for s in extra {
        if !sans.contains(s) {
            sans.push(s.clone());
        }
    }
    sans
}

/// Parses `NAME` or `NAME=ADDRESS` (`gpu-7=10.0.0.7:7443`).
pub fn parse_agent_spec(spec: &str) -> Result<(String, Option<String>), TlsError> {
    let (name, addr) = match spec.split_once('=') {
        Some((n, a)) => (n.trim(), Some(a.trim().to_string())),
        None => (spec.trim(), None),
    };
    if !valid_san(name) {
        return Err(TlsError::BadName {
            name: name.to_string(),
            reason: "an agent's name becomes a DNS name of its certificate".into(),
        });
    }
    Ok((name.to_string(), addr.filter(|a| !a.is_empty())))
}

/// The host part of `host`, `host:port`, `[v6]:port` or a bare IPv6 address.
fn address_host(addr: &str) -> String {
    if addr.parse::<std::net::IpAddr>().is_ok() {
        return addr.to_string();
    }
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().to_string();
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
        _ => addr.to_string(),
    }
}

fn agent_specs(dir: &Path, agents: &[(String, Option<String>)]) -> Vec<AgentCert> {
    agents
        .iter()
        .map(|(name, addr)| {
            let mut sans = vec![name.clone()];
            if let Some(h) = addr.as_deref().map(address_host)
                && !sans.contains(&h)
            {
                sans.push(h);
            }
            AgentCert {
                name: name.clone(),
                sans,
                files: CertPair::in_dir(&dir.join("agents"), name),
            }
        })
        .collect()
}

const AGENT_USAGES: &[Usage] = &[Usage::Server, Usage::Client];

/// Writes a CA and the certificates of every identity into `dir` (created if missing); the
/// module's table lists them. Keys are written mode 0600. Existing files are left alone and
/// reported unless `opts.overwrite`; on any error nothing is written.
pub fn init_certs(dir: &Path, opts: &InitOptions) -> Result<DevCerts, TlsError> {
    let mut out = DevCerts::in_dir(dir);
    out.agents = agent_specs(dir, &opts.agents);
    if !opts.overwrite
        && let Some(p) = out.all().into_iter().find(|p| p.exists())
    {
        return Err(TlsError::Exists { path: p.clone() });
    }

    let ca_key = KeyPair::generate().map_err(gen_err("CA"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err("CA"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "fleetbench CA");
    ca_params
        .distinguished_name
        .push(DnType::OrganizationName, "fleetbench");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(gen_err("CA"))?;

    let mut controller_names = vec!["fleetbench-controller".to_string()];
    controller_names.extend(opts.controller_names.iter().cloned());
    let mut files: Vec<(PathBuf, String, bool)> = vec![
        (out.ca_cert.clone(), ca.pem(), false),
        (out.ca_key.clone(), ca_key_pem, true),
    ];
    let fixed = [
        (
            CertPair {
                cert: out.agent_cert.clone(),
                key: out.agent_key.clone(),
            },
            Spec {
                role: Role::Agent,
                name: "fleetbench-agent",
                sans: with_loopback(&opts.agent_names),
                usages: AGENT_USAGES,
            },
        ),
        (
            CertPair {
                cert: out.controller_cert.clone(),
                key: out.controller_key.clone(),
            },
            Spec {
                role: Role::Controller,
                name: "fleetbench-controller",
                sans: vec!["fleetbench-controller".into()],
                usages: &[Usage::Client],
            },
        ),
        (
            out.controller_server.clone(),
            Spec {
                role: Role::Controller,
                name: "fleetbench-controller",
                sans: with_loopback(&controller_names),
                usages: &[Usage::Server],
            },
        ),
        (
            out.operator.clone(),
            Spec {
                role: Role::Operator,
                name: "operator",
                sans: Vec::new(),
                usages: &[Usage::Client],
            },
        ),
        (
            out.viewer.clone(),
            Spec {
                role: Role::Viewer,
                name: "viewer",
                sans: Vec::new(),
                usages: &[Usage::Client],
            },
        ),
    ];
    for (pair, spec) in &fixed {
        let issued = issue_one(&ca, spec)?;
        files.push((pair.cert.clone(), issued.cert_pem, false));
        files.push((pair.key.clone(), issued.key_pem, true));
    }
    for a in &out.agents {
        let issued = issue_agent(&ca, a)?;
        files.push((a.files.cert.clone(), issued.cert_pem, false));
        files.push((a.files.key.clone(), issued.key_pem, true));
    }
    write_all(dir, &files)?;
    Ok(out)
}

fn issue_agent<S: rcgen::SigningKey>(
    ca: &Issuer<'_, S>,
    a: &AgentCert,
) -> Result<Issued, TlsError> {
    issue_one(
        ca,
        &Spec {
            role: Role::Agent,
            name: &a.name,
            sans: a.sans.clone(),
            usages: AGENT_USAGES,
        },
    )
}

/// Issues per-agent certificates (`agents/NAME.pem`) with the CA already in `dir` (`ca.pem`,
/// `ca.key`): adding a host to the fleet later. Existing files are kept unless `overwrite`.
pub fn issue_agent_certs(
    dir: &Path,
    agents: &[(String, Option<String>)],
    overwrite: bool,
) -> Result<Vec<AgentCert>, TlsError> {
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| TlsError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    let key = KeyPair::from_pem(&read(&ca_key)?).map_err(|e| TlsError::BadCa {
        path: ca_key.clone(),
        reason: e.to_string(),
    })?;
    let ca = Issuer::from_ca_cert_pem(&read(&ca_cert)?, key).map_err(|e| TlsError::BadCa {
        path: ca_cert.clone(),
        reason: e.to_string(),
    })?;
    let certs = agent_specs(dir, agents);
    if !overwrite
        && let Some(p) = certs
            .iter()
            .flat_map(|a| [&a.files.cert, &a.files.key])
            .find(|p| p.exists())
    {
        return Err(TlsError::Exists { path: p.clone() });
    }
    let mut files = Vec::new();
    for a in &certs {
        let issued = issue_agent(&ca, a)?;
        files.push((a.files.cert.clone(), issued.cert_pem, false));
        files.push((a.files.key.clone(), issued.key_pem, true));
    }
    write_all(dir, &files)?;
    Ok(certs)
}

/// The development set with only a shared agent certificate (tests and `fleetbench run`).
pub fn generate_dev_certs(
    dir: &Path,
    agent_sans: &[String],
    overwrite: bool,
) -> Result<DevCerts, TlsError> {
    init_certs(
        dir,
        &InitOptions {
            agent_names: agent_sans.to_vec(),
            overwrite,
            ..Default::default()
        },
    )
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

fn write_all(dir: &Path, files: &[(PathBuf, String, bool)]) -> Result<(), TlsError> {
    for d in std::iter::once(dir).chain(files.iter().filter_map(|(p, _, _)| p.parent())) {
        std::fs::create_dir_all(d).map_err(|source| TlsError::Write {
            path: d.to_path_buf(),
            source,
        })?;
    }
    for (path, data, secret) in files {
        write_file(path, data.as_bytes(), *secret)?;
    }
    Ok(())
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
mod tests;
