//! A server's certificate renewed on disk is served without a restart: an expired certificate
//! fails the handshake, the renewal written over it (as cert-manager and `fleetbench certs
//! issue` do) is presented to the next client, a half-written renewal keeps the previous one,
//! and a connection opened before the renewal keeps working.

use std::path::Path;
use std::sync::Arc;

use fleetbench_support::tls::{ClientAuth, ServerTlsFiles, generate_dev_certs, tls_incoming};
use rcgen::{CertificateParams, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt;

/// A server certificate for `localhost` signed by the CA in `dir`, valid between the years given.
fn issue(dir: &Path, from: i32, to: i32) -> (String, String) {
    let ca_key = KeyPair::from_pem(&std::fs::read_to_string(dir.join("ca.key")).unwrap()).unwrap();
    let ca = Issuer::from_ca_cert_pem(
        &std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
        ca_key,
    )
    .unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(to, 1, 1);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Replaces a file the way a renewal does: a new file renamed over the old one.
fn replace(path: &Path, data: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}

/// A TLS client that trusts the CA and presents the controller's certificate.
fn client(dir: &Path) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<_> = CertificateDer::pem_file_iter(dir.join("controller.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("controller.key")).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Connects and returns the stream and the certificate the server presented, or the error.
async fn connect(
    dir: &Path,
    port: u16,
) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>), String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut s = client(dir)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let presented = s.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec();
    // One byte echoed: the server accepted the connection (it checked our certificate too).
    s.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.map_err(|e| e.to_string())?;
    assert_eq!(&b, b"x");
    Ok((s, presented))
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    generate_dev_certs(dir, &[], false).unwrap();
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    let (old_cert, old_key) = issue(dir, 2020, 2021);
    std::fs::write(&cert_path, &old_cert).unwrap();
    std::fs::write(&key_path, &old_key).unwrap();

    let files = ServerTlsFiles {
        cert: cert_path.clone(),
        key: key_path.clone(),
        client_ca: dir.join("ca.pem"),
    };
    let tls = files.reloading(ClientAuth::Required).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut incoming = tls_incoming(listener, tls.clone());
    // The server: echo every byte on every accepted connection.
    tokio::spawn(async move {
        while let Some(Ok(mut s)) = incoming.next().await {
            tokio::spawn(async move {
                let mut b = [0u8; 1];
                while s.read_exact(&mut b).await.is_ok() {
                    if s.write_all(&b).await.is_err() {
                        break;
                    }
                }
            });
        }
    });

    // The certificate read at start has expired: no client gets through.
    let Err(err) = connect(dir, port).await else {
        panic!("an expired certificate was accepted")
    };
    assert!(err.to_lowercase().contains("expired"), "{err}");

    // The renewal lands on disk; the next client gets the new certificate, no restart.
    let (new_cert, new_key) = issue(dir, 2024, 2099);
    replace(&key_path, &new_key);
    replace(&cert_path, &new_cert);
    let (mut kept, presented) = connect(dir, port).await.expect("the renewed certificate");
    assert_eq!(presented, der(&new_cert));
    assert_eq!(tls.reloads(), 1);

    // A half-written renewal (certificate new, key still the previous one) does not load:
    // the server keeps presenting the certificate it has.
    let (next_cert, next_key) = issue(dir, 2024, 2099);
    replace(&cert_path, &next_cert);
    let (_, presented) = connect(dir, port).await.expect("the previous certificate");
    assert_eq!(presented, der(&new_cert));
    assert_eq!(tls.reloads(), 1);

    // Its key arrives: the pair loads.
    replace(&key_path, &next_key);
    let (_, presented) = connect(dir, port).await.expect("the completed renewal");
    assert_eq!(presented, der(&next_cert));
    assert_eq!(tls.reloads(), 2);

    // The connection opened before the last two renewals still works.
    kept.write_all(b"y").await.unwrap();
    let mut b = [0u8; 1];
    kept.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"y");
}
