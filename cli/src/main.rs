//! `fleetbench`: the one command users type.
//!
//! Each subcommand lives in its own module under `cmd/`, with its clap `Args` and an async
//! `run` that returns the process exit code. Fatal errors exit non-zero with the error chain.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod report;

#[derive(Debug, Parser)]
#[command(
    name = "fleetbench",
    version,
    about = "Tune and regression-test LLM inference servers across a GPU fleet"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit a job spec and watch it (embedded controller and local agent unless --controller).
    Run(cmd::run::Args),
    /// Run the load generator against an OpenAI-compatible server.
    Bench(Box<cmd::bench::Args>),
    /// List the controller's agents.
    Agents(cmd::agents::Args),
    /// List jobs.
    Jobs(cmd::jobs::Args),
    /// Follow a job's events.
    Watch(cmd::watch::Args),
    /// Compare configs of one or more jobs: winner per load level, crossovers, crashes.
    Compare(cmd::compare::Args),
    /// Effective server args and log facts of two engine runs, only what differs.
    Diff(cmd::diff::Args),
    /// Write results.json, results.csv and report.html for a job.
    Report(cmd::report::Args),
    /// Measure GPU peer-to-peer bandwidth and latency on this host.
    #[command(name = "probe-p2p")]
    ProbeP2p(cmd::probe_p2p::Args),
    /// Run a regression suite and compare with its baseline.
    Regress(cmd::regress::Args),
    /// Search engine flags for the best config under an SLO ([search] spec).
    Tune(cmd::tune::Args),
    /// Certificates for mTLS between controller and agents.
    Certs(cmd::certs::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warnings only on the terminal (unless RUST_LOG says otherwise), so progress bars stay readable; spans of an embedded
    // controller and agent are exported when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let _telemetry =
        match fleetbench_support::telemetry::init(fleetbench_support::telemetry::TelemetryConfig {
            service_name: "fleetbench".into(),
            // The run's own output already reports engine crashes, classified: the in-process
            // agent's warning about them would only repeat it.
            log_filter: Some(
                std::env::var("RUST_LOG")
                    .unwrap_or_else(|_| "warn,fleetbench_agent::supervisor=error".into()),
            ),
            ..Default::default()
        }) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("error: telemetry: {e}");
                return ExitCode::FAILURE;
            }
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run(a) => cmd::run::run(a).await,
            Command::Bench(a) => cmd::bench::run(*a).await,
            Command::Agents(a) => cmd::agents::run(a).await,
            Command::Jobs(a) => cmd::jobs::run(a).await,
            Command::Watch(a) => cmd::watch::run(a).await,
            Command::Compare(a) => cmd::compare::run(a).await,
            Command::Diff(a) => cmd::diff::run(a).await,
            Command::Report(a) => cmd::report::run(a).await,
            Command::ProbeP2p(a) => cmd::probe_p2p::run(a).await,
            Command::Regress(a) => cmd::regress::run(a).await,
            Command::Tune(a) => cmd::tune::run(a).await,
            Command::Certs(a) => cmd::certs::run(a).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
