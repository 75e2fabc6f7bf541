//! A `generic` program: an OpenAI-compatible server fleetbench has no module for. Its
//! profile lists its flags; its log yields no facts; its metrics, cache counters and crash
//! messages are read as whichever built-in engine's the program turns out to print.

use super::{Engine, llamacpp, sglang, vllm};
use crate::cache::{CacheCounters, CacheReset};
use crate::defaults::{KindDefaults, StopSignal};
use crate::flags::tables::Row;
use crate::gang::{Gang, GangError};
use crate::logs::{LogParser, NoFacts};
use crate::metrics::{self, Mapping};
use crate::prom::Exposition;

/// A program of the operator's own.
pub(crate) struct Generic;

impl Engine for Generic {
    fn defaults(&self) -> KindDefaults {
        KindDefaults {
            program: "",
            fixed_args: Vec::new(),
            health_path: "/health",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            grace_s: 10,
            start_timeout_s: 600,
            default_port: 8000,
            // Its flags are its profile's.
            help_args: None,
            allowed_env: Vec::new(),
            python_scratch: false,
            model_is_label: false,
            metrics_port: None,
            router: false,
            worker_flags: &[],
        }
    }

    fn flag_rows(&self) -> Vec<Row> {
        Vec::new()
    }

    fn gated_rows(&self) -> Vec<Row> {
        Vec::new()
    }

    fn deprecated(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn argparse_prefixes(&self) -> bool {
        false
    }

    fn log_parser(&self) -> Box<dyn LogParser> {
        Box::new(NoFacts)
    }

    fn engine_error(&self, line: &str) -> Option<&'static str> {
        llamacpp::engine_error(line)
    }

    fn oom_detail(&self, _lines: &[String]) -> Option<String> {
        None
    }

    fn killed_itself(&self, _lines: &[String], _signal: i32) -> bool {
        false
    }

    /// Whichever built-in engine's names the scrape carries (SGLang's when none does).
    fn metric_mapping(&self, expo: &Exposition) -> &'static Mapping {
        [&sglang::METRICS, &vllm::METRICS, &llamacpp::METRICS]
            .into_iter()
            .find(|m| metrics::figure(expo, &m.running).is_some())
            .unwrap_or(&sglang::METRICS)
    }

    fn cache_counters(&self, expo: &Exposition) -> CacheCounters {
        let mut c = CacheCounters::default();
        vllm::counters(expo, &mut c);
        if c.hits.is_none() {
            sglang::counters(expo, &mut c);
        }
        if c.prompt_tokens.is_none() {
            llamacpp::counters(expo, &mut c);
        }
        c
    }

    fn cache_reset(&self) -> (CacheReset, &'static str) {
        sglang::RESET
    }

    // Without SGLang's cached-tokens counter, a prompt counter is llama.cpp's evaluated one.
    fn counts_evaluated_prompt_tokens(&self, after: &CacheCounters) -> bool {
        after.cached_tokens.is_none()
    }

    fn cached_counter_created_lazily(&self) -> bool {
        false
    }

    fn hit_rate_gauge(&self) -> &'static str {
        sglang::HIT_RATE_GAUGE
    }

    fn gang_args(&self, _: &Gang) -> Result<Vec<String>, GangError> {
        Err(GangError::Unsupported {
            kind: crate::EngineKind::Generic,
            why: "fleetbench does not know its rendezvous flags",
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
