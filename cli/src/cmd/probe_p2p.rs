//! `fleetbench probe-p2p`: GPU peer-to-peer status, topology and measured bandwidth/latency of
//! this host, as a table or (`--json`) as a JSON document.

use std::process::ExitCode;

use anyhow::Context as _;
use fleetbench_gpu::Gpus;
use fleetbench_gpu::p2p::{self, ProbeError, ProbeOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Buffer per copy for the bandwidth runs, MiB (default: p2pBandwidthLatencyTest's 160 MB).
    #[arg(long, default_value_t = fleetbench_gpu::p2p::DEFAULT_BUFFER_BYTES >> 20, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub buffer_mib: u64,
    /// Timed runs per figure; the median is reported.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeats: u32,
    /// Ordered pairs to measure, e.g. "0-1,1-0" (default: every ordered pair).
    #[arg(long)]
    pub pairs: Option<String>,
    /// Print the report as a JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let pairs = match &args.pairs {
        Some(text) => Some(p2p::parse_pairs(text).context("--pairs")?),
        None => None,
    };
    let opts = ProbeOptions {
        buffer_bytes: args.buffer_mib << 20,
        repeats: args.repeats,
        pairs,
    };
    let report = tokio::task::spawn_blocking(move || {
        let gpus = Gpus::init();
        p2p::probe(&gpus, &opts).map_err(|e| (e, gpus.unavailable_reason()))
    })
    .await
    .context("the probe thread failed")?;
    match report {
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", p2p::render_table(&report));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err((e @ (ProbeError::InvalidPair { .. } | ProbeError::BadPairList { .. }), _)) => {
            Err(anyhow::Error::new(e).context("--pairs"))
        }
        Err((e, nvml)) => {
            let mut msg = e.to_string();
            if let Some(reason) = nvml {
                msg.push_str(&format!("; {reason}"));
            }
            anyhow::bail!(msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: Option<&str>) -> Args {
        Args {
            buffer_mib: 1,
            repeats: 1,
            pairs: pairs.map(str::to_string),
            json: true,
        }
    }

    #[tokio::test]
    async fn a_bad_pair_list_names_the_flag() {
        let err = run(args(Some("0-x"))).await.expect_err("not a pair list");
        let text = format!("{err:#}");
        assert!(
            text.starts_with("--pairs: invalid pair list \"0-x\""),
            "{text}"
        );
    }

    #[tokio::test]
    async fn without_a_driver_it_says_so_and_fails() {
        let result = run(args(None)).await;
        if p2p::cuda_driver_present() {
            assert!(result.is_ok(), "a host with a driver probes: {result:?}");
            return;
        }
        let text = format!("{:#}", result.expect_err("no driver here"));
        assert!(text.starts_with("no CUDA driver"), "{text}");
        assert!(
            text.contains("NVML"),
            "says why NVML is missing too: {text}"
        );
    }
}
