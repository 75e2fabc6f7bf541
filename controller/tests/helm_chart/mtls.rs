//! The chart's own configs, run: an agent registers and a job runs over mTLS.

use super::*;

/// The chart's two configs, as rendered, run by the real binaries with certificates laid out as
/// cert-manager's Secrets (`tls.crt`, `tls.key`, `ca.crt`) carrying the names and usages the
/// chart's Certificates ask for: the agent registers with the controller over mTLS (no token),
/// the controller dials it back under the shared name `fleetbench-agent`, and a job runs on it
/// with the operator's certificate. Only what a cluster provides is substituted: file paths,
/// loopback addresses for the Service and the pod IP, and the Service's DNS name as the TLS name.
#[test]
fn the_charts_configs_register_an_agent_and_run_a_job_over_mtls() {
    use fleetbench_support::tls::{InitOptions, init_certs};
    use fleetbench_testkit::process::Launch;

    let objs = objects(&render("{}").unwrap());
    let agent_toml = s(&objs["ConfigMap"]["fleetbench-agent"]["data"]["agent.toml"]).to_string();
    let ctl_toml =
        s(&objs["ConfigMap"]["fleetbench-controller"]["data"]["controller.toml"]).to_string();
    let svc_host = "fleetbench-controller.fleetbench.svc";
    assert!(agent_toml.contains(&format!("https://{svc_host}:7070")));

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let certs = init_certs(
        &d.join("issued"),
        &InitOptions {
            agent_names: vec!["fleetbench-agent".into()],
            controller_names: vec![svc_host.into()],
            ..Default::default()
        },
    )
    .unwrap();
    // One directory per Secret, as the pods mount them.
    for (secret, cert, key) in [
        (
            "server",
            &certs.controller_server.cert,
            &certs.controller_server.key,
        ),
        ("client", &certs.controller_cert, &certs.controller_key),
        ("agent", &certs.agent_cert, &certs.agent_key),
    ] {
        let m = d.join("tls").join(secret);
        std::fs::create_dir_all(&m).unwrap();
        std::fs::copy(cert, m.join("tls.crt")).unwrap();
        std::fs::copy(key, m.join("tls.key")).unwrap();
        std::fs::copy(&certs.ca_cert, m.join("ca.crt")).unwrap();
    }
    let (ctl_port, metrics_port, agent_port) = (
        fleetbench_testkit::free_port(),
        fleetbench_testkit::free_port(),
        fleetbench_testkit::free_port(),
    );
    let tls_dir = format!("{}/", d.join("tls").display());
    let ctl_cfg = ctl_toml
        .replace("/etc/fleetbench/tls/", &tls_dir)
        .replace("0.0.0.0:7070", &format!("127.0.0.1:{ctl_port}"))
        .replace("0.0.0.0:9464", &format!("127.0.0.1:{metrics_port}"));
    let agent_cfg = agent_toml
        .replace("/etc/fleetbench/tls/", &tls_dir)
        .replace(
            "/var/lib/fleetbench-agent",
            &d.join("data").display().to_string(),
        )
        .replace("0.0.0.0:7443", &format!("127.0.0.1:{agent_port}"))
        .replace(
            &format!("https://{svc_host}:7070"),
            &format!("https://127.0.0.1:{ctl_port}"),
        )
        .replace(
            "key = \"/etc/fleetbench/tls/agent/tls.key\" }",
            &format!("key = \"{tls_dir}agent/tls.key\", domain = \"{svc_host}\" }}"),
        )
        .replace(
            &format!("key = \"{tls_dir}agent/tls.key\" }}"),
            &format!("key = \"{tls_dir}agent/tls.key\", domain = \"{svc_host}\" }}"),
        );
    assert!(
        agent_cfg.contains(&format!("domain = \"{svc_host}\"")),
        "{agent_cfg}"
    );
    std::fs::write(d.join("controller.toml"), &ctl_cfg).unwrap();
    std::fs::write(d.join("agent.toml"), &agent_cfg).unwrap();

    let _ctl = Launch::new("fleetbench-controller", d.join("controller.log"))
        .args(["--config".as_ref(), d.join("controller.toml").as_os_str()])
        .env(
            "FLEETBENCH_CONTROLLER__STORE_URL",
            format!("sqlite://{}", d.join("c.db").display()),
        )
        .spawn();
    // The DaemonSet's environment: the node's name, the pod IP as the address to dial back.
    let _agent = Launch::new("fleetbench-agent", d.join("agent.log"))
        .args(["--config".as_ref(), d.join("agent.toml").as_os_str()])
        .env("FLEETBENCH_AGENT__NAME", "gpu-node-1")
        .env(
            "FLEETBENCH_AGENT__CONTROLLER__ADVERTISE",
            format!("127.0.0.1:{agent_port}"),
        )
        .spawn();

    let cli = |args: &[&str]| {
        Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
            .args(args)
            .args(["--controller", &format!("https://127.0.0.1:{ctl_port}")])
            .arg("--tls-ca")
            .arg(&certs.ca_cert)
            .arg("--tls-cert")
            .arg(&certs.operator.cert)
            .arg("--tls-key")
            .arg(&certs.operator.key)
            .current_dir(d)
            .output()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = cli(&["agents"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && text.contains("gpu-node-1") && text.contains("ready") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not register and become ready: {text}{}\ncontroller: {}\nagent: {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(d.join("controller.log")).unwrap_or_default(),
            std::fs::read_to_string(d.join("agent.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    std::fs::write(
        d.join("job.toml"),
        "name = \"chart-wiring\"\n[[configs]]\nname = \"sim\"\nengine = \"sim\"\nmodel = \"sim-model\"\n\
         flags = { \"--ttft-ms\" = 5, \"--itl-ms\" = 2 }\n[[workloads]]\nname = \"w\"\ndataset = \"random\"\n\
         input_len = 16\noutput_len = 8\n[load]\nconcurrency = [1, 2]\nrequests = 8\n",
    )
    .unwrap();
    let out = cli(&["run", "job.toml"]);
    assert!(
        out.status.success(),
        "fleetbench run over the chart's mTLS: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
