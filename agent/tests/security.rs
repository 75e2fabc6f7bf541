//! Who gets an answer and what may run: mTLS, refused programs/flags/values, and the
//! plaintext-only-on-loopback rule.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::{self, agent_client::AgentClient};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

async fn call_get_host(
    tls: ClientTlsConfig,
    addr: std::net::SocketAddr,
) -> Result<agentpb::HostFacts, String> {
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    AgentClient::new(channel)
        .get_host(agentpb::GetHostRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|s| format!("{s}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_clients_with_a_certificate_from_the_ca_get_an_answer() {
    let agent = Agent::start("").unwrap();
    let ca = std::fs::read(&agent.certs.ca_cert).unwrap();

    // The controller's certificate: answered.
    let good = fleetbench_support::tls::client_tls(
        &agent.certs.ca_cert,
        &agent.certs.controller_cert,
        &agent.certs.controller_key,
        "localhost",
    )
    .unwrap();
    let host = call_get_host(good, agent.addr)
        .await
        .expect("valid client answered");
    assert!(!host.hostname.is_empty());

    // No client certificate at all.
    let anonymous = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca))
        .domain_name("localhost");
    assert!(
        call_get_host(anonymous, agent.addr).await.is_err(),
        "a client without a certificate was answered"
    );

    // A certificate from another CA.
    let other = tempfile::tempdir().unwrap();
    let foreign = fleetbench_support::tls::generate_dev_certs(other.path(), &[], false).unwrap();
    let wrong = fleetbench_support::tls::client_tls(
        &agent.certs.ca_cert,
        &foreign.controller_cert,
        &foreign.controller_key,
        "localhost",
    )
    .unwrap();
    assert!(
        call_get_host(wrong, agent.addr).await.is_err(),
        "a client with a foreign certificate was answered"
    );

    // Plaintext: refused too.
    let plain = Endpoint::from_shared(format!("http://{}", agent.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    let answered = match plain.connect().await {
        Ok(ch) => AgentClient::new(ch)
            .get_host(agentpb::GetHostRequest {})
            .await
            .is_ok(),
        Err(_) => false,
    };
    assert!(!answered, "a plaintext client was answered");

    // The standard health service answers the right client.
    let good = fleetbench_support::tls::client_tls(
        &agent.certs.ca_cert,
        &agent.certs.controller_cert,
        &agent.certs.controller_key,
        "localhost",
    )
    .unwrap();
    let ch = Endpoint::from_shared(format!("https://{}", agent.addr))
        .unwrap()
        .tls_config(good)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let resp = tonic_health::pb::health_client::HealthClient::new(ch)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "fleetbench.agent.v1.Agent".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disallowed_program_flag_value_and_env_are_refused_and_nothing_starts() {
    let agent = Agent::start("").unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();

    let refuse = |spec: agentpb::EngineSpec| {
        let mut c = c.clone();
        async move {
            match c
                .apply_engine(agentpb::ApplyEngineRequest {
                    spec: Some(spec),
                    run_id: String::new(),
                    ..Default::default()
                })
                .await
            {
                Ok(_) => panic!("accepted"),
                Err(s) => s,
            }
        }
    };
    // A program no profile offers.
    let s = refuse(spec("/bin/sh", "m", port, &[])).await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains("/bin/sh"), "{}", s.message());
    // A flag the profile does not allow.
    let s = refuse(spec("sim", "m", port, &[("--evil-flag", Some("1"))])).await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains("--evil-flag"), "{}", s.message());
    // An allowed flag with a value of the wrong type.
    let s = refuse(spec(
        "sim",
        "m",
        port,
        &[("--max-running-requests", Some("lots"))],
    ))
    .await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(
        s.message().contains("--max-running-requests") && s.message().contains("lots"),
        "{}",
        s.message()
    );
    // A flag the agent sets itself.
    let s = refuse(spec("sim", "m", port, &[("--port", Some("1"))])).await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains("--port"), "{}", s.message());
    // A value that would smuggle in another flag.
    let s = refuse(spec("sim", "--help", port, &[])).await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    // An environment variable the profile does not let callers set.
    let mut sp = spec("sim", "m", port, &[]);
    sp.env.insert("LD_PRELOAD".into(), "/tmp/x.so".into());
    let s = refuse(sp).await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains("LD_PRELOAD"), "{}", s.message());
    // A run id that is not a file name.
    let s = match c
        .apply_engine(agentpb::ApplyEngineRequest {
            spec: Some(spec("sim", "m", port, &[])),
            run_id: "../../etc/x".into(),
            ..Default::default()
        })
        .await
    {
        Ok(_) => panic!("accepted"),
        Err(s) => s,
    };
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains("run_id"));

    // Nothing started: idle, no run log, no engine listening.
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
    assert_eq!(st.pid, 0);
    let runs = std::fs::read_dir(agent.data_dir().join("runs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(runs, 0);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(
        processes().iter().all(|p| p.2 != agent.pid() as i32),
        "the agent has a child"
    );
}

#[test]
fn insecure_on_a_non_loopback_address_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"0.0.0.0:0\"\ninsecure = true\ndata_dir = {:?}\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-agent"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("insecure") && stderr.contains("loopback"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));
    // Nothing was created: the check happens before any side effect.
    assert!(!dir.path().join("data").exists());

    // A bad field elsewhere is named too.
    std::fs::write(&cfg, "listen = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"/tmp/x\"\n[profiles.bad]\nkind = \"sim\"\ngrace_s = -1\n").unwrap();
    let out = std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-agent"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("profiles.bad"), "{stderr}");
}
