//! `fleetbench-controller`: the long-running controller. Bad configuration exits non-zero
//! before anything binds.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fleetbench_controller::{ControllerConfig, metrics::Metrics};

#[derive(Debug, Parser)]
#[command(
    name = "fleetbench-controller",
    version,
    about = "fleetbench controller: inventory, scheduler, store, API"
)]
struct Args {
    /// TOML config file; `FLEETBENCH_CONTROLLER__…` variables override it.
    #[arg(long, short, env = "FLEETBENCH_CONTROLLER_CONFIG")]
    config: Option<PathBuf>,
    /// Validate the config and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match ControllerConfig::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("config ok");
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
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: ControllerConfig) -> anyhow::Result<()> {
    let _telemetry =
        fleetbench_support::telemetry::init(fleetbench_support::telemetry::TelemetryConfig {
            service_name: "fleetbench-controller".into(),
            otlp_endpoint: config.otlp_endpoint.clone(),
            ..Default::default()
        })?;
    let metrics = if _telemetry.exports_metrics() {
        Metrics::new()
    } else {
        Metrics::prometheus_only()
    };
    // Installed before the controller starts: a stop sent while it starts is an orderly one.
    let stop = fleetbench_support::signal::stop_signal()?;
    let handle = fleetbench_controller::start(config, metrics).await?;
    // Tests and scripts read the bound address from this line.
    println!("fleetbench-controller listening on {}", handle.addr);
    if let Some(m) = handle.metrics_addr {
        println!("fleetbench-controller metrics on http://{m}/metrics");
    }
    let signal = stop.await;
    tracing::info!(signal = signal.name(), "shutting down");
    handle.shutdown().await;
    Ok(())
}
