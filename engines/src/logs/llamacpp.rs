//! llama.cpp `llama-server` start-up lines (current `0.00.256.855 I srv  load_model: ...`
//! format and the older untimed one).

use std::sync::LazyLock;

use regex::Regex;

use super::{LogFact, LogParser, strip_prefix};

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
        if let Some(c) = CONTEXT.captures(msg) {
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
