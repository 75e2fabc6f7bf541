//! Real processes for the controller's end-to-end tests: agents, the controller, a client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetbench_testkit::process;

use fleetbench_proto::controllerpb::{
    GetJobRequest, Job, JobEvent, JobState, SubmitJobRequest, SubmitJobResponse, WatchJobRequest,
    controller_client::ControllerClient, job_event,
};
use tonic::transport::Channel;

pub mod engine_ab;
pub mod netns;
pub mod spawned;

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
    let store = format!("sqlite://{}", dir.join("controller.db").display());
    write_controller_config(&dir.join("controller.toml"), listen, &store, "", agents)
}

/// Writes a controller config to `path`: `listen`, `store_url`, heartbeats every 500 ms, the
/// `extra` top-level lines, and these agents as `[[hosts]]`.
pub fn write_controller_config(
    path: &Path,
    listen: &str,
    store_url: &str,
    extra: &str,
    agents: &[&Proc],
) -> PathBuf {
    let mut text = format!(
        "listen = \"{listen}\"\nstore_url = \"{store_url}\"\nheartbeat_interval = \"500ms\"\n\
         host_wait = \"60s\"\n{extra}"
    );
    for a in agents {
        text.push_str(&format!(
            "[[hosts]]\nname = \"{}\"\naddress = \"{}\"\n",
            a.name, a.addr
        ));
    }
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Agents named `names` in `dir`, each with its own sim port.
pub fn spawn_agents(dir: &Path, names: &[&str]) -> Vec<Proc> {
    names
        .iter()
        .map(|n| spawn_agent(dir, n, fleetbench_testkit::free_port()))
        .collect()
}

/// Plaintext loopback agents named `names` in `dir` with no engine profile, whose `[external]`
/// section allows `origin`: drivers of an endpoint fleetbench does not own.
pub fn spawn_external_agents(dir: &Path, names: &[&str], origin: &str) -> Vec<Proc> {
    names
        .iter()
        .map(|n| {
            let toml = format!(
                "name = \"{n}\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"{}\"\n\
                 [external]\norigins = [\"{origin}\"]\n",
                dir.join(n).display()
            );
            process::agent(dir, n, &toml).spawn()
        })
        .collect()
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
        if JobState::is_final_value(job.state) {
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

pub type Client = ControllerClient<Channel>;
pub type Events = tonic::Streaming<JobEvent>;

/// Submits `spec` (it must be accepted) and returns the job's id.
pub async fn submit(client: &mut Client, spec: String, file_name: &str) -> String {
    accepted(client, spec, file_name).await.job_id
}

/// Submits `spec` as `job.toml` (it must be accepted) and returns the job's id.
pub async fn submit_toml(client: &mut Client, spec: &str) -> String {
    submit(client, spec.to_string(), "job.toml").await
}

/// Submits `spec` (it must be accepted and expand to `trials` trials); returns the job's id.
pub async fn submit_trials(
    client: &mut Client,
    spec: String,
    file_name: &str,
    trials: u32,
) -> String {
    let resp = accepted(client, spec, file_name).await;
    assert_eq!(resp.trial_count, trials, "trials of {file_name}");
    resp.job_id
}

async fn accepted(client: &mut Client, spec: String, file_name: &str) -> SubmitJobResponse {
    let resp = client
        .submit_job(SubmitJobRequest {
            spec_toml: spec,
            file_name: file_name.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.errors.is_empty(), "{file_name}: {:?}", resp.errors);
    resp
}

/// The job's event stream (its stored events first, then live ones).
pub async fn watch(client: &mut Client, job_id: &str) -> Events {
    client
        .watch_job(WatchJobRequest {
            job_id: job_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// The next event of a running job (panics after two minutes without one, or at its end).
pub async fn next_event(events: &mut Events) -> JobEvent {
    tokio::time::timeout(Duration::from_secs(120), events.message())
        .await
        .expect("job events keep coming")
        .unwrap()
        .expect("job still running")
}

/// Reads events until `n` levels are stored: (trial id, level index) → the run that stored it.
pub async fn stored_levels(
    events: &mut Events,
    n: usize,
) -> std::collections::BTreeMap<(String, u32), String> {
    let mut out = std::collections::BTreeMap::new();
    while out.len() < n {
        if let Some(job_event::Event::Level(l)) = next_event(events).await.event {
            out.insert((l.trial_id, l.result.unwrap().level_index), l.run_id);
        }
    }
    out
}

/// A PostgreSQL database of a test's own on `FLEETBENCH_TEST_POSTGRES_URL` (scripts/test.sh
/// starts the server and sets it), so the migrations run from nothing and runs never collide.
pub struct TestDatabase {
    pub url: String,
    base: String,
    name: String,
}

impl TestDatabase {
    pub async fn create(tag: &str) -> TestDatabase {
        let base = std::env::var("FLEETBENCH_TEST_POSTGRES_URL").expect(
            "FLEETBENCH_TEST_POSTGRES_URL is not set: this test needs PostgreSQL \
             (scripts/test.sh starts one and sets it)",
        );
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("fleetbench_{tag}_{}_{nanos}", std::process::id());
        let admin = fleetbench_controller::store::Store::open(&base)
            .await
            .expect("the test PostgreSQL");
        admin
            .execute_raw(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        admin.close().await;
        let (prefix, _) = base.rsplit_once('/').expect("the URL names a database");
        TestDatabase {
            url: format!("{prefix}/{name}"),
            base,
            name,
        }
    }

    /// Drops the database (its connections are closed by force).
    pub async fn remove(self) {
        let admin = fleetbench_controller::store::Store::open(&self.base)
            .await
            .expect("the test PostgreSQL");
        admin
            .execute_raw(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .unwrap();
        admin.close().await;
    }
}

/// An in-process controller's config: a SQLite store in `dir`, heartbeats every 300 ms, these
/// agents as its hosts.
pub fn local_config(dir: &Path, agents: &[&Proc]) -> fleetbench_controller::ControllerConfig {
    let db = format!("sqlite://{}", dir.join("controller.db").display());
    let mut cfg = config_with_hosts(&db, agents);
    cfg.heartbeat_interval = Duration::from_millis(300);
    cfg
}

/// A controller's config on the store at `store_url` with these agents as its hosts, the rest
/// as `ControllerConfig::local` sets it.
pub fn config_with_hosts(
    store_url: &str,
    agents: &[&Proc],
) -> fleetbench_controller::ControllerConfig {
    let mut cfg = fleetbench_controller::ControllerConfig::local(store_url);
    cfg.hosts = agents
        .iter()
        .map(|a| fleetbench_controller::HostConfig {
            name: a.name.clone(),
            address: a.addr.to_string(),
            labels: Default::default(),
        })
        .collect();
    cfg
}

/// A controller's config on a SQLite store in `dir` with these agents as its hosts.
pub fn sqlite_config(dir: &Path, agents: &[&Proc]) -> fleetbench_controller::ControllerConfig {
    config_with_hosts(
        &format!("sqlite://{}", dir.join("controller.db").display()),
        agents,
    )
}

/// Starts a controller in this process.
pub async fn start_local(
    cfg: fleetbench_controller::ControllerConfig,
) -> fleetbench_controller::ControllerHandle {
    fleetbench_controller::start(cfg, fleetbench_controller::metrics::Metrics::new())
        .await
        .unwrap()
}
