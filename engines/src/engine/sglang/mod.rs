//! SGLang (0.5.9, 0.5.23): how fleetbench starts, reads, classifies, measures and resets it.
//! The simulated engine imitates it and borrows most of this module (`super::sim`).

mod crash;
pub(crate) mod flags;
mod logs;

use super::Engine;
use crate::cache::{self, CacheCounters, CacheReset};
use crate::defaults::{KindDefaults, StopSignal, args};
use crate::flags::tables::Row;
use crate::gang::{Gang, GangError};
use crate::logs::LogParser;
use crate::metrics::{Agg, Mapping, Rule};
use crate::prom::Exposition;

/// SGLang.
pub(crate) struct Sglang;

pub(super) const METRICS: Mapping = Mapping {
    running: Rule {
        names: &["sglang:num_running_reqs"],
        agg: Agg::Sum,
    },
    queued: Rule {
        names: &["sglang:num_queue_reqs"],
        agg: Agg::Sum,
    },
    kv: Rule {
        names: &["sglang:token_usage"],
        agg: Agg::Mean,
    },
    gen_rate: Rule {
        names: &["sglang:gen_throughput"],
        agg: Agg::Sum,
    },
    prompt_total: Rule {
        names: &["sglang:prompt_tokens_total"],
        agg: Agg::Sum,
    },
    gen_total: Rule {
        names: &["sglang:generation_tokens_total"],
        agg: Agg::Sum,
    },
    requests: Rule {
        names: &["sglang:num_requests_total"],
        agg: Agg::Sum,
    },
};

/// SGLang's cache counters (the simulator's too): prompt tokens received, those served from
/// the radix cache, and the recent hit-rate gauge.
pub(super) fn counters(expo: &Exposition, c: &mut CacheCounters) {
    c.prompt_tokens = cache::sum(expo, "sglang:prompt_tokens_total");
    c.cached_tokens = cache::sum(expo, "sglang:cached_tokens_total");
    c.hit_rate_gauge = cache::sum(expo, "sglang:cache_hit_rate");
}

/// Its reset, and what it cannot do.
pub(super) const RESET: (CacheReset, &str) = (
    CacheReset::Post("/flush_cache"),
    "SGLang refuses to flush while requests are running",
);

/// Its hit-rate gauge.
pub(super) const HIT_RATE_GAUGE: &str = "sglang:cache_hit_rate";

impl Engine for Sglang {
    fn defaults(&self) -> KindDefaults {
        KindDefaults {
            program: "python3",
            fixed_args: args(&[
                "-m",
                "sglang.launch_server",
                "--model-path",
                "{model}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--enable-metrics",
            ]),
            // SGLang's /health answers 503 until the server is up (after its warm-up), which
            // is the readiness wanted; but by default it then submits a one-token generation
            // per probe, which lands in the measured batch. With this variable false (SGLang
            // 0.5.23's environ.py) it answers from the server's state alone. /model_info and
            // /v1/models never generate, but answer before the warm-up request has run.
            health_path: "/health",
            env: &[("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false")],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 30,
            start_timeout_s: 1800,
            default_port: 30000,
            help_args: Some(&["-m", "sglang.launch_server", "--help"]),
            allowed_env: {
                let mut v = super::nccl_env();
                v.push(super::cuda_visible_devices());
                v
            },
            python_scratch: true,
            model_is_label: false,
            metrics_port: None,
            router: false,
            worker_flags: &[],
        }
    }

    fn flag_rows(&self) -> Vec<Row> {
        flags::rows()
    }

    fn gated_rows(&self) -> Vec<Row> {
        flags::gated_rows()
    }

    fn deprecated(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn argparse_prefixes(&self) -> bool {
        true
    }

    fn log_parser(&self) -> Box<dyn LogParser> {
        Box::new(logs::SglangParser::default())
    }

    fn engine_error(&self, _line: &str) -> Option<&'static str> {
        None
    }

    fn oom_detail(&self, _lines: &[String]) -> Option<String> {
        None
    }

    fn killed_itself(&self, lines: &[String], signal: i32) -> bool {
        crash::killed_itself(lines, signal)
    }

    fn metric_mapping(&self, _expo: &Exposition) -> &'static Mapping {
        &METRICS
    }

    fn cache_counters(&self, expo: &Exposition) -> CacheCounters {
        let mut c = CacheCounters::default();
        counters(expo, &mut c);
        c
    }

    fn cache_reset(&self) -> (CacheReset, &'static str) {
        RESET
    }

    fn counts_evaluated_prompt_tokens(&self, _after: &CacheCounters) -> bool {
        false
    }

    // 0.5.23 creates `sglang:cached_tokens_total{cache_source=...}` at its first cache hit.
    fn cached_counter_created_lazily(&self) -> bool {
        true
    }

    fn hit_rate_gauge(&self) -> &'static str {
        HIT_RATE_GAUGE
    }

    fn gang_args(&self, gang: &Gang) -> Result<Vec<String>, GangError> {
        Ok(crate::gang::sglang_args(gang))
    }

    fn gang_pins(&self) -> &'static [&'static str] {
        crate::gang::SGLANG_PINS
    }

    // An engine routes to no workers.
    fn worker_outcomes(&self, _expo: &Exposition) -> Vec<crate::deployment::WorkerOutcome> {
        Vec::new()
    }
}
