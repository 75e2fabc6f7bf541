//! Issue 13, the controller side: one valid credential of the wrong role gets nothing. A real
//! controller on loopback serves its API over mTLS with certificates from the same code
//! `fleetbench certs` runs; each refusal is asserted with its message, and that nothing was
//! stored. Issue 22: a valid operator's spec whose fields are each in range but whose level
//! would exhaust an agent is refused by validation, naming the budget.

use std::time::Duration;

use fleetbench_controller::{ControllerConfig, ControllerHandle, HostConfig, metrics::Metrics};
use fleetbench_proto::controllerpb::{self as pb, controller_client::ControllerClient};
use fleetbench_support::tls::ServerTlsFiles;
use fleetbench_support::tls::{DevCerts, client_tls, generate_dev_certs, issue_agent_certs};
use tonic::transport::{Channel, Endpoint};

struct Fleet {
    _dir: tempfile::TempDir,
    certs: DevCerts,
    ctl: ControllerHandle,
}

/// A controller with mTLS on its API and one configured host, `gpu-1` at 127.0.0.1:1.
async fn fleet() -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let certs_dir = dir.path().join("certs");
    let certs = generate_dev_certs(&certs_dir, &[], false).unwrap();
    let mut cfg =
        ControllerConfig::local(&format!("sqlite://{}", dir.path().join("c.db").display()));
    cfg.heartbeat_interval = Duration::from_secs(30);
    cfg.hosts = vec![HostConfig {
        name: "gpu-1".into(),
        address: "127.0.0.1:1".into(),
        labels: Default::default(),
    }];
    cfg.api.tls = Some(ServerTlsFiles {
        cert: certs.controller_server.cert.clone(),
        key: certs.controller_server.key.clone(),
        client_ca: certs.ca_cert.clone(),
    });
    let ctl = fleetbench_controller::start(cfg, Metrics::new())
        .await
        .unwrap();
    Fleet {
        _dir: dir,
        certs,
        ctl,
    }
}

async fn client(
    f: &Fleet,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> ControllerClient<Channel> {
    let tls = client_tls(&f.certs.ca_cert, cert, key, "localhost").unwrap();
    let ch = Endpoint::from_shared(format!("https://{}", f.ctl.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    ControllerClient::new(ch)
}

fn denied<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>, words: &[&str]) {
    let s = r.expect_err("accepted");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{}", s.message());
    for w in words {
        assert!(s.message().contains(w), "{w:?} not in {:?}", s.message());
    }
}

async fn agents(c: &mut ControllerClient<Channel>) -> Vec<(String, String)> {
    c.list_agents(pb::ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents
        .into_iter()
        .map(|a| (a.name, a.address))
        .collect()
}

fn register(name: &str, address: &str) -> pb::RegisterAgentRequest {
    pb::RegisterAgentRequest {
        name: name.into(),
        address: address.into(),
        labels: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_certificate_cannot_register_an_agent() {
    let f = fleet().await;
    let (cert, key) = (&f.certs.operator.cert, &f.certs.operator.key);
    let mut op = client(&f, cert, key).await;
    denied(
        op.register_agent(register("evil", "10.0.0.66:7443")).await,
        &[
            "RegisterAgent needs the role agent or admin",
            "(operator) is a operator",
        ],
    );
    // Nothing stored: the inventory is the configured host only.
    assert_eq!(
        agents(&mut op).await,
        vec![("gpu-1".into(), "127.0.0.1:1".into())]
    );
    f.ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_registers_only_its_own_name_and_cannot_take_over_a_configured_host() {
    let f = fleet().await;
    let certs_dir = f.certs.ca_cert.parent().unwrap();
    let issued = issue_agent_certs(
        certs_dir,
        &[
            ("gpu-1".into(), Some("127.0.0.1:1".into())),
            ("gpu-2".into(), Some("127.0.0.1:2".into())),
        ],
        false,
    )
    .unwrap();
    let gpu2 = &issued[1].files;
    let mut a2 = client(&f, &gpu2.cert, &gpu2.key).await;
    // gpu-2's key claims another name.
    denied(
        a2.register_agent(register("gpu-3", "127.0.0.1:7443")).await,
        &["certificate of agent \"gpu-2\" may register only that name, not \"gpu-3\""],
    );
    // gpu-1's own key cannot move the configured gpu-1 either.
    let gpu1 = &issued[0].files;
    let mut a1 = client(&f, &gpu1.cert, &gpu1.key).await;
    denied(
        a1.register_agent(register("gpu-1", "127.0.0.1:7443")).await,
        &["host \"gpu-1\" is configured in the controller's config"],
    );
    // Its own name at an address its certificate does not name (another agent's): refused,
    // else the controller would run gpu-2's jobs on whatever listens there.
    denied(
        a2.register_agent(register("gpu-2", "10.0.0.66:7443")).await,
        &["host \"10.0.0.66\" is not among the names in agent \"gpu-2\"'s certificate"],
    );
    // Unbounded labels and names are refused by field.
    let mut many = register("gpu-2", "127.0.0.1:2");
    many.labels = (0..40).map(|i| (format!("k{i}"), "v".into())).collect();
    let s = a2.register_agent(many).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    assert!(
        s.message().contains("labels: 40 labels, at most 32"),
        "{s:?}"
    );
    let s = a2
        .register_agent(register(&"g".repeat(200), "127.0.0.1:2"))
        .await
        .unwrap_err();
    assert!(
        s.message().contains("name: 200 bytes, at most 128"),
        "{s:?}"
    );
    // Its own name at its own address: accepted.
    a2.register_agent(register("gpu-2", "127.0.0.1:2"))
        .await
        .unwrap();
    let mut viewer = client(&f, &f.certs.viewer.cert, &f.certs.viewer.key).await;
    let mut seen = agents(&mut viewer).await;
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("gpu-1".into(), "127.0.0.1:1".into()),
            ("gpu-2".into(), "127.0.0.1:2".into())
        ]
    );
    f.ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_cannot_cancel_submit_or_record_a_baseline() {
    let f = fleet().await;
    let mut v = client(&f, &f.certs.viewer.cert, &f.certs.viewer.key).await;
    denied(
        v.cancel_job(pb::CancelJobRequest {
            job_id: "any".into(),
        })
        .await,
        &["CancelJob needs the role operator or admin", "is a viewer"],
    );
    denied(
        v.submit_job(pb::SubmitJobRequest::default()).await,
        &["SubmitJob needs the role operator or admin"],
    );
    // The baseline needs an admin: an operator is refused too.
    let mut op = client(&f, &f.certs.operator.cert, &f.certs.operator.key).await;
    // An operator's tag and file name are bounded.
    let s = op
        .submit_job(pb::SubmitJobRequest {
            tag: "t".repeat(129),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("tag: 129 bytes, at most 128"), "{s:?}");
    let s = op
        .submit_job(pb::SubmitJobRequest {
            file_name: "a\nb.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        s.message().contains("file_name: holds a control character"),
        "{s:?}"
    );
    denied(
        op.record_suite_run(pb::RecordSuiteRunRequest {
            run: Some(pb::SuiteRun {
                job_id: "j".into(),
                suite: "s".into(),
                passed: true,
                ..Default::default()
            }),
        })
        .await,
        &["RecordSuiteRun needs the role admin", "is a operator"],
    );
    // Nothing stored; a viewer still reads.
    let jobs = v
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(jobs.jobs.is_empty(), "{jobs:?}");
    let runs = v
        .list_suite_runs(pb::ListSuiteRunsRequest {
            suite: "s".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(runs.runs.is_empty());
    f.ctl.shutdown().await;
}

#[test]
fn a_token_over_plaintext_off_loopback_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("controller.toml");
    for api in [
        "[api]\ntoken = \"s3cret-s3cret-s3cret\"\n",
        "[[api.tokens]]\nrole = \"viewer\"\ntoken = \"viewer-token-0123456789\"\n",
    ] {
        std::fs::write(
            &path,
            format!(
                "listen = \"0.0.0.0:7070\"\nstore_url = \"sqlite://{}\"\n{api}",
                dir.path().join("c.db").display()
            ),
        )
        .unwrap();
        let e = ControllerConfig::load(Some(&path)).unwrap_err().to_string();
        assert!(
            e.contains("a bearer token is never accepted over plaintext off loopback"),
            "{e}"
        );
        // Nothing was created.
        assert!(!dir.path().join("c.db").exists());
    }
}

/// `GET /metrics` over HTTPS to `addr`, trusting `ca`, with an optional client certificate and
/// bearer token: `(status, body)`, or the handshake's error.
async fn scrape(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    cert: Option<(&std::path::Path, &std::path::Path)>,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    scrape_path(addr, ca, cert, token, "/metrics").await
}

async fn scrape_path(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    cert: Option<(&std::path::Path, &std::path::Path)>,
    token: Option<&str>,
    path: &str,
) -> Result<(u16, String), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match cert {
        Some((c, k)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(c)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(k).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n{auth}connection: close\r\n\r\n");
    tls.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    // A close without close_notify still leaves the whole response read.
    let _ = tls.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no HTTP response: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// `/metrics` for viewers only, over HTTPS: a viewer's certificate or token reads it; no
/// credentials, an agent's certificate or token, a wrong token, and a foreign CA's certificate
/// read nothing, each with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_only_viewers_operators_and_admins() {
    use fleetbench_controller::config::{MetricsAuth, MetricsConfig};
    let dir = tempfile::tempdir().unwrap();
    let certs = generate_dev_certs(&dir.path().join("certs"), &[], false).unwrap();
    let mut cfg =
        ControllerConfig::local(&format!("sqlite://{}", dir.path().join("c.db").display()));
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let server = ServerTlsFiles {
        cert: certs.controller_server.cert.clone(),
        key: certs.controller_server.key.clone(),
        client_ca: certs.ca_cert.clone(),
    };
    cfg.api.tls = Some(server.clone());
    cfg.metrics = MetricsConfig {
        auth: MetricsAuth::Viewer,
        tls: Some(server),
        unauthenticated_off_loopback: false,
    };
    let (viewer_token, agent_token) = ("viewer-token-0123456789", "agent-token-0123456789");
    cfg.scoped_tokens = vec![
        (
            viewer_token.into(),
            fleetbench_controller::authz::ApiRole::Viewer,
        ),
        (
            agent_token.into(),
            fleetbench_controller::authz::ApiRole::Agent,
        ),
    ];
    let metrics = Metrics::new();
    metrics.job_submitted("sweep");
    let ctl = fleetbench_controller::start(cfg, metrics).await.unwrap();
    let addr = ctl.metrics_addr.expect("metrics served");
    let ca = &certs.ca_cert;

    for (who, cert, token) in [
        (
            "viewer certificate",
            Some((&certs.viewer.cert, &certs.viewer.key)),
            None,
        ),
        (
            "operator certificate",
            Some((&certs.operator.cert, &certs.operator.key)),
            None,
        ),
        ("viewer token", None, Some(viewer_token)),
    ] {
        let (status, body) = scrape(
            addr,
            ca,
            cert.map(|(c, k)| (c.as_path(), k.as_path())),
            token,
        )
        .await
        .unwrap();
        assert_eq!(status, 200, "{who}: {body}");
        assert!(body.contains("fleetbench_jobs_submitted"), "{who}: {body}");
    }
    for (who, cert, token, want, words) in [
        (
            "no credentials",
            None,
            None,
            401,
            "needs the role viewer, operator or admin",
        ),
        (
            "agent certificate",
            Some((&certs.agent_cert, &certs.agent_key)),
            None,
            403,
            "role agent",
        ),
        (
            "agent token",
            None,
            Some(agent_token),
            403,
            "this token is a agent",
        ),
        (
            "wrong token",
            None,
            Some("not-a-token-0123456789"),
            401,
            "does not match",
        ),
    ] {
        let (status, body) = scrape(
            addr,
            ca,
            cert.map(|(c, k)| (c.as_path(), k.as_path())),
            token,
        )
        .await
        .unwrap();
        assert_eq!(status, want, "{who}: {body}");
        assert!(body.contains(words), "{who}: {words:?} not in {body:?}");
        assert!(!body.contains("fleetbench_jobs"), "{who} read series");
    }
    // Liveness answers anyone, and says nothing else.
    let (status, body) = scrape_path(addr, ca, None, None, "/healthz").await.unwrap();
    assert_eq!((status, body.trim()), (200, "ok"));
    // A certificate from another CA fails the handshake; plain HTTP gets no answer.
    let other = generate_dev_certs(&dir.path().join("other"), &[], false).unwrap();
    let r = scrape(
        addr,
        ca,
        Some((&other.viewer.cert, &other.viewer.key)),
        None,
    )
    .await;
    assert!(
        !matches!(r, Ok((200, _))),
        "foreign CA read /metrics: {r:?}"
    );
    let plain = plain_get(addr).await;
    assert!(!plain.starts_with("HTTP/1.1 200"), "{plain}");
    ctl.shutdown().await;
}

/// A plaintext `GET /metrics` to `addr`: whatever comes back before the server closes.
async fn plain_get(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).to_string()
}

/// Issue 22: specs whose every field is in range but whose product would exhaust an agent (the
/// memory of the prompt pool, or days of engine work) are refused by validation with the budget
/// and the fields named, whether submitted or dry-run; no job is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_range_specs_over_the_level_budget_are_refused_and_nothing_is_stored() {
    let f = fleet().await;
    let mut op = client(&f, &f.certs.operator.cert, &f.certs.operator.key).await;
    let spec = |workload: &str, load: &str| {
        format!(
            "name = \"bomb\"\n[[configs]]\nname = \"a\"\nengine = \"sim\"\nmodel = \"m\"\n\n\
             [[workloads]]\nname = \"w\"\n{workload}\n\n[load]\nconcurrency = [64]\n{load}\n"
        )
    };
    let cases = [
        (
            spec(
                "dataset = \"random\"\ninput_len = 1048576\noutput_len = 128",
                "requests = 1000000\nwarmup = 100000",
            ),
            "workloads[0].input_len",
            vec![
                "16.8 TiB of agent memory",
                "load.requests 1000000 + load.warmup 100000",
                "memory budget of 4.0 GiB",
            ],
        ),
        (
            spec(
                "dataset = \"shared-prefix\"\ngroups = 1000\nprompts_per_group = 100\n\
                 prefix_len = 524288\nsuffix_len = 524288\noutput_len = 16",
                "requests = 100000",
            ),
            "workloads[0].suffix_len",
            vec![
                "workloads[0].prefix_len + suffix_len 1048576",
                "memory budget of 4.0 GiB",
            ],
        ),
        (
            spec(
                "dataset = \"random\"\ninput_len = 1\noutput_len = 1048576",
                "requests = 1000000",
            ),
            "workloads[0].input_len",
            vec![
                "time budget of 604800000000 tokens",
                "workloads[0].output_len 1048576",
            ],
        ),
    ];
    for (toml, field, words) in cases {
        for dry_run in [true, false] {
            let resp = op
                .submit_job(pb::SubmitJobRequest {
                    spec_toml: toml.clone(),
                    file_name: "bomb.toml".into(),
                    dry_run,
                    tag: String::new(),
                    kind: pb::JobKind::Sweep as i32,
                })
                .await
                .unwrap()
                .into_inner();
            assert!(resp.job_id.is_empty(), "a job was created: {resp:?}");
            let e = resp
                .errors
                .iter()
                .find(|e| e.field == field)
                .unwrap_or_else(|| panic!("no error on {field}: {:?}", resp.errors));
            for w in &words {
                assert!(e.message.contains(w), "{w:?} not in {:?}", e.message);
            }
        }
    }
    let jobs = op
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(jobs.jobs.is_empty(), "{jobs:?}");
    f.ctl.shutdown().await;
}
