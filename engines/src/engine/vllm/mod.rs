//! vLLM (0.33, and the CPU build 0.32): how fleetbench starts, reads, classifies, measures
//! and resets it.

pub(crate) mod flags;
mod logs;

use super::Engine;
use crate::cache::{self, CacheCounters, CacheReset};
use crate::defaults::{KindDefaults, StopSignal, args};
use crate::flags::FlagType;
use crate::flags::tables::{Row, choice};
use crate::gang::{Gang, GangError};
use crate::logs::LogParser;
use crate::metrics::{Agg, Mapping, Rule};
use crate::prom::Exposition;

/// vLLM.
pub(crate) struct Vllm;

pub(super) const METRICS: Mapping = Mapping {
    running: Rule {
        names: &["vllm:num_requests_running"],
        agg: Agg::Sum,
    },
    queued: Rule {
        names: &["vllm:num_requests_waiting"],
        agg: Agg::Sum,
    },
    kv: Rule {
        names: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        agg: Agg::Mean,
    },
    gen_rate: Rule {
        names: &[],
        agg: Agg::Sum,
    },
    prompt_total: Rule {
        names: &["vllm:prompt_tokens_total"],
        agg: Agg::Sum,
    },
    gen_total: Rule {
        names: &["vllm:generation_tokens_total"],
        agg: Agg::Sum,
    },
    requests: Rule {
        names: &["vllm:request_success_total"],
        agg: Agg::Sum,
    },
};

/// vLLM's prefix-cache hits and queries (tokens), and the gauge of versions before them.
pub(super) fn counters(expo: &Exposition, c: &mut CacheCounters) {
    c.hits = cache::sum(expo, "vllm:prefix_cache_hits_total");
    c.queries = cache::sum(expo, "vllm:prefix_cache_queries_total");
    // Versions before the counters had a hit-rate gauge.
    c.hit_rate_gauge = cache::sum(expo, "vllm:gpu_prefix_cache_hit_rate");
}

impl Engine for Vllm {
    fn defaults(&self) -> KindDefaults {
        KindDefaults {
            program: "vllm",
            fixed_args: args(&["serve", "{model}", "--host", "{host}", "--port", "{port}"]),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 30,
            start_timeout_s: 1800,
            default_port: 8000,
            // Without `=all`, `vllm serve --help` lists the groups, not the options.
            help_args: Some(&["serve", "--help=all"]),
            allowed_env: {
                let mut v = super::nccl_env();
                v.extend([
                    ("VLLM_ATTENTION_BACKEND", FlagType::String),
                    ("VLLM_USE_V1", super::zero_one()),
                    (
                        "VLLM_LOGGING_LEVEL",
                        choice(&["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]),
                    ),
                    ("VLLM_WORKER_MULTIPROC_METHOD", choice(&["spawn", "fork"])),
                    ("VLLM_USE_DEEP_GEMM", super::zero_one()),
                    ("VLLM_ALL2ALL_BACKEND", FlagType::String),
                ]);
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
        flags::DEPRECATED
    }

    fn argparse_prefixes(&self) -> bool {
        true
    }

    fn log_parser(&self) -> Box<dyn LogParser> {
        Box::new(logs::VllmParser)
    }

    fn engine_error(&self, _line: &str) -> Option<&'static str> {
        None
    }

    fn oom_detail(&self, _lines: &[String]) -> Option<String> {
        None
    }

    fn killed_itself(&self, _lines: &[String], _signal: i32) -> bool {
        false
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
        (
            CacheReset::Post("/reset_prefix_cache"),
            "vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1 in the engine's env",
        )
    }

    fn counts_evaluated_prompt_tokens(&self, _after: &CacheCounters) -> bool {
        false
    }

    fn cached_counter_created_lazily(&self) -> bool {
        false
    }

    fn hit_rate_gauge(&self) -> &'static str {
        "vllm:gpu_prefix_cache_hit_rate"
    }

    /// vLLM spans hosts as data-parallel ranks, one per node: rank 0 runs the API server and
    /// the DP coordinator at `--data-parallel-address`/`--data-parallel-rpc-port`; the others
    /// run `--headless` engines from `--data-parallel-start-rank` (vLLM's multi-node recipe).
    fn gang_args(&self, gang: &Gang) -> Result<Vec<String>, GangError> {
        let (host, port) = gang.host_port().ok_or(GangError::Bad {
            field: "dist_init_addr",
            problem: format!("{:?} is not HOST:PORT", gang.dist_init_addr),
        })?;
        let mut a: Vec<String> = vec![
            "--data-parallel-size".into(),
            gang.nnodes.to_string(),
            "--data-parallel-size-local".into(),
            "1".into(),
            "--data-parallel-address".into(),
            host.to_string(),
            "--data-parallel-rpc-port".into(),
            port.to_string(),
        ];
        if gang.node_rank > 0 {
            a.extend([
                "--data-parallel-start-rank".into(),
                gang.node_rank.to_string(),
                "--headless".into(),
            ]);
        }
        Ok(a)
    }

    // `--data-parallel-size` stays a tuning flag on one host; in a gang the agent sets it too
    // (and then pins it: the agent pins every flag it adds).
    fn gang_pins(&self) -> &'static [&'static str] {
        &[
            "--data-parallel-size-local",
            "--data-parallel-address",
            "--data-parallel-rpc-port",
            "--data-parallel-start-rank",
            "--headless",
        ]
    }

    // An engine routes to no workers.
    fn worker_outcomes(&self, _expo: &Exposition) -> Vec<crate::deployment::WorkerOutcome> {
        Vec::new()
    }
}
