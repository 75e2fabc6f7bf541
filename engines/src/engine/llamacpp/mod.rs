//! llama.cpp's `llama-server`: how fleetbench starts, reads, classifies, measures and resets
//! it.

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

/// llama.cpp.
pub(crate) struct Llamacpp;

pub(super) const METRICS: Mapping = Mapping {
    running: Rule {
        names: &["llamacpp:requests_processing"],
        agg: Agg::Sum,
    },
    queued: Rule {
        names: &["llamacpp:requests_deferred"],
        agg: Agg::Sum,
    },
    kv: Rule {
        names: &["llamacpp:kv_cache_usage_ratio"],
        agg: Agg::Mean,
    },
    // `predicted_tokens_seconds` is a per-request decode speed, not the server's rate (see
    // `EngineMetricsData`).
    gen_rate: Rule {
        names: &[],
        agg: Agg::Sum,
    },
    prompt_total: Rule {
        names: &["llamacpp:prompt_tokens_total"],
        agg: Agg::Sum,
    },
    gen_total: Rule {
        names: &["llamacpp:tokens_predicted_total"],
        agg: Agg::Sum,
    },
    // llama-server counts no requests: only the ones in flight (`requests_processing`).
    requests: Rule {
        names: &[],
        agg: Agg::Sum,
    },
};

/// llama.cpp's count of prompt tokens it evaluated, and (newer builds) of those a cache held.
pub(super) fn counters(expo: &Exposition, c: &mut CacheCounters) {
    c.prompt_tokens = cache::sum(expo, "llamacpp:prompt_tokens_total");
    c.prompt_tokens_cached = cache::sum(expo, "llamacpp:prompt_tokens_cached_total");
}

/// llama.cpp's own errors that end it without a traceback (a `generic` program gets them too).
pub(super) fn engine_error(l: &str) -> Option<&'static str> {
    if l.starts_with("error while handling argument") || l.starts_with("error: invalid argument") {
        return Some("llama.cpp: invalid argument");
    }
    if l.contains("failed to load model") || l.contains("exiting due to model loading error") {
        return Some("llama.cpp: failed to load model");
    }
    None
}

/// What llama.cpp failed to fit in GPU memory, from the lines it prints after the failed
/// allocation (`cudaMalloc failed: out of memory` names only the size). The remedy differs:
/// a smaller `--ctx-size` or a quantized `--cache-type-k` for the KV cache, fewer
/// `--n-gpu-layers` for the weights, a smaller `--ubatch-size` for the compute buffers.
fn oom_what(lines: &[String]) -> Option<&'static str> {
    lines.iter().rev().find_map(|l| {
        if l.contains("failed to allocate buffer for kv cache") {
            Some("llama.cpp: KV cache does not fit in GPU memory")
        } else if l.contains("unable to allocate") && l.contains(" buffer") {
            Some("llama.cpp: model weights do not fit in GPU memory")
        } else if l.contains("failed to allocate compute") {
            Some("llama.cpp: compute buffers do not fit in GPU memory")
        } else {
            None
        }
    })
}

impl Engine for Llamacpp {
    fn defaults(&self) -> KindDefaults {
        KindDefaults {
            program: "llama-server",
            fixed_args: args(&[
                "-m",
                "{model}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--metrics",
            ]),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 10,
            start_timeout_s: 120,
            // The packaged build's README says 9931; older builds used 8080.
            default_port: 9931,
            help_args: Some(&["--help"]),
            allowed_env: vec![
                ("GGML_CUDA_ENABLE_UNIFIED_MEMORY", super::zero_one()),
                super::cuda_visible_devices(),
            ],
            python_scratch: false,
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

    // Its own parser takes exact names only.
    fn argparse_prefixes(&self) -> bool {
        false
    }

    fn log_parser(&self) -> Box<dyn LogParser> {
        Box::new(logs::LlamaCppParser::default())
    }

    fn engine_error(&self, line: &str) -> Option<&'static str> {
        engine_error(line)
    }

    fn oom_detail(&self, lines: &[String]) -> Option<String> {
        Some(oom_what(lines).map(str::to_string).unwrap_or_default())
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
            CacheReset::EraseSlots,
            "llama-server erases slots only when started with --slot-save-path (an operator's \
             fixed arg), and its host-RAM prompt cache survives an erase unless it runs with \
             --cache-ram 0",
        )
    }

    fn counts_evaluated_prompt_tokens(&self, _after: &CacheCounters) -> bool {
        true
    }

    fn cached_counter_created_lazily(&self) -> bool {
        false
    }

    // llama.cpp has no hit-rate gauge; the name read is SGLang's, as for every kind but vLLM.
    fn hit_rate_gauge(&self) -> &'static str {
        super::sglang::HIT_RATE_GAUGE
    }

    fn gang_args(&self, _: &Gang) -> Result<Vec<String>, GangError> {
        Err(GangError::Unsupported {
            kind: crate::EngineKind::Llamacpp,
            why: "llama-server runs on one host; its RPC backend offloads layers, it has no ranks",
        })
    }

    fn gang_pins(&self) -> &'static [&'static str] {
        &[]
    }

    // An engine routes to no workers.
    fn worker_outcomes(&self, _expo: &Exposition) -> Vec<crate::deployment::WorkerOutcome> {
        Vec::new()
    }
}
