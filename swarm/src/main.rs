//! `fleetbench-swarm`: N stand-in agents in one process, registering with a controller.
//!
//! Prints `fleetbench-swarm listening on ADDR` (the first agent's address) once every agent's
//! port is bound, then one `agent NAME ADDR` line per agent, then `ready`.

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use fleetbench_swarm::{Fleet, FleetConfig, Timing};

#[derive(Debug, Parser)]
#[command(
    name = "fleetbench-swarm",
    about = "Stand-in agents (real agent.v1 gRPC servers, no engines) for scale tests"
)]
struct Args {
    /// How many stand-in agents.
    #[arg(long, default_value_t = 100)]
    agents: usize,
    /// Name prefix: agents are PREFIX-0000, PREFIX-0001, ...
    #[arg(long, default_value = "standin")]
    prefix: String,
    /// Controller to register with (http://HOST:PORT); none: only serve.
    #[arg(long)]
    controller: Option<String>,
    /// Bearer token for RegisterAgent (a scoped `agent` token), or FLEETBENCH_TOKEN.
    #[arg(long, env = "FLEETBENCH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Engine start-up time of ApplyEngine (a spec's --startup-delay-s wins).
    #[arg(long, default_value = "2s", value_parser = humantime_duration)]
    apply_time: Duration,
    /// Time an engine takes to stop.
    #[arg(long, default_value = "200ms", value_parser = humantime_duration)]
    stop_time: Duration,
    /// Extra label KEY=VALUE (repeatable); `standin=true` is always set.
    #[arg(long = "label", value_parser = label)]
    labels: Vec<(String, String)>,
    /// Each agent on its own loopback address 127.0.x.y (default: all on 127.0.0.1).
    #[arg(long)]
    distinct_addresses: bool,
    /// Answer `WatchEngine` with UNIMPLEMENTED, as agents older than the heartbeat stream
    /// (the controller then polls `GetEngine`).
    #[arg(long)]
    without_watch_engine: bool,
    /// Tokio worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration such as 2s: {e}"))
}

fn label(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if args.agents == 0 {
        anyhow::bail!("--agents: must be at least 1");
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(t) = args.threads {
        rt.worker_threads(t.max(1));
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(async move {
        // Installed before the stand-ins start, so that a stop sent as soon as they are ready
        // is an orderly one.
        let stop = fleetbench_support::signal::stop_signal()?;
        let mut labels = args.labels.clone();
        labels.retain(|(k, _)| k != "standin");
        labels.push(("standin".into(), "true".into()));
        let fleet = Fleet::start(FleetConfig {
            agents: args.agents,
            prefix: args.prefix.clone(),
            labels,
            timing: Timing {
                apply: args.apply_time,
                stop: args.stop_time,
            },
            distinct_addresses: args.distinct_addresses,
            controller: args.controller.clone(),
            token: args.token.clone(),
            without_watch_engine: args.without_watch_engine,
        })
        .await?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "fleetbench-swarm listening on {}", fleet.agents[0].1)?;
            for (name, addr) in &fleet.agents {
                writeln!(out, "agent {name} {addr}")?;
            }
            writeln!(out, "ready")?;
            out.flush()?;
        }
        stop.await;
        fleet.shutdown().await;
        Ok(())
    })
}
