//! mTLS on both sides: the API, served with the controller's server certificate from
//! `fleetbench certs init`, refuses clients without a certificate from its CA and answers the
//! CLI with the operator's; a client-only certificate cannot serve it; and the controller
//! reaches an agent that only speaks mTLS.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_controller::{ControllerConfig, HostConfig, metrics::Metrics};
use fleetbench_proto::controllerpb::{
    JobState, ListJobsRequest, SubmitJobRequest, controller_client::ControllerClient,
};
use fleetbench_support::tls::{ClientTlsFiles, ServerTlsFiles};
use fleetbench_support::tls::{client_tls, generate_dev_certs};
use rustls::pki_types::pem::PemObject;
use tonic::transport::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_api_and_mtls_agent() {
    let dir = tempfile::tempdir().unwrap();
    let certs = generate_dev_certs(&dir.path().join("certs"), &[], false).unwrap();
    let agent = spawn_agent_with(
        dir.path(),
        "secure",
        fleetbench_testkit::free_port(),
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }}\n",
            certs.agent_cert.display(),
            certs.agent_key.display(),
            certs.ca_cert.display()
        ),
    );
    let mut cfg =
        ControllerConfig::local(&format!("sqlite://{}", dir.path().join("c.db").display()));
    cfg.heartbeat_interval = Duration::from_millis(300);
    cfg.hosts = vec![HostConfig {
        name: "secure".into(),
        address: agent.addr.to_string(),
        labels: Default::default(),
    }];
    cfg.agent_tls = Some(ClientTlsFiles {
        ca: certs.ca_cert.clone(),
        cert: certs.controller_cert.clone(),
        key: certs.controller_key.clone(),
        domain: Some("localhost".into()),
    });
    // The controller's own API certificate (serverAuth; localhost, 127.0.0.1).
    cfg.api.tls = Some(ServerTlsFiles {
        cert: certs.controller_server.cert.clone(),
        key: certs.controller_server.key.clone(),
        client_ca: certs.ca_cert.clone(),
    });
    let ctl = fleetbench_controller::start(cfg, Metrics::new())
        .await
        .unwrap();

    // Plain HTTP/2 gets nowhere.
    let plain = ControllerClient::connect(format!("http://{}", ctl.addr)).await;
    if let Ok(mut c) = plain {
        assert!(
            c.list_jobs(ListJobsRequest {
                limit: 0,
                ..Default::default()
            })
            .await
            .is_err()
        );
    }
    // TLS without a client certificate is refused in the handshake.
    let no_cert = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(&certs.ca_cert).unwrap(),
        ))
        .domain_name("localhost");
    let refused = async {
        let ch = Endpoint::from_shared(format!("https://{}", ctl.addr))
            .unwrap()
            .tls_config(no_cert)
            .unwrap()
            .connect()
            .await?;
        ControllerClient::new(ch)
            .list_jobs(ListJobsRequest {
                limit: 0,
                ..Default::default()
            })
            .await
            .map_err(|e| -> Box<dyn std::error::Error> { Box::new(e) })?;
        Ok::<_, Box<dyn std::error::Error>>(())
    }
    .await;
    assert!(
        refused.is_err(),
        "a client without a certificate got through"
    );

    // With the controller's client certificate: a job runs on the mTLS agent.
    let tls = client_tls(
        &certs.ca_cert,
        &certs.controller_cert,
        &certs.controller_key,
        "localhost",
    )
    .unwrap();
    let ch = Endpoint::from_shared(format!("https://{}", ctl.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = ControllerClient::new(ch);
    let spec =
        sim_spec("tls", 1, &["secure"]).replace("concurrency = [1, 2, 4, 8]", "concurrency = [1]");
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec,
            file_name: "tls.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // Mid-job, the agent's certificate is renewed on disk (same CA, a new key), as cert-manager
    // or `fleetbench certs issue --force` does: the job goes on, no level is lost, and the
    // agent presents the new certificate to the next connection without a restart.
    let renewed = fleetbench_support::tls::issue_agent_certs(
        &dir.path().join("certs"),
        &[("secure".into(), Some("localhost:7443".into()))],
        true,
    )
    .unwrap();
    let (new_cert, new_key) = (&renewed[0].files.cert, &renewed[0].files.key);
    for (from, to) in [(new_key, &certs.agent_key), (new_cert, &certs.agent_cert)] {
        let tmp = to.with_extension("new");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
    let job = wait_job(&mut c, &r.job_id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!(job.levels_done, 2);
    assert_eq!(
        presented_cert(&certs, agent.addr).await,
        rustls::pki_types::CertificateDer::from_pem_file(new_cert)
            .unwrap()
            .as_ref()
            .to_vec(),
        "the agent still presents the certificate it started with"
    );

    // The CLI, a separate process, completes the handshake as the operator and lists the job.
    let cli = |cert: &std::path::Path, key: &std::path::Path| {
        std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
            .args(["jobs", "--controller", &format!("https://{}", ctl.addr)])
            .arg("--tls-ca")
            .arg(&certs.ca_cert)
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .output()
            .unwrap()
    };
    let out = cli(&certs.operator.cert, &certs.operator.key);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&r.job_id),
        "fleetbench jobs over mTLS: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ctl.shutdown().await;
}

/// The certificate a server at `addr` presents to a new connection of the controller's.
async fn presented_cert(
    certs: &fleetbench_support::tls::DevCerts,
    addr: std::net::SocketAddr,
) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&certs.ca_cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<_> = CertificateDer::pem_file_iter(&certs.controller_cert)
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(&certs.controller_key).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let s = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    s.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec()
}

/// The controller served with its client-only certificate (as the shipped manifests once did):
/// the CLI refuses it in the handshake, naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_only_certificate_cannot_serve_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let certs = generate_dev_certs(&dir.path().join("certs"), &[], false).unwrap();
    let mut cfg =
        ControllerConfig::local(&format!("sqlite://{}", dir.path().join("c.db").display()));
    cfg.api.tls = Some(ServerTlsFiles {
        cert: certs.controller_cert.clone(),
        key: certs.controller_key.clone(),
        client_ca: certs.ca_cert.clone(),
    });
    let ctl = fleetbench_controller::start(cfg, Metrics::new())
        .await
        .unwrap();
    let out = std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
        .args(["jobs", "--controller", &format!("https://{}", ctl.addr)])
        .arg("--tls-ca")
        .arg(&certs.ca_cert)
        .arg("--tls-cert")
        .arg(&certs.operator.cert)
        .arg("--tls-key")
        .arg(&certs.operator.key)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a client-only certificate served the API"
    );
    assert!(
        stderr.contains("cannot reach the controller")
            && stderr.contains("extended key usage for server authentication"),
        "the CLI says why: {stderr}"
    );
    ctl.shutdown().await;
}
