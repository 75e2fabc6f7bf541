//! Who a peer's certificate says it is: the `CN` (identity) and `OU` (role) that
//! [`init_certs`](super::init_certs) writes into every subject, read from the DER a TLS server
//! received. Servers authorize by this after the handshake proved the certificate chains to
//! their CA.

use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::Role;

/// A peer's identity as its certificate states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The subject's common name (`fleetbench-controller`, an agent's name, `operator`).
    pub name: String,
    /// The role the subject's OU names; `None` for a certificate without a known OU.
    pub role: Option<Role>,
    /// The host names and IP addresses of its subject alternative names: where an agent with
    /// this certificate may say it listens.
    pub hosts: Vec<String>,
}

/// The identity in a DER certificate; `None` when it cannot be parsed or has no CN.
pub fn peer_identity(der: &[u8]) -> Option<PeerIdentity> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let role = subject
        .iter_organizational_unit()
        .filter_map(|ou| ou.as_str().ok())
        .find_map(Role::from_ou);
    let hosts = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    GeneralName::DNSName(d) => Some(d.to_string()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => Some(
                            std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).ok()?).to_string(),
                        ),
                        16 => Some(
                            std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).ok()?).to_string(),
                        ),
                        _ => None,
                    },
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(PeerIdentity { name, role, hosts })
}

impl std::fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.role {
            Some(r) => write!(f, "{} (role {})", self.name, r.as_str()),
            None => write!(f, "{} (no role)", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn every_issued_certificate_names_its_identity_and_role() {
        let dir = tempfile::tempdir().unwrap();
        let certs = super::super::generate_dev_certs(dir.path(), &["gpu-7".into()], false).unwrap();
        let id = |p: &std::path::Path| {
            let der = CertificateDer::from_pem_file(p).unwrap();
            peer_identity(&der).unwrap()
        };
        assert_eq!(
            id(&certs.controller_cert),
            PeerIdentity {
                name: "fleetbench-controller".into(),
                role: Some(Role::Controller),
                hosts: vec!["fleetbench-controller".into()],
            }
        );
        assert_eq!(id(&certs.agent_cert).role, Some(Role::Agent));
        assert!(id(&certs.agent_cert).hosts.contains(&"gpu-7".to_string()));
        assert_eq!(id(&certs.operator.cert).role, Some(Role::Operator));
        assert_eq!(id(&certs.viewer.cert).role, Some(Role::Viewer));
        assert!(peer_identity(b"not a certificate").is_none());
    }
}
