//! SGLang's router (`sglang-router` 0.3.2 from the Python registry: a Rust binary behind a
//! small Python launcher): the front of a deployment. It is started like an engine, from an
//! agent's allowlisted profile, but loads no model: its workers (the replicas' base URLs) come
//! from the caller's `EngineSpec.workers`, checked against the profile's `allowed_workers`,
//! and every flag that could name another upstream is pinned (`flags::WORKER_FLAGS`).
//!
//! What it tells: per-worker outcomes (`smg_worker_cb_outcomes_total{worker,outcome}`, one per
//! attempt, retries included, counted by its circuit breaker, so not with
//! `--disable-circuit-breaker`), requests in flight per worker, its own request and upstream
//! response counts. It serves them on a port of its own (`--prometheus-port`), not its API
//! port. It keeps no KV cache: the cache figures of a level through it are the workers' own.

pub(crate) mod flags;
mod logs;

use super::Engine;
use crate::cache::{CacheCounters, CacheReset};
use crate::defaults::{KindDefaults, StopSignal, args};
use crate::deployment::WorkerOutcome;
use crate::flags::tables::Row;
use crate::logs::LogParser;
use crate::metrics::{Agg, Mapping, Rule};
use crate::prom::Exposition;

/// SGLang's router.
pub(crate) struct SglangRouter;

const NONE: Rule = Rule {
    names: &[],
    agg: Agg::Sum,
};

const METRICS: Mapping = Mapping {
    // Requests it has in flight at its workers.
    running: Rule {
        names: &["smg_worker_requests_active"],
        agg: Agg::Sum,
    },
    // 0.3.2 queues only with --max-concurrent-requests, and exports no gauge of that queue.
    queued: NONE,
    kv: NONE,
    gen_rate: NONE,
    // It counts tokens only where it tokenises itself (gRPC workers), not over HTTP.
    prompt_total: NONE,
    gen_total: NONE,
    requests: Rule {
        names: &["smg_router_requests_total"],
        agg: Agg::Sum,
    },
};

/// Per-worker outcomes of one scrape.
fn outcomes(expo: &Exposition) -> Vec<WorkerOutcome> {
    expo.series
        .iter()
        .filter(|s| s.name == "smg_worker_cb_outcomes_total" && s.value.is_finite())
        .filter_map(|s| {
            Some(WorkerOutcome {
                worker: s.labels.get("worker")?.clone(),
                outcome: s.labels.get("outcome")?.clone(),
                count: s.value,
            })
        })
        .collect()
}

/// `sglang-router`'s own errors that end it (argparse's, and its configuration check's).
fn engine_error(l: &str) -> Option<&'static str> {
    if l.contains("sglang-router: error: argument") || l.contains("smg: error: argument") {
        return Some("sglang-router: invalid argument");
    }
    if l.contains("Configuration error:") {
        return Some("sglang-router: configuration error");
    }
    None
}

impl Engine for SglangRouter {
    fn defaults(&self) -> KindDefaults {
        KindDefaults {
            program: "sglang-router",
            fixed_args: args(&[
                "launch",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--worker-urls",
                "{workers}",
                "--prometheus-host",
                "{host}",
                "--prometheus-port",
                "{metrics_port}",
            ]),
            // 503 ("insufficient healthy workers") until it has registered a healthy worker;
            // /health answers 200 as soon as it listens, before any worker is known.
            health_path: "/readiness",
            env: &[],
            metrics_path: "/metrics",
            stop_signal: StopSignal::Sigterm,
            // It drains in-flight requests for --shutdown-grace-period-secs (180 by default)
            // on SIGTERM; between levels none are in flight and it ends at once.
            grace_s: 10,
            start_timeout_s: 120,
            default_port: 30000,
            help_args: Some(&["launch", "--help"]),
            // It reads no environment a caller should tune; its log level is a flag.
            allowed_env: Vec::new(),
            python_scratch: false,
            model_is_label: false,
            metrics_port: Some(29000),
            router: true,
            worker_flags: flags::WORKER_FLAGS,
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

    // Its launcher parses with argparse, abbreviations allowed.
    fn argparse_prefixes(&self) -> bool {
        true
    }

    fn log_parser(&self) -> Box<dyn LogParser> {
        Box::new(logs::RouterParser::default())
    }

    fn engine_error(&self, line: &str) -> Option<&'static str> {
        engine_error(line)
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

    // It keeps no KV cache.
    fn cache_counters(&self, _expo: &Exposition) -> CacheCounters {
        CacheCounters::default()
    }

    fn cache_reset(&self) -> (CacheReset, &'static str) {
        (
            CacheReset::Workers,
            "each worker is reset as its own kind is; the router's own prefix tree \
             (cache_aware) has no reset: it still sends a session to the worker it sent it to \
             before, whose cache no longer holds it, until --eviction-interval-secs evicts",
        )
    }

    fn counts_evaluated_prompt_tokens(&self, _after: &CacheCounters) -> bool {
        false
    }

    fn cached_counter_created_lazily(&self) -> bool {
        false
    }

    // It has no hit-rate gauge; the name read is SGLang's, as for every kind but vLLM.
    fn hit_rate_gauge(&self) -> &'static str {
        super::sglang::HIT_RATE_GAUGE
    }

    fn gang_args(&self, _: &crate::gang::Gang) -> Result<Vec<String>, crate::gang::GangError> {
        Err(crate::gang::GangError::Unsupported {
            kind: crate::EngineKind::SglangRouter,
            why: "a router fronts replicas; it has no ranks",
        })
    }

    fn gang_pins(&self) -> &'static [&'static str] {
        &[]
    }

    fn worker_outcomes(&self, expo: &Exposition) -> Vec<WorkerOutcome> {
        outcomes(expo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_per_worker_and_errors_are_read() {
        let text = "smg_worker_cb_outcomes_total{worker=\"http://127.0.0.1:1\",outcome=\"success\"} 6\n\
                    smg_worker_cb_outcomes_total{worker=\"http://127.0.0.1:2\",outcome=\"failure\"} 1\n\
                    smg_worker_requests_active{worker=\"http://127.0.0.1:1\"} 2\n";
        let o = outcomes(&crate::prom::parse(text));
        assert_eq!(o.len(), 2);
        assert_eq!(
            (o[0].worker.as_str(), o[0].outcome.as_str(), o[0].count),
            ("http://127.0.0.1:1", "success", 6.0)
        );
        let m = crate::map_metrics(crate::EngineKind::SglangRouter, text);
        assert_eq!(m.running_requests, Some(2.0));
        assert_eq!(
            engine_error("sglang-router: error: argument --policy: invalid choice: 'x'"),
            Some("sglang-router: invalid argument")
        );
        assert_eq!(
            engine_error("ValueError: Configuration error: Invalid value for field 'worker_url'"),
            Some("sglang-router: configuration error")
        );
    }
}
