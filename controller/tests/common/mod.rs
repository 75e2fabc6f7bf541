//! Real processes for the controller's end-to-end tests: agents, the controller, a client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleetbench_proto::controllerpb::{
    GetJobRequest, Job, JobState, controller_client::ControllerClient,
};
use tonic::transport::Channel;

/// A child process killed (SIGKILL) when dropped.
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    pub name: String,
}

impl Proc {
    /// SIGKILL, as a crash or a power cut would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait (a clean stop: the agent stops its engine).
    pub fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// Starts a binary and waits for its "… listening on ADDR" line; the rest of its stdout and
/// its stderr go to `log`.
fn spawn_listening(bin: &str, args: &[&str], log: &Path, name: &str) -> Proc {
    let err = std::fs::File::create(log).expect("log file");
    let mut child = Command::new(fleetbench_testkit::workspace_bin(bin))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut sent = false;
        while let Some(Ok(line)) = lines.next() {
            if !sent && let Some(a) = line.split(" listening on ").nth(1) {
                let _ = tx.send(a.trim().to_string());
                sent = true;
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            panic!(
                "{bin} did not report its address; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    Proc {
        child,
        addr: addr.parse().expect("socket address"),
        name: name.to_string(),
    }
}

/// A loopback agent whose sim engine listens on `sim_port`.
pub fn spawn_agent(dir: &Path, name: &str, sim_port: u16) -> Proc {
    spawn_agent_with(dir, name, sim_port, "insecure = true\n")
}

/// As [`spawn_agent`], with `security` (`insecure = true`, or a `tls = {…}` line) in its config.
pub fn spawn_agent_with(dir: &Path, name: &str, sim_port: u16, security: &str) -> Proc {
    let data = dir.join(name);
    spawn_agent_toml(
        dir,
        name,
        &format!(
            "name = \"{name}\"\nlisten = \"127.0.0.1:0\"\n{security}data_dir = \"{}\"\n\
             [profiles.sim]\nkind = \"sim\"\nport = {sim_port}\n",
            data.display()
        ),
    )
}

/// An agent with this whole config file (its data directory is `dir/name`).
pub fn spawn_agent_toml(dir: &Path, name: &str, toml: &str) -> Proc {
    let data = dir.join(name);
    std::fs::create_dir_all(&data).unwrap();
    let cfg = data.join("agent.toml");
    std::fs::write(&cfg, toml).unwrap();
    spawn_listening(
        "fleetbench-agent",
        &["--config", cfg.to_str().unwrap()],
        &data.join("agent.log"),
        name,
    )
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
    spawn_listening(
        "fleetbench-controller",
        &["--config", config.to_str().unwrap()],
        log,
        "controller",
    )
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
