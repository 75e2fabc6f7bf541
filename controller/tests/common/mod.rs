//! Real processes for the controller's end-to-end tests: agents, the controller, a client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetbench_testkit::process;

use fleetbench_proto::controllerpb::{
    GetJobRequest, Job, JobState, controller_client::ControllerClient,
};
use tonic::transport::Channel;

/// A server process, stopped (SIGTERM, then SIGKILL) when dropped.
pub type Proc = fleetbench_testkit::process::Listening;

/// A loopback agent whose sim engine listens on `sim_port`.
pub fn spawn_agent(dir: &Path, name: &str, sim_port: u16) -> Proc {
    spawn_agent_with(dir, name, sim_port, "insecure = true")
}

/// As [`spawn_agent`], with `security` (`insecure = true`, or a `tls = {…}` line) in its config.
pub fn spawn_agent_with(dir: &Path, name: &str, sim_port: u16, security: &str) -> Proc {
    let config = process::sim_agent_config(name, &dir.join(name), sim_port, security);
    spawn_agent_toml(dir, name, &config)
}

/// An agent with this whole config file (its data directory is `dir/name`).
pub fn spawn_agent_toml(dir: &Path, name: &str, toml: &str) -> Proc {
    process::agent(dir, name, toml).spawn()
}

/// Writes a controller config with these agents and a SQLite store in `dir`.
pub fn controller_config(dir: &Path, listen: &str, agents: &[&Proc]) -> PathBuf {
    let mut text = format!(
        "listen = \"{listen}\"\nstore_url = \"sqlite://{}\"\nheartbeat_interval = \"500ms\"\n\
         host_wait = \"60s\"\n",
        dir.join("controller.db").display()
    );
    for a in agents {
        text.push_str(&format!(
            "[[hosts]]\nname = \"{}\"\naddress = \"{}\"\n",
            a.name, a.addr
        ));
    }
    let path = dir.join("controller.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn spawn_controller(config: &Path, log: &Path) -> Proc {
    process::Launch::new("fleetbench-controller", log)
        .name("controller")
        .args([Path::new("--config"), config])
        .spawn()
}

pub async fn client(addr: SocketAddr) -> ControllerClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ControllerClient::connect(format!("http://{addr}")).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("controller at {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Polls until the job ends (or panics after `timeout`).
pub async fn wait_job(client: &mut ControllerClient<Channel>, id: &str, timeout: Duration) -> Job {
    let deadline = Instant::now() + timeout;
    loop {
        let job = client
            .get_job(GetJobRequest { job_id: id.into() })
            .await
            .expect("GetJob")
            .into_inner();
        if job.state != JobState::Queued as i32 && job.state != JobState::Running as i32 {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} still running after {timeout:?}: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A two-config sim spec whose levels take about a second each (fixed-latency sim).
pub fn sim_spec(name: &str, repeats: u32, host_names: &[&str]) -> String {
    let names = host_names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"name = "{name}"
repeats = {repeats}

[hosts]
names = [{names}]

[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = {{ "--ttft-ms" = 20, "--itl-ms" = 10 }}

[[configs]]
name = "B"
extends = "A"
flags = {{ "--itl-ms" = 12 }}

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2, 4, 8]
requests = 12
"#
    )
}
