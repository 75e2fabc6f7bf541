//! Each issued certificate carries the usages its identity needs and no others, checked the way
//! a peer checks them: rustls's WebPKI verifiers, as the agent, controller and CLI use them.

use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;

fn der(path: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn roots(ca: &Path) -> Arc<rustls::RootCertStore> {
    let mut r = rustls::RootCertStore::empty();
    r.add(der(ca)).unwrap();
    Arc::new(r)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Does a client (agent, CLI) accept `cert` as the server `name`?
fn serves(ca: &Path, cert: &Path, name: &str) -> Result<(), rustls::Error> {
    let v = rustls::client::WebPkiServerVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .unwrap();
    v.verify_server_cert(
        &der(cert),
        &[],
        &ServerName::try_from(name.to_string()).unwrap(),
        &[],
        UnixTime::now(),
    )
    .map(|_| ())
}

/// Does an mTLS server accept `cert` as a client?
fn dials(ca: &Path, cert: &Path) -> Result<(), rustls::Error> {
    let v = rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .unwrap();
    v.verify_client_cert(&der(cert), &[], UnixTime::now())
        .map(|_| ())
}

/// (CN, OU, SANs) of a certificate.
fn subject(path: &Path) -> (String, String, Vec<String>) {
    let d = der(path);
    let (_, c) = X509Certificate::from_der(&d).unwrap();
    let attr = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        it.next()
            .and_then(|a| a.as_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let cn = attr(&mut c.subject().iter_common_name());
    let ou = attr(&mut c.subject().iter_organizational_unit());
    let sans = c
        .subject_alternative_name()
        .unwrap()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => d.to_string(),
                    x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                        4 => std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string(),
                        _ => format!("{ip:?}"),
                    },
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .unwrap_or_default();
    (cn, ou, sans)
}

#[test]
fn every_identity_has_exactly_the_usages_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let c = init_certs(
        dir.path(),
        &InitOptions {
            agent_names: vec!["gpu-shared.example".into()],
            agents: vec![
                parse_agent_spec("gpu-7=10.0.0.7:7443").unwrap(),
                parse_agent_spec("gpu-8=gpu-8.rack2.example").unwrap(),
            ],
            controller_names: vec!["fleetbench-controller.fleetbench.svc".into()],
            overwrite: false,
        },
    )
    .unwrap();
    let ca = &c.ca_cert;
    // The controller's API certificate serves under its names; the client-only one cannot serve
    // (this is what agents and the CLI refused before).
    for name in [
        "localhost",
        "127.0.0.1",
        "fleetbench-controller",
        "fleetbench-controller.fleetbench.svc",
    ] {
        serves(ca, &c.controller_server.cert, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let err = serves(ca, &c.controller_cert, "fleetbench-controller").unwrap_err();
    assert!(format!("{err:?}").contains("Purpose"), "{err:?}");
    assert!(
        dials(ca, &c.controller_server.cert).is_err(),
        "server cert must not dial"
    );
    // Client identities dial and never serve.
    for p in [&c.controller_cert, &c.operator.cert, &c.viewer.cert] {
        dials(ca, p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(serves(ca, p, "localhost").is_err(), "{}", p.display());
    }
    // Agents serve under their name and address, and dial the controller to register.
    assert_eq!(c.agents.len(), 2);
    let gpu7 = &c.agents[0];
    assert_eq!(gpu7.files.cert, dir.path().join("agents/gpu-7.pem"));
    serves(ca, &gpu7.files.cert, "gpu-7").unwrap();
    serves(ca, &gpu7.files.cert, "10.0.0.7").unwrap();
    assert!(
        serves(ca, &gpu7.files.cert, "gpu-8").is_err(),
        "one identity per agent"
    );
    serves(ca, &c.agents[1].files.cert, "gpu-8.rack2.example").unwrap();
    dials(ca, &gpu7.files.cert).unwrap();
    serves(ca, &c.agent_cert, "gpu-shared.example").unwrap();
    serves(ca, &c.agent_cert, "localhost").unwrap();
    // The identity is in the subject, in the one vocabulary of roles.
    assert_eq!(
        subject(&gpu7.files.cert),
        (
            "gpu-7".into(),
            "agent".into(),
            vec!["gpu-7".into(), "10.0.0.7".into()]
        )
    );
    let (cn, ou, _) = subject(&c.operator.cert);
    assert_eq!(
        (cn.as_str(), Role::from_ou(&ou)),
        ("operator", Some(Role::Operator))
    );
    let (_, ou, _) = subject(&c.viewer.cert);
    assert_eq!(Role::from_ou(&ou), Some(Role::Viewer));
    let (_, ou, _) = subject(&c.controller_server.cert);
    assert_eq!(Role::from_ou(&ou), Some(Role::Controller));
    // Every key is private to its owner.
    use std::os::unix::fs::PermissionsExt;
    for k in [&c.ca_key, &c.operator.key, &gpu7.files.key] {
        assert_eq!(
            std::fs::metadata(k).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}

#[test]
fn agents_added_later_chain_to_the_same_ca() {
    let dir = tempfile::tempdir().unwrap();
    let c = generate_dev_certs(dir.path(), &[], false).unwrap();
    let added = issue_agent_certs(
        dir.path(),
        &[parse_agent_spec("gpu-9=[fd00::9]:7443").unwrap()],
        false,
    )
    .unwrap();
    assert_eq!(
        added[0].sans,
        vec!["gpu-9".to_string(), "fd00::9".to_string()]
    );
    serves(&c.ca_cert, &added[0].files.cert, "gpu-9").unwrap();
    serves(&c.ca_cert, &added[0].files.cert, "fd00::9").unwrap();
    // Again without --force: refused, file unchanged.
    let before = std::fs::read(&added[0].files.cert).unwrap();
    let err = issue_agent_certs(dir.path(), &[("gpu-9".into(), None)], false).unwrap_err();
    assert!(matches!(err, TlsError::Exists { .. }), "{err}");
    assert_eq!(before, std::fs::read(&added[0].files.cert).unwrap());
    // Without a CA key there is nothing to sign with, and the error names the file.
    let empty = tempfile::tempdir().unwrap();
    let err = issue_agent_certs(empty.path(), &[("x".into(), None)], false).unwrap_err();
    assert!(err.to_string().contains("ca.key"), "{err}");
}

#[test]
fn bad_agent_specs_are_named() {
    for bad in ["", "bad name=1.2.3.4", "-x"] {
        let err = parse_agent_spec(bad).unwrap_err();
        assert!(
            err.to_string().contains(bad.split('=').next().unwrap()),
            "{err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let err = init_certs(
        dir.path(),
        &InitOptions {
            agents: vec![("gpu-1".into(), Some("not an address!".into()))],
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("not an address!"), "{err}");
    assert!(!dir.path().join("ca.pem").exists(), "nothing written");
}
