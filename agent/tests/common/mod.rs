//! Shared by the agent's integration tests: a real `fleetbench-agent` process on an ephemeral
//! loopback port with development certificates, and an mTLS client for it.
#![allow(dead_code)]

pub mod truth;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fleetbench_proto::agentpb::{self, agent_client::AgentClient, engine_event::Event};
use fleetbench_support::tls::{DevCerts, client_tls, generate_dev_certs};
use fleetbench_testkit::process::{Launch, Listening};
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};

/// A real agent process with TLS from fresh development certificates.
pub struct Agent {
    pub process: Listening,
    pub addr: std::net::SocketAddr,
    pub dir: tempfile::TempDir,
    pub certs: DevCerts,
}

impl Agent {
    /// Starts an agent with TLS from fresh dev certificates; `extra` (top-level keys first, then
    /// tables) goes into its config before the `[tls]` table.
    pub fn start(extra: &str) -> Result<Agent> {
        Self::start_with_env(extra, &[])
    }

    /// As [`start`](Self::start), with these variables in the agent's environment.
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Result<Agent> {
        let dir = tempfile::tempdir()?;
        let certs = generate_dev_certs(&dir.path().join("certs"), &[], false)?;
        let config = format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {data:?}\nrelease_timeout_s = 20\ndataset_roots = [{root:?}]\n{extra}\n\n[profiles.sim]\nkind = \"sim\"\n{models}\n\n[tls]\ncert = {cert:?}\nkey = {key:?}\nclient_ca = {ca:?}\n",
            data = dir.path().join("data"),
            root = dir.path(),
            cert = certs.agent_cert,
            key = certs.agent_key,
            ca = certs.ca_cert,
            models = fleetbench_testkit::process::SIM_MODELS,
        );
        let cfg_path = dir.path().join("agent.toml");
        std::fs::write(&cfg_path, config)?;
        let mut launch = Launch::new("fleetbench-agent", dir.path().join("agent.log"))
            .args([Path::new("--config"), &cfg_path])
            .env("RUST_LOG", "info");
        for (k, v) in env {
            launch = launch.env(k, v);
        }
        let process = launch.spawn();
        Ok(Agent {
            addr: process.addr,
            process,
            dir,
            certs,
        })
    }

    /// Starts the agent again on the same config and data directory (after the test killed
    /// it); its log goes to `agent-relaunched.log`.
    pub fn relaunch(&mut self) {
        self.process = Launch::new(
            "fleetbench-agent",
            self.dir.path().join("agent-relaunched.log"),
        )
        .args([Path::new("--config"), &self.dir.path().join("agent.toml")])
        .env("RUST_LOG", "info")
        .spawn();
        self.addr = self.process.addr;
    }

    /// As [`relaunch`](Self::relaunch), through `wrapper` (see `Launch::through`).
    pub fn relaunch_through(&mut self, wrapper: &[&str]) {
        self.process = Launch::new(
            "fleetbench-agent",
            self.dir.path().join("agent-relaunched.log"),
        )
        .args([Path::new("--config"), &self.dir.path().join("agent.toml")])
        .env("RUST_LOG", "info")
        .through(wrapper)
        .spawn();
        self.addr = self.process.addr;
    }

    /// Runs the agent binary on this agent's config to its end (it is expected not to start):
    /// its exit status, its stderr and whether it printed its `listening on` line.
    pub fn run_to_exit(&self, within: Duration) -> (std::process::ExitStatus, String, bool) {
        let mut child =
            std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-agent"))
                .arg("--config")
                .arg(self.dir.path().join("agent.toml"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn fleetbench-agent");
        let deadline = Instant::now() + within;
        loop {
            if let Some(_status) = child.try_wait().expect("wait") {
                let out = child.wait_with_output().expect("output");
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                return (
                    out.status,
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                    stdout.contains("listening on"),
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "the agent was still running after {within:?}; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pid(&self) -> u32 {
        self.process.child.id()
    }

    pub async fn client(&self) -> Result<AgentClient<Channel>> {
        let tls = client_tls(
            &self.certs.ca_cert,
            &self.certs.controller_cert,
            &self.certs.controller_key,
            "localhost",
        )?;
        let channel = Endpoint::from_shared(format!("https://{}", self.addr))?
            .tls_config(tls)?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        Ok(AgentClient::new(channel).max_decoding_message_size(64 << 20))
    }

    /// SIGTERM and wait for a clean exit; returns whether it exited within the limit (SIGKILL
    /// otherwise).
    pub fn terminate(&mut self, within: Duration) -> bool {
        self.process.terminate_within(within)
    }

    pub fn log_text(&self) -> String {
        self.process.log_text()
    }
}

pub fn spec(
    profile: &str,
    model: &str,
    port: u16,
    flags: &[(&str, Option<&str>)],
) -> agentpb::EngineSpec {
    agentpb::EngineSpec {
        profile: profile.into(),
        model: model.into(),
        flags: flags
            .iter()
            .map(|(n, v)| agentpb::Flag {
                name: n.to_string(),
                value: v.map(String::from),
            })
            .collect(),
        env: Default::default(),
        port: u32::from(port),
        gang: None,
        ..Default::default()
    }
}

/// Applies `spec` and collects its lifecycle events until the stream ends.
pub async fn apply(
    client: &mut AgentClient<Channel>,
    spec: agentpb::EngineSpec,
    within: Duration,
) -> Result<Vec<Event>> {
    let mut stream = client
        .apply_engine(agentpb::ApplyEngineRequest {
            spec: Some(spec),
            run_id: String::new(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut events = Vec::new();
    let collect = async {
        while let Some(e) = stream.next().await {
            events.push(e?.event.context("empty event")?);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(within, collect)
        .await
        .context("apply stream did not end")??;
    Ok(events)
}

/// Applies the `sim` profile (model `sim-model`) on `port` with `flags`; its events.
pub async fn apply_sim(
    client: &mut AgentClient<Channel>,
    port: u16,
    flags: &[(&str, Option<&str>)],
) -> Vec<Event> {
    apply(
        client,
        spec("sim", "sim-model", port, flags),
        Duration::from_secs(60),
    )
    .await
    .expect("apply the simulated engine")
}

/// A metrics stream with the engine's series (mapped and raw) and its processes' figures.
pub async fn engine_metrics(
    client: &mut AgentClient<Channel>,
    interval_ms: u32,
    gpu: bool,
) -> tonic::Streaming<agentpb::MetricsSample> {
    client
        .stream_metrics(agentpb::StreamMetricsRequest {
            interval_ms,
            gpu,
            engine: true,
            process: true,
            engine_raw: true,
        })
        .await
        .expect("metrics stream")
        .into_inner()
}

pub fn ready(events: &[Event]) -> Option<&agentpb::Ready> {
    events.iter().find_map(|e| match e {
        Event::Ready(r) => Some(r),
        _ => None,
    })
}

pub fn spawned(events: &[Event]) -> Option<&agentpb::Spawned> {
    events.iter().find_map(|e| match e {
        Event::Spawned(s) => Some(s),
        _ => None,
    })
}

/// `(pid, pgrp, ppid, state)` of every process on the host.
pub fn processes() -> Vec<(i32, i32, i32, char)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let state = f[0].chars().next().unwrap_or('?');
        let ppid = f[1].parse().unwrap_or(0);
        let pgrp = f[2].parse().unwrap_or(0);
        v.push((pid, pgrp, ppid, state));
    }
    v
}

/// Live (non-zombie) processes in process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|p| p.1 == pgid && p.3 != 'Z')
        .map(|p| p.0)
        .collect()
}

pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|c| !s[c + 1..].trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Waits until `cond` holds, polling.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn random_workload(input: u32, output: u32) -> agentpb::Workload {
    agentpb::Workload {
        name: "random".into(),
        dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
            input_len: input,
            output_len: output,
            range_ratio: 0.0,
        })),
        api: agentpb::ApiKind::Completions as i32,
        model: String::new(),
        ignore_eos: true,
        seed: 1,
    }
}

pub fn closed(c: u32) -> agentpb::LoadLevel {
    agentpb::LoadLevel {
        concurrency: Some(c),
        request_rate: None,
        burstiness: 1.0,
    }
}

/// Runs a benchmark and collects its events until the stream ends.
pub async fn bench(
    client: &mut AgentClient<Channel>,
    req: agentpb::RunBenchmarkRequest,
    within: Duration,
) -> Result<(Vec<agentpb::BenchmarkProgress>, Vec<agentpb::LevelResult>)> {
    use agentpb::benchmark_event::Event as B;
    let mut stream = client.run_benchmark(req).await?.into_inner();
    let (mut progress, mut levels) = (Vec::new(), Vec::new());
    let collect = async {
        while let Some(e) = stream.next().await {
            match e?.event {
                Some(B::Progress(p)) => progress.push(p),
                Some(B::Level(l)) => levels.push(l),
                None => {}
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(within, collect)
        .await
        .context("benchmark stream did not end")??;
    Ok((progress, levels))
}

pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("FLEETBENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| fleetbench_testkit::repo_root().join(".venv"));
    venv.join("bin").join("python3")
}

pub fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).expect("write");
    path.to_path_buf()
}
