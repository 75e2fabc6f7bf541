//! One module per engine kind, each holding everything fleetbench knows about that engine:
//! its built-in profile data (program, fixed arguments, readiness probe, stop, timeouts, the
//! help arguments its flag reader runs, the environment a caller may set), its flag tables and
//! how its parser takes them, its log facts and effective-args reader, its crash messages, its
//! metric names, its prefix-cache counters and reset.
//!
//! The rest of the crate (and the agent, through the crate's functions) asks [`spec`], the one
//! place that matches on [`EngineKind`]. Every item of [`Engine`] is required, so a new kind is
//! a module here, a variant of [`EngineKind`] and an arm of [`spec`], and the compiler names
//! whatever the new module still lacks. The data an engine's module reads (recorded help text,
//! log and crash fixtures) stay as files beside the tests that use them.

pub(crate) mod generic;
pub(crate) mod llamacpp;
pub(crate) mod sglang;
pub(crate) mod sglang_router;
pub(crate) mod sim;
pub(crate) mod vllm;

use crate::EngineKind;
use crate::cache::{CacheCounters, CacheReset};
use crate::defaults::KindDefaults;
use crate::deployment::WorkerOutcome;
use crate::flags::FlagType;
use crate::flags::tables::{Row, choice};
use crate::gang::{Gang, GangError};
use crate::logs::LogParser;
use crate::metrics::Mapping;
use crate::prom::Exposition;

/// Everything engine-specific, for one kind.
pub(crate) trait Engine: Sync {
    /// The built-in profile data: program, fixed args, readiness (`health_path`: ready on a
    /// 200), metrics path, stop, timeouts, help arguments, allowed environment.
    fn defaults(&self) -> KindDefaults;

    /// The tuning flags callers may set (names canonical first, then aliases).
    fn flag_rows(&self) -> Vec<Row>;
    /// Flags that load code, weights or files, or take a JSON config that can name them: known
    /// by name, off until a profile allows them.
    fn gated_rows(&self) -> Vec<Row>;
    /// Flags the engine deprecated, with what replaced them.
    fn deprecated(&self) -> &'static [(&'static str, &'static str)];
    /// Whether the engine's parser accepts unique prefixes of long flags (argparse does).
    fn argparse_prefixes(&self) -> bool;

    /// A fresh reader of the engine's log facts (effective server args included).
    fn log_parser(&self) -> Box<dyn LogParser>;

    /// An error the engine prints instead of a traceback, named (`llama.cpp: invalid argument`).
    fn engine_error(&self, line: &str) -> Option<&'static str>;
    /// What an out-of-memory without a traceback was about, when the engine's lines say it
    /// (`Some("")` when this engine explains it but these lines do not); `None` to leave the
    /// message to the generic rules.
    fn oom_detail(&self, lines: &[String]) -> Option<String>;
    /// Whether the log (lines without their logger prefixes) shows that the engine sent
    /// `signal` to itself: an engine whose launcher kills its own process tree after a child's
    /// failure ends like one killed from outside, and the failure before it is the cause.
    fn killed_itself(&self, lines: &[String], signal: i32) -> bool;

    /// The engine's names for the common metric figures, picked for this scrape.
    fn metric_mapping(&self, expo: &Exposition) -> &'static Mapping;

    /// The prefix-cache counters of one scrape.
    fn cache_counters(&self, expo: &Exposition) -> CacheCounters;
    /// How to empty the prefix cache, with what the reset cannot do.
    fn cache_reset(&self) -> (CacheReset, &'static str);
    /// Whether `prompt_tokens` counts the prompt tokens the engine *evaluated* (llama.cpp), so
    /// that what it did not evaluate came from a cache.
    fn counts_evaluated_prompt_tokens(&self, after: &CacheCounters) -> bool;
    /// Whether the cached-tokens counter appears only at the first cache hit (SGLang 0.5.23),
    /// so that its absence beside the prompt counter means no hit.
    fn cached_counter_created_lazily(&self) -> bool;
    /// The name of the hit-rate gauge read when no counters are there.
    fn hit_rate_gauge(&self) -> &'static str;

    /// The engine's own flags that place one rank in a gang spanning hosts (`crate::gang`),
    /// or why this engine cannot span hosts.
    fn gang_args(&self, gang: &Gang) -> Result<Vec<String>, GangError>;
    /// The flags that carry a rendezvous: set by the agent alone, refused from a user.
    fn gang_pins(&self) -> &'static [&'static str];
    /// A router's attempts per worker by outcome, from one scrape; empty for an engine.
    fn worker_outcomes(&self, expo: &Exposition) -> Vec<WorkerOutcome>;
}

/// The module of `kind`: the one match on the kind in fleetbench's engine knowledge.
pub(crate) fn spec(kind: EngineKind) -> &'static dyn Engine {
    match kind {
        EngineKind::Sglang => &sglang::Sglang,
        EngineKind::Vllm => &vllm::Vllm,
        EngineKind::Llamacpp => &llamacpp::Llamacpp,
        EngineKind::Sim => &sim::Sim,
        EngineKind::Generic => &generic::Generic,
        EngineKind::SglangRouter => &sglang_router::SglangRouter,
    }
}

/// `0` or `1`.
pub(crate) fn zero_one() -> FlagType {
    choice(&["0", "1"])
}

/// The NCCL variables a caller may set on a multi-GPU Python engine. Prefixes (`NCCL_*`) are
/// never allowed: they admit `NCCL_DEBUG_FILE` and file writes.
pub(crate) fn nccl_env() -> Vec<(&'static str, FlagType)> {
    vec![
        ("NCCL_DEBUG", choice(&["VERSION", "WARN", "INFO", "TRACE"])),
        ("NCCL_DEBUG_SUBSYS", FlagType::String),
        ("NCCL_P2P_DISABLE", zero_one()),
        ("NCCL_IB_DISABLE", zero_one()),
        ("NCCL_SHM_DISABLE", zero_one()),
        ("NCCL_NVLS_ENABLE", zero_one()),
        ("NCCL_CUMEM_ENABLE", zero_one()),
        ("NCCL_ALGO", FlagType::String),
        ("NCCL_PROTO", FlagType::String),
    ]
}

/// Which GPUs the engine sees; every kind that runs on a GPU takes it.
pub(crate) fn cuda_visible_devices() -> (&'static str, FlagType) {
    ("CUDA_VISIBLE_DEVICES", FlagType::String)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prom;

    #[test]
    fn every_kind_resolves_to_a_module_with_its_tables() {
        for kind in EngineKind::ALL {
            let e = spec(kind);
            let d = e.defaults();
            assert!(d.health_path.starts_with('/'), "{kind}");
            assert!(d.grace_s > 0 && d.start_timeout_s > d.grace_s, "{kind}");
            // A mapping always has a name for the running batch.
            let m = e.metric_mapping(&prom::parse(""));
            assert!(!m.running.names.is_empty(), "{kind}");
            assert!(!e.hit_rate_gauge().is_empty(), "{kind}");
            if kind == EngineKind::Generic {
                // Its profile lists its flags and its log is unknown.
                assert!(e.flag_rows().is_empty() && e.gated_rows().is_empty());
                assert!(d.program.is_empty() && d.help_args.is_none());
                continue;
            }
            assert!(!d.program.is_empty(), "{kind}");
            assert!(!e.flag_rows().is_empty(), "{kind}");
            assert!(!e.gated_rows().is_empty(), "{kind}");
            // A router runs on no GPU and reads no tuning variable.
            assert_eq!(d.allowed_env.is_empty(), d.router, "{kind}");
            assert_eq!(d.worker_flags.is_empty(), !d.router, "{kind}");
            for (names, _) in e.flag_rows().iter().chain(&e.gated_rows()) {
                assert!(names[0].starts_with("--"), "{kind}: {names:?}");
            }
        }
    }

    #[test]
    fn each_kind_names_its_own_series() {
        let prefix = |kind| match kind {
            EngineKind::Sglang | EngineKind::Sim => "sglang:",
            EngineKind::Vllm => "vllm:",
            EngineKind::Llamacpp => "llamacpp:",
            EngineKind::Generic => "",
            EngineKind::SglangRouter => "smg_",
        };
        for kind in EngineKind::ALL {
            let m = spec(kind).metric_mapping(&prom::parse(""));
            for rule in [
                &m.running,
                &m.queued,
                &m.kv,
                &m.gen_rate,
                &m.prompt_total,
                &m.gen_total,
                &m.requests,
            ] {
                for n in rule.names {
                    assert!(n.starts_with(prefix(kind)), "{kind}: {n}");
                }
            }
        }
    }
}
