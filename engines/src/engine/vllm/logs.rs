//! vLLM (V1 engine, 0.33) start-up lines.

use std::sync::LazyLock;

use regex::Regex;

use crate::logs::{LogFact, LogParser, repr_to_json_object, strip_prefix};

static KV_SIZE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x)?",
    )
    .expect("valid regex")
});

static CONCURRENCY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
        .expect("valid regex")
});

static MODEL_LOAD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Model loading took ([\d.]+) ?GiB(?: memory)? and ([\d.]+) ?s")
        .expect("valid regex")
});

static KV_MEM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Available KV cache memory: ([\d.]+) ?GiB").expect("valid regex")
});

static GRAPH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Graph capturing finished in ([\d.]+) secs?(?:, took ([\d.]+) GiB)?")
        .expect("valid regex")
});

static INIT_ENGINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
        .expect("valid regex")
});

pub(super) struct VllmParser;

impl LogParser for VllmParser {
    fn parse_line(&mut self, line: &str) -> Vec<LogFact> {
        let stripped = strip_prefix(line);
        if !stripped.is_rank_zero() {
            return Vec::new();
        }
        let msg = stripped.message.trim();
        let mut out = Vec::new();
        if let Some(rest) = msg.strip_prefix("non-default args:") {
            if let Some(json) = repr_to_json_object(rest) {
                out.push(LogFact::new("non_default_args", json));
            }
        } else if let Some(c) = KV_SIZE.captures(msg) {
            out.push(LogFact::new("gpu_kv_cache_tokens", c[1].replace(',', "")));
            if let (Some(len), Some(x)) = (c.get(2), c.get(3)) {
                out.push(LogFact::new("max_concurrency", x.as_str()));
                out.push(LogFact::new(
                    "max_concurrency_tokens_per_request",
                    len.as_str().replace(',', ""),
                ));
            }
        } else if let Some(c) = CONCURRENCY.captures(msg) {
            // Older builds logged the concurrency on its own line.
            out.push(LogFact::new("max_concurrency", &c[2]));
            out.push(LogFact::new(
                "max_concurrency_tokens_per_request",
                c[1].replace(',', ""),
            ));
        } else if let Some(c) = MODEL_LOAD.captures(msg) {
            out.push(LogFact::new("model_load_gib", &c[1]));
            out.push(LogFact::new("model_load_s", &c[2]));
        } else if let Some(c) = KV_MEM.captures(msg) {
            out.push(LogFact::new("available_kv_cache_gib", &c[1]));
        } else if let Some(c) = GRAPH.captures(msg) {
            out.push(LogFact::new("graph_capture_s", &c[1]));
            if let Some(g) = c.get(2) {
                out.push(LogFact::new("graph_capture_gib", g.as_str()));
            }
        } else if let Some(c) = INIT_ENGINE.captures(msg) {
            out.push(LogFact::new("init_engine_s", &c[1]));
        } else if msg == "Application startup complete." {
            out.push(LogFact::new("ready", "true"));
        }
        out
    }
}
