//! Facts read from an engine's log lines: the effective server args, KV-cache size, batch
//! limits, load and capture times, readiness. One parser per kind; each takes raw lines
//! (logger prefix, ANSI colours and all) and fails soft: a line it does not know yields nothing.
//! The parsers live in their engine's module (`crate::engine::<kind>::logs`); this module holds
//! what they share.

mod prefix;

pub use prefix::{Stripped, strip_prefix};

use crate::EngineKind;

/// One fact read from a log line, e.g. `kv_cache_tokens = 383872`.
///
/// Keys per kind:
/// - sglang/sim: `server_args` (a JSON object), `kv_cache_tokens`, `kv_cache_dtype`,
///   `kv_cache_gb`, `max_total_num_tokens`, `chunked_prefill_size`, `max_prefill_tokens`,
///   `max_running_requests`, `context_len`, `available_gpu_mem_gb`, `weight_load_s`,
///   `weight_mem_gb`, `cuda_graph_s` (total of the captures so far), `ready`.
/// - vllm: `non_default_args` (a JSON object), `gpu_kv_cache_tokens`, `max_concurrency`,
///   `max_concurrency_tokens_per_request`, `model_load_s`, `model_load_gib`,
///   `available_kv_cache_gib`, `graph_capture_s`, `graph_capture_gib`, `init_engine_s`,
///   `ready`.
/// - llamacpp: `n_slots`, `n_ctx_slot`, `n_ctx`, `n_batch`, `n_ubatch`, `n_ctx_train`,
///   `model_name`, `model_params`, `model_file_type`, `kv_cache_mib`, `n_threads`, `ready`.
///
/// Numbers are written without units (seconds, GB/GiB/MiB as the key says).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogFact {
    pub key: String,
    pub value: String,
}

impl LogFact {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        LogFact {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A line-by-line fact reader. It may keep state between lines (a fact split over lines, or a
/// running total).
pub trait LogParser: Send {
    fn parse_line(&mut self, line: &str) -> Vec<LogFact>;
}

/// The parser for `kind`. `sim` imitates SGLang's log; `generic` knows no facts.
pub fn parser(kind: EngineKind) -> Box<dyn LogParser> {
    crate::engine::spec(kind).log_parser()
}

/// Runs `kind`'s parser over all `lines` and returns every fact in order.
pub fn parse_all<'a>(kind: EngineKind, lines: impl IntoIterator<Item = &'a str>) -> Vec<LogFact> {
    let mut p = parser(kind);
    lines.into_iter().flat_map(|l| p.parse_line(l)).collect()
}

/// The parser of an engine whose log fleetbench does not know (`generic`).
pub(crate) struct NoFacts;

impl LogParser for NoFacts {
    fn parse_line(&mut self, _line: &str) -> Vec<LogFact> {
        Vec::new()
    }
}

/// Reads a Python repr (dict or dataclass) into a JSON object string; `None` when it is not
/// one, so a format change yields no fact rather than a wrong one.
pub(crate) fn repr_to_json_object(repr: &str) -> Option<String> {
    match crate::pyrepr::parse(repr.trim()) {
        Ok(v @ serde_json::Value::Object(_)) => Some(v.to_string()),
        _ => None,
    }
}
