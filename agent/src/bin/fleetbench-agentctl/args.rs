//! Command-line arguments of `fleetbench-agentctl`, and the requests they turn into.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use fleetbench_proto::agentpb;

#[derive(Debug, Parser)]
#[command(
    name = "fleetbench-agentctl",
    version,
    about = "Operator's client for one fleetbench agent"
)]
pub struct Cli {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Connection {
    /// The agent: https://host:port (mutual TLS), or http://127.0.0.1:port for an agent
    /// started with `insecure = true` on loopback.
    #[arg(
        long,
        env = "FLEETBENCH_AGENT",
        global = true,
        default_value = "http://127.0.0.1:7443"
    )]
    pub agent: String,
    /// CA certificate the agent's certificate must chain to (PEM).
    #[arg(long, env = "FLEETBENCH_CA", global = true)]
    pub ca: Option<PathBuf>,
    /// Our client certificate (PEM), signed by the CA the agent trusts.
    #[arg(long, env = "FLEETBENCH_CERT", global = true)]
    pub cert: Option<PathBuf>,
    /// Our client key (PEM).
    #[arg(long, env = "FLEETBENCH_KEY", global = true)]
    pub key: Option<PathBuf>,
    /// Name the agent's certificate must carry; default: the host of --agent.
    #[arg(long, global = true)]
    pub domain: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Host facts: CPUs, memory, GPUs, engine profiles.
    Host {
        #[arg(long)]
        json: bool,
    },
    /// Stop what runs and start an engine; prints the lifecycle events until ready or failed
    /// (exit status 1 when it failed).
    Apply(ApplyArgs),
    /// Stop the engine and wait until its processes are gone. Refused while a job holds the
    /// engine's lease, unless --take-lease.
    Stop {
        #[command(flatten)]
        lease: TakeLease,
        #[arg(long)]
        json: bool,
    },
    /// The engine's state, facts and last crash. With --watch: printed again on every change
    /// of the engine or its lease (the agent's `WatchEngine` stream) until interrupted.
    Engine {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        watch: bool,
    },
    /// The engine's log.
    Logs {
        /// Keep printing new lines.
        #[arg(long)]
        follow: bool,
        /// Lines from the agent's ring buffer to print first.
        #[arg(long, default_value_t = 100)]
        tail: u32,
        #[arg(long)]
        json: bool,
    },
    /// GPU, engine and process metrics, one line per sample.
    Metrics(MetricsArgs),
    /// A random-prompt benchmark at one or more concurrencies; prints each level's result
    /// (exit status 1 when a level failed or crashed).
    Bench(BenchArgs),
    /// GPU peer-to-peer status, topology and measured bandwidth/latency.
    #[command(name = "probe-p2p")]
    ProbeP2p(P2pArgs),
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Engine profile in the agent's configuration.
    #[arg(long)]
    pub profile: String,
    /// Model path or name, as the profile's program takes it (none for a router).
    #[arg(long, default_value = "")]
    pub model: String,
    /// A router's worker: a replica's base URL (`http://host:port`), one the profile's
    /// `allowed_workers` lists. Repeatable.
    #[arg(long = "worker", value_name = "URL")]
    pub workers: Vec<String>,
    /// The engine the workers run, so that their metrics are read right (sglang, vllm,
    /// llamacpp, sim, generic).
    #[arg(long, default_value = "generic")]
    pub workers_kind: String,
    /// A flag for the engine: NAME or NAME=VALUE (`--flag --tp-size=2`,
    /// `--flag --disable-cuda-graph`). Repeatable.
    #[arg(long = "flag", value_name = "NAME[=VALUE]", allow_hyphen_values = true)]
    pub flags: Vec<String>,
    /// Environment for the engine: K=V. Repeatable.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Port for the engine; 0: the profile's.
    #[arg(long, default_value_t = 0)]
    pub port: u32,
    /// Identity of this run (names its log file); the agent makes one when empty.
    #[arg(long, default_value = "")]
    pub run_id: String,
    #[command(flatten)]
    pub lease: TakeLease,
    /// One JSON object per event.
    #[arg(long)]
    pub json: bool,
}

/// An operator's override of a job's lease on the engine.
#[derive(Debug, Args)]
pub struct TakeLease {
    /// Take the engine's lease from whoever holds it (a job's trial is then fenced off: its
    /// next call to the agent is refused, and the controller re-runs the interrupted level).
    /// The lease is released again when the command is done; `apply` leaves its engine
    /// running, unleased.
    #[arg(long)]
    pub take_lease: bool,
    /// Why the lease is taken: shown to the fenced job and in the agent's log.
    #[arg(long, default_value = "", requires = "take_lease")]
    pub lease_reason: String,
}

impl ApplyArgs {
    pub fn request(&self) -> Result<agentpb::ApplyEngineRequest> {
        let flags = self
            .flags
            .iter()
            .map(|f| parse_flag(f))
            .collect::<Result<Vec<_>>>()?;
        let mut env = HashMap::new();
        for kv in &self.env {
            let Some((k, v)) = kv.split_once('=') else {
                bail!("--env {kv:?}: expected K=V");
            };
            if k.is_empty() {
                bail!("--env {kv:?}: the variable name is empty");
            }
            env.insert(k.to_string(), v.to_string());
        }
        let workers_kind = match self.workers_kind.parse::<fleetbench_engines::EngineKind>() {
            Ok(k) => fleetbench_agent::convert::kind_to_proto(k),
            Err(e) => bail!("--workers-kind: {e}"),
        };
        Ok(agentpb::ApplyEngineRequest {
            spec: Some(agentpb::EngineSpec {
                profile: self.profile.clone(),
                model: self.model.clone(),
                flags,
                env,
                port: self.port,
                gang: None,
                workers: self.workers.clone(),
                workers_kind: workers_kind as i32,
            }),
            run_id: self.run_id.clone(),
            lease_epoch: 0,
        })
    }
}

/// `--name=value` -> (`--name`, `value`); `--name` -> a switch.
fn parse_flag(f: &str) -> Result<agentpb::Flag> {
    let (name, value) = match f.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (f, None),
    };
    if !name.starts_with('-') || name.trim_start_matches('-').is_empty() {
        bail!("--flag {f:?}: the name must start with '-' (e.g. --flag --tp-size=2)");
    }
    Ok(agentpb::Flag {
        name: name.to_string(),
        value,
    })
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Sampling interval (100 ms at least).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(100..))]
    pub interval_ms: u32,
    /// Stop after this many samples.
    #[arg(long)]
    pub count: Option<u64>,
    /// Also print every raw series of the engine's /metrics.
    #[arg(long)]
    pub raw: bool,
    /// One JSON object per sample.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Api {
    Chat,
    Completions,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Closed-loop concurrencies, one level each (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub concurrency: Vec<u32>,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 128)]
    pub input_len: u32,
    /// Output length in tokens.
    #[arg(long, default_value_t = 128)]
    pub output_len: u32,
    /// Lengths drawn from [len * (1 - r), len].
    #[arg(long, default_value_t = 0.0)]
    pub range_ratio: f64,
    /// Requests per level (unless --duration-s).
    #[arg(long, default_value_t = 64)]
    pub num_requests: u32,
    /// Seconds per level instead of a request count.
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Requests sent before each level's measurement.
    #[arg(long, default_value_t = 0)]
    pub warmup: u32,
    #[arg(long, value_enum, default_value_t = Api::Chat)]
    pub api: Api,
    /// Model name sent in requests; empty: the first of /v1/models.
    #[arg(long, default_value = "")]
    pub model: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Let the engine stop at end-of-sequence (default: generate exactly --output-len).
    #[arg(long)]
    pub allow_eos: bool,
    /// One JSON object per event.
    #[arg(long)]
    pub json: bool,
}

impl BenchArgs {
    pub fn request(&self) -> Result<agentpb::RunBenchmarkRequest> {
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            bail!("--concurrency: give one or more concurrencies >= 1");
        }
        if !(0.0..=1.0).contains(&self.range_ratio) {
            bail!("--range-ratio {}: expected 0..1", self.range_ratio);
        }
        let bound = match self.duration_s {
            Some(d) if d > 0.0 => agentpb::run_benchmark_request::Bound::DurationS(d),
            Some(d) => bail!("--duration-s {d}: expected a positive number"),
            None if self.num_requests == 0 => bail!("--num-requests: expected >= 1"),
            None => agentpb::run_benchmark_request::Bound::NumRequests(self.num_requests),
        };
        Ok(agentpb::RunBenchmarkRequest {
            workload: Some(agentpb::Workload {
                name: "agentctl-random".into(),
                dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                    input_len: self.input_len,
                    output_len: self.output_len,
                    range_ratio: self.range_ratio,
                })),
                api: match self.api {
                    Api::Chat => agentpb::ApiKind::Chat,
                    Api::Completions => agentpb::ApiKind::Completions,
                } as i32,
                model: self.model.clone(),
                ignore_eos: !self.allow_eos,
                seed: self.seed,
            }),
            levels: self
                .concurrency
                .iter()
                .map(|&c| agentpb::LoadLevel {
                    concurrency: Some(c),
                    request_rate: None,
                    burstiness: 1.0,
                })
                .collect(),
            warmup_requests: self.warmup,
            bound: Some(bound),
            percentiles: vec![50.0, 90.0, 99.0],
            slo: None,
            run_id: String::new(),
            skip_levels: Vec::new(),
            ..Default::default()
        })
    }
}

#[derive(Debug, Args)]
pub struct P2pArgs {
    /// Buffer size per copy in MiB; 0: the agent's default (153 MiB).
    #[arg(long, default_value_t = 0)]
    pub buffer_mib: u64,
    /// Repeats per measurement; 0: the agent's default.
    #[arg(long, default_value_t = 0)]
    pub repeats: u32,
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_as_name_and_optional_value() {
        let f = parse_flag("--tp-size=2").unwrap();
        assert_eq!(
            (f.name.as_str(), f.value.as_deref()),
            ("--tp-size", Some("2"))
        );
        let f = parse_flag("--disable-cuda-graph").unwrap();
        assert_eq!(f.value, None);
        let f = parse_flag("--fault=hang-after-requests=5").unwrap();
        assert_eq!(f.value.as_deref(), Some("hang-after-requests=5"));
        assert!(parse_flag("tp-size=2").is_err());
    }

    #[test]
    fn cli_takes_hyphenated_flag_values() {
        let cli = Cli::try_parse_from([
            "fleetbench-agentctl",
            "--agent",
            "http://127.0.0.1:1",
            "apply",
            "--profile",
            "sim",
            "--model",
            "m",
            "--flag",
            "--max-running-requests=64",
            "--flag",
            "--disable-cuda-graph",
            "--env",
            "A=b=c",
        ])
        .unwrap();
        let Command::Apply(a) = cli.command else {
            panic!("not apply")
        };
        let r = a.request().unwrap();
        let spec = r.spec.unwrap();
        assert_eq!(spec.flags.len(), 2);
        assert_eq!(spec.env["A"], "b=c");
    }

    #[test]
    fn bench_rejects_zero_concurrency() {
        let cli = Cli::try_parse_from(["x", "bench", "--concurrency", "1,0"]).unwrap();
        let Command::Bench(b) = cli.command else {
            panic!("not bench")
        };
        assert!(
            b.request()
                .unwrap_err()
                .to_string()
                .contains("--concurrency")
        );
    }
}
