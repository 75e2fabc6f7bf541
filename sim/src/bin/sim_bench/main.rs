//! `fleetbench-sim-bench`: figures about the simulator itself.
//!
//! - `fleetbench-sim-bench stream [--seconds S] [--concurrency 64,512] [--tokens 256]`: streamed
//!   tokens per second the simulator serves in instant fixed-latency mode, pinned to one CPU (the
//!   last one) with a raw client pinned to another, per-token and coalesced writes, and the
//!   simulator's CPU time per 1,000 tokens.
//! - `fleetbench-sim-bench story [--time-scale F] [--requests-per-level N]`: the quickstart A/B
//!   sweep (triton vs flashinfer_cutlass with a crash above batch 384) measured against the real
//!   binary in model mode, next to the model's predictions.
//!
//! - `fleetbench-sim-bench noise [--repeats N] [--concurrency C] [--time-scale F]`: output
//!   tokens/s of one config over N runs with different seeds, with and without `--slowdown 1.1`:
//!   run-to-run spread against a 10% regression.
//!
//! - `fleetbench-sim-bench predict [--concurrency 1,8] [--input-len I] [--output-len O]
//!   [--requests N] [--e2e-slo-ms X] -- SIM FLAGS…`: the model's predictions for those flags
//!   (no server started), and with `--e2e-slo-ms` the knee under that p99 E2E budget.
//!
//! - `fleetbench-sim-bench latency [--concurrency 1,64,512] [--seconds S]`: fixed-latency mode
//!   (50 ms / 5 ms) measured by the raw client: TTFT and ITL p50/p99 minus the injected values,
//!   the error the simulator (plus this client) adds.
//!
//! The simulator binary is found next to this one.

mod client;
mod commands;
mod server;

use commands::{latency_main, noise_main, predict_main, story_main, stream_main};

pub(crate) fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.first().map(String::as_str) {
        Some("stream") => stream_main(&args, &rt),
        Some("story") => story_main(&args, &rt),
        Some("noise") => noise_main(&args, &rt),
        Some("predict") => predict_main(&args),
        Some("latency") => latency_main(&args, &rt),
        _ => {
            eprintln!("usage: fleetbench-sim-bench stream|story|noise|predict|latency [options]");
            std::process::exit(2);
        }
    }
}
