//! `fleetbench-agent --config agent.toml`: serve until SIGTERM or Ctrl-C, then stop the engine.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fleetbench_agent::AgentConfig;

#[derive(Debug, Parser)]
#[command(
    name = "fleetbench-agent",
    version,
    about = "The fleetbench agent: runs and measures the inference engine on this GPU host"
)]
struct Args {
    /// The agent's TOML configuration (FLEETBENCH_AGENT__… variables override its fields).
    #[arg(
        long,
        short,
        env = "FLEETBENCH_AGENT_CONFIG",
        default_value = "/etc/fleetbench/agent.toml"
    )]
    config: PathBuf,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Checked before anything else, so a bad file never binds a port.
    let config = match AgentConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!(
            "{}: ok ({} profiles)",
            args.config.display(),
            config.profiles.len()
        );
        return ExitCode::SUCCESS;
    }
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
    runtime.block_on(async move {
        let _telemetry = match fleetbench_support::telemetry::init(
            fleetbench_support::telemetry::TelemetryConfig {
                service_name: "fleetbench-agent".into(),
                ..Default::default()
            },
        ) {
            Ok(g) => Some(g),
            Err(e) => {
                eprintln!("warning: telemetry: {e}");
                None
            }
        };
        // Installed before the agent starts: a stop sent while it starts is an orderly one.
        let stop = match fleetbench_support::signal::stop_signal() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: cannot watch SIGTERM and SIGINT: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut agent = match fleetbench_agent::start(config).await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        // Scripts and tests read the bound address (the port may have been 0) from this line.
        println!("fleetbench-agent listening on {}", agent.addr);
        let code = tokio::select! {
            signal = stop => {
                tracing::info!(signal = signal.name(), "stop requested");
                ExitCode::SUCCESS
            }
            r = agent.stopped() => {
                eprintln!("error: server stopped: {}", r.err().unwrap_or_default());
                return ExitCode::FAILURE;
            }
        };
        tracing::info!("shutting down: stopping the engine");
        agent.shutdown().await;
        code
    })
}
