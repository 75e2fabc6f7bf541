//! llama.cpp `llama-server` start-up lines (current `0.00.256.855 I srv  load_model: ...`
//! format and the older untimed one).

use std::sync::LazyLock;

use regex::Regex;

use crate::logs::{LogFact, LogParser, strip_prefix};

static SLOTS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bn_slots\s*=\s*(\d+)").expect("valid regex"));

static CTX_SLOT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bn_ctx_slot\s*=\s*(\d+)").expect("valid regex"));

/// `llama_context: n_ctx = 4096` (and older `llama_new_context_with_model: n_ctx = 2048`).
static CONTEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:llama_context|llama_new_context_with_model):\s+(n_ctx|n_batch|n_ubatch)\s+=\s+(\d+)\s*$")
        .expect("valid regex")
});

static PRINT_INFO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:print_info|llm_load_print_meta):\s+(n_ctx_train|model params|general\.name|file type)\s+=\s+(.+?)\s*$")
        .expect("valid regex")
});

static KV_SIZE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^llama_kv_cache(?:_unified)?: size =\s+([\d.]+) MiB").expect("valid regex")
});

static THREADS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"threadpool init, n_threads = (\d+)").expect("valid regex"));

/// `load_model: initializing, n_slots = 64, n_ctx_slot = 1024, kv_unified = 'false'`: one KV
/// cache shared by all slots, or a fixed share each (default verbosity, CUDA builds too).
static KV_UNIFIED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bkv_unified = '(true|false)'").expect("valid regex"));

/// `common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by
/// user to 99, abort`: `--fit` (on by default) gave up, so the flags given are used as they are
/// and may not fit the GPU (recorded on an H200, just before a KV-cache allocation failed).
static FIT_FAILED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"common_fit_params: failed to fit params to free device memory: (.+?)\s*$")
        .expect("valid regex")
});

/// `llama_context: n_ctx_seq (4194304) > n_ctx_train (131072) -- possible training context
/// overflow`: at default verbosity the only line that gives the context per sequence.
static CTX_OVERFLOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"n_ctx_seq \((\d+)\) > n_ctx_train \((\d+)\)").expect("valid regex")
});

/// `load_model: prompt cache is enabled, size limit: 8192 MiB` (verbose log): the host-memory
/// cache that serves a repeated prompt without evaluating it.
static PROMPT_CACHE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"prompt cache is enabled, size limit: (\d+) MiB").expect("valid regex")
});

/// llama.cpp's parser. `n_ctx_slot` repeats on every request's log line (and once per slot in
/// older builds), so slot facts are reported only when their value changes.
#[derive(Debug, Default)]
pub(super) struct LlamaCppParser {
    n_slots: Option<String>,
    n_ctx_slot: Option<String>,
}

impl LogParser for LlamaCppParser {
    fn parse_line(&mut self, line: &str) -> Vec<LogFact> {
        let stripped = strip_prefix(line);
        let msg = stripped.message.trim();
        let mut out = Vec::new();
        if let Some(c) = SLOTS.captures(msg)
            && self.n_slots.as_deref() != Some(&c[1])
        {
            self.n_slots = Some(c[1].to_string());
            out.push(LogFact::new("n_slots", &c[1]));
        }
        if let Some(c) = CTX_SLOT.captures(msg)
            && self.n_ctx_slot.as_deref() != Some(&c[1])
        {
            self.n_ctx_slot = Some(c[1].to_string());
            out.push(LogFact::new("n_ctx_slot", &c[1]));
        }
        if let Some(c) = KV_UNIFIED.captures(msg) {
            out.push(LogFact::new("kv_unified", &c[1]));
        }
        if let Some(c) = FIT_FAILED.captures(msg) {
            out.push(LogFact::new("fit_failed", &c[1]));
        } else if let Some(c) = CTX_OVERFLOW.captures(msg) {
            out.push(LogFact::new("n_ctx_seq", &c[1]));
            out.push(LogFact::new("n_ctx_train", &c[2]));
        } else if let Some(c) = PROMPT_CACHE.captures(msg) {
            out.push(LogFact::new("prompt_cache_mib", &c[1]));
        } else if let Some(c) = CONTEXT.captures(msg) {
            out.push(LogFact::new(&c[1], &c[2]));
        } else if let Some(c) = PRINT_INFO.captures(msg) {
            let key = match &c[1] {
                "n_ctx_train" => "n_ctx_train",
                "model params" => "model_params",
                "general.name" => "model_name",
                _ => "model_file_type",
            };
            out.push(LogFact::new(key, &c[2]));
        } else if let Some(c) = KV_SIZE.captures(msg) {
            out.push(LogFact::new("kv_cache_mib", &c[1]));
        } else if let Some(c) = THREADS.captures(msg) {
            out.push(LogFact::new("n_threads", &c[1]));
        } else if msg.starts_with("llama_server: listening on ")
            || msg.contains("server is listening on ")
            || msg.contains("HTTP server listening")
        {
            out.push(LogFact::new("ready", "true"));
        }
        out
    }
}
