//! fleetbench's simulated engine (`fleetbench-sim`): it imitates SGLang's flags, log lines,
//! metric names and cache endpoints, so most of it is SGLang's module; its own knobs (speed
//! model, faults) are added to SGLang's flags.

use super::Engine;
use super::sglang::{self, Sglang};
use crate::cache::{CacheCounters, CacheReset};
use crate::defaults::{KindDefaults, StopSignal, args};
use crate::flags::tables::{Row, choice, float, int};
use crate::gang::{Gang, GangError};
use crate::logs::LogParser;
use crate::metrics::Mapping;
use crate::prom::Exposition;

/// The simulated engine.
pub(crate) struct Sim;

/// The simulator's own flags, besides SGLang's.
fn own_rows() -> Vec<Row> {
    vec![
        (&["--ttft-ms"], float(0.0, None)),
        (&["--itl-ms"], float(0.0, None)),
        (&["--stream-writes"], choice(&["per-token", "coalesced"])),
        (&["--startup-delay-s"], float(0.0, None)),
        (&["--time-scale"], float(1e-6, None)),
        (&["--seed"], int(0)),
        (&["--jitter"], float(0.0, None)),
        (&["--slowdown"], float(0.0, None)),
        (&["--gpu-memory-gb"], float(0.0, None)),
        (&["--crash-above-batch"], int(1)),
        (&["--workers"], int(1)),
        (
            &["--crash-backend"],
            choice(sglang::flags::SGLANG_MOE_RUNNER_BACKENDS),
        ),
        (&["--fail-rate"], float(0.0, Some(1.0))),
        (&["--max-prompt-len"], int(1)),
        (&["--decode-ms-per-1k-context"], float(0.0, None)),
        (&["--noise-seed"], int(0)),
        // The simulator reads `--fault hang-after-requests=N` as one value.
        (
            &["--fault"],
            choice(&[
                "nan",
                "oom-at-start",
                "hang-after-requests=N",
                "slow-start",
                "hang-on-peer-loss",
            ]),
        ),
    ]
}

impl Engine for Sim {
    fn defaults(&self) -> KindDefaults {
        KindDefaults {
            program: "fleetbench-sim",
            fixed_args: args(&["--host", "{host}", "--port", "{port}", "--model", "{model}"]),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 5,
            start_timeout_s: 60,
            default_port: 30000,
            // Its flags are fleetbench's own tables.
            help_args: None,
            allowed_env: vec![super::cuda_visible_devices()],
            python_scratch: false,
            model_is_label: true,
            metrics_port: None,
            router: false,
            worker_flags: &[],
        }
    }

    fn flag_rows(&self) -> Vec<Row> {
        let mut r = Sglang.flag_rows();
        r.extend(own_rows());
        r
    }

    fn gated_rows(&self) -> Vec<Row> {
        Sglang.gated_rows()
    }

    fn deprecated(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    // Its parser (clap) takes exact names only.
    fn argparse_prefixes(&self) -> bool {
        false
    }

    fn log_parser(&self) -> Box<dyn LogParser> {
        Sglang.log_parser()
    }

    fn engine_error(&self, line: &str) -> Option<&'static str> {
        Sglang.engine_error(line)
    }

    fn oom_detail(&self, lines: &[String]) -> Option<String> {
        Sglang.oom_detail(lines)
    }

    fn killed_itself(&self, lines: &[String], signal: i32) -> bool {
        Sglang.killed_itself(lines, signal)
    }

    fn metric_mapping(&self, expo: &Exposition) -> &'static Mapping {
        Sglang.metric_mapping(expo)
    }

    fn cache_counters(&self, expo: &Exposition) -> CacheCounters {
        Sglang.cache_counters(expo)
    }

    fn cache_reset(&self) -> (CacheReset, &'static str) {
        Sglang.cache_reset()
    }

    fn counts_evaluated_prompt_tokens(&self, after: &CacheCounters) -> bool {
        Sglang.counts_evaluated_prompt_tokens(after)
    }

    // The simulator exports its cached-tokens counter from the start.
    fn cached_counter_created_lazily(&self) -> bool {
        false
    }

    fn hit_rate_gauge(&self) -> &'static str {
        Sglang.hit_rate_gauge()
    }

    // The simulator speaks SGLang's rendezvous (`fleetbench_sim::gang`).
    fn gang_args(&self, gang: &Gang) -> Result<Vec<String>, GangError> {
        Sglang.gang_args(gang)
    }

    fn gang_pins(&self) -> &'static [&'static str] {
        Sglang.gang_pins()
    }

    // An engine routes to no workers.
    fn worker_outcomes(&self, _expo: &Exposition) -> Vec<crate::deployment::WorkerOutcome> {
        Vec::new()
    }
}
