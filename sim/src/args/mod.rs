//! Command-line flags of `fleetbench-sim`, parsed the way SGLang's argparse parser does:
//! `--flag value` or `--flag=value`, unique prefixes accepted (`--tp` for `--tp-size`), and an
//! unknown flag is an error that names it (exit status 2 in the binary).

use std::fmt;
use std::time::Duration;

mod parse;
mod table;
#[cfg(test)]
mod tests;

pub use parse::parse_args;
pub use table::usage;

/// MoE runner backends (SGLang's `--moe-runner-backend`, 0.5.9 and 0.5.23 choices). The model
/// has its own cost curve for the named variants; `Other` backends share a middle curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoeBackend {
    Auto,
    Triton,
    DeepGemm,
    FlashinferCutlass,
    Cutlass,
    FlashinferTrtllm,
    /// Any other SGLang choice (`triton_kernel`, `marlin`, `aiter`, ...).
    Other(&'static str),
}

/// Every `--moe-runner-backend` value SGLang accepts.
pub use fleetbench_engines::flags::SGLANG_MOE_RUNNER_BACKENDS as MOE_BACKEND_CHOICES;

impl MoeBackend {
    /// The backends with a cost curve of their own.
    pub const MODELLED: [MoeBackend; 6] = [
        MoeBackend::Auto,
        MoeBackend::Triton,
        MoeBackend::DeepGemm,
        MoeBackend::FlashinferCutlass,
        MoeBackend::Cutlass,
        MoeBackend::FlashinferTrtllm,
    ];

    /// The flag value (`flashinfer_cutlass`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            MoeBackend::Auto => "auto",
            MoeBackend::Triton => "triton",
            MoeBackend::DeepGemm => "deep_gemm",
            MoeBackend::FlashinferCutlass => "flashinfer_cutlass",
            MoeBackend::Cutlass => "cutlass",
            MoeBackend::FlashinferTrtllm => "flashinfer_trtllm",
            MoeBackend::Other(s) => s,
        }
    }

    /// Parses a flag value; `None` when SGLang would refuse it.
    pub fn parse(s: &str) -> Option<MoeBackend> {
        if let Some(b) = MoeBackend::MODELLED.into_iter().find(|b| b.as_str() == s) {
            return Some(b);
        }
        MOE_BACKEND_CHOICES
            .iter()
            .find(|c| **c == s)
            .map(|c| MoeBackend::Other(c))
    }
}

impl fmt::Display for MoeBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How streamed events reach the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamWrites {
    /// Each SSE event is written and flushed on its own (one write per token).
    PerToken,
    /// All events that are due go out in one write.
    Coalesced,
}

/// Faults the simulator injects on request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// `--fault nan`: output tokens are "NaN" and a NaN warning is logged.
    pub nan: bool,
    /// `--fault oom-at-start`: CUDA OOM traceback during start-up, exit 1.
    pub oom_at_start: bool,
    /// `--fault hang-after-requests N`: after N requests nothing answers any more.
    pub hang_after_requests: Option<u64>,
    /// `--fault slow-start`: start-up delay x10 (10 s when no delay was given).
    pub slow_start: bool,
    /// `--fault hang-on-peer-loss`: a rank whose peer is lost hangs (nothing answers, as in a
    /// collective that waits for NCCL's time-out) instead of exiting.
    pub hang_on_peer_loss: bool,
}

/// The effective configuration of one simulator process.
#[derive(Debug, Clone, PartialEq)]
pub struct SimArgs {
    pub host: String,
    pub port: u16,
    /// `--model-path` / `--model`: what `/v1/models` reports unless `--served-model-name` is set.
    pub model_path: String,
    pub served_model_name: Option<String>,
    /// Fixed-latency mode when either `--ttft-ms` or `--itl-ms` is given.
    pub ttft_ms: Option<f64>,
    pub itl_ms: Option<f64>,
    pub stream_writes: StreamWrites,
    pub max_running_requests: Option<u32>,
    pub disable_cuda_graph: bool,
    pub cuda_graph_max_bs: Option<u32>,
    pub moe_runner_backend: MoeBackend,
    pub tp_size: u32,
    pub mem_fraction_static: Option<f64>,
    /// `-1` disables chunking (SGLang semantics).
    pub chunked_prefill_size: Option<i64>,
    pub max_prefill_tokens: u32,
    pub context_length: Option<u32>,
    pub enable_metrics: bool,
    pub attention_backend: Option<String>,
    pub trust_remote_code: bool,
    pub log_level: String,
    pub startup_delay_s: f64,
    pub time_scale: f64,
    pub seed: u64,
    pub jitter: f64,
    pub slowdown: f64,
    pub gpu_memory_gb: f64,
    pub crash_above_batch: Option<u32>,
    pub crash_backend: Option<MoeBackend>,
    pub faults: Faults,
    /// Runtime worker threads; default: the CPUs this process may run on.
    pub workers: Option<usize>,
    /// `--kv-cache-dtype`: fp8 kinds halve the KV bytes per token, fp4 kinds quarter them.
    pub kv_cache_dtype: String,
    /// `--max-total-tokens`: caps the KV pool.
    pub max_total_tokens: Option<u32>,
    /// `--stream-response-default-include-usage`: usage chunk even without `stream_options`.
    pub default_include_usage: bool,
    /// `--stream-interval`: tokens per SSE event (SGLang's default 1).
    pub stream_interval: u32,
    /// SGLang flags accepted for compatibility that the model ignores, as given.
    pub accepted: Vec<(String, String)>,
    /// `--disable-radix-cache`: no prefix cache (see `prefix`).
    pub disable_radix_cache: bool,
    /// `--fail-rate F`: this fraction of requests is answered at once with HTTP 500.
    pub fail_rate: f64,
    /// `--max-prompt-len N`: prompts above N tokens are rejected with HTTP 400.
    pub max_prompt_len: Option<u32>,
    /// `--decode-ms-per-1k-context MS`: a decode step costs this much more per 1,000 tokens
    /// held in the KV cache (attention over the context).
    pub decode_ms_per_1k_context: f64,
    /// `--noise-seed N`: pins the step noise (jitter and drift); without it every process
    /// draws its own, so repeats of a config are independent.
    pub noise_seed: Option<u64>,
    /// `--nnodes N`: how many nodes (processes, one per host) the engine spans (SGLang).
    pub nnodes: u32,
    /// `--node-rank R`: this process's rank among them; rank 0 serves the API.
    pub node_rank: u32,
    /// `--dist-init-addr HOST:PORT`: where rank 0 listens for the other ranks (see `gang`).
    pub dist_init_addr: Option<String>,
    /// `--dist-timeout S`: how long a rank waits for its peers before it gives up (SGLang's
    /// flag; the simulator's default is 30 s, short enough for tests and the quickstart).
    pub dist_timeout_s: f64,
}

impl Default for SimArgs {
    fn default() -> Self {
        SimArgs {
            host: "127.0.0.1".into(),
            port: 30000,
            model_path: "fleetbench/sim-moe-30b-a3b".into(),
            served_model_name: None,
            ttft_ms: None,
            itl_ms: None,
            stream_writes: StreamWrites::PerToken,
            max_running_requests: None,
            disable_cuda_graph: false,
            cuda_graph_max_bs: None,
            moe_runner_backend: MoeBackend::Auto,
            tp_size: 1,
            mem_fraction_static: None,
            chunked_prefill_size: None,
            max_prefill_tokens: 16384,
            context_length: None,
            enable_metrics: false,
            attention_backend: None,
            trust_remote_code: false,
            log_level: "info".into(),
            startup_delay_s: 0.0,
            time_scale: 1.0,
            seed: 0,
            jitter: 0.02,
            slowdown: 1.0,
            gpu_memory_gb: 141.0,
            crash_above_batch: None,
            crash_backend: None,
            faults: Faults::default(),
            workers: None,
            kv_cache_dtype: "auto".into(),
            max_total_tokens: None,
            default_include_usage: false,
            stream_interval: 1,
            accepted: Vec::new(),
            disable_radix_cache: false,
            fail_rate: 0.0,
            max_prompt_len: None,
            decode_ms_per_1k_context: 0.0,
            noise_seed: None,
            nnodes: 1,
            node_rank: 0,
            dist_init_addr: None,
            dist_timeout_s: 30.0,
        }
    }
}

impl SimArgs {
    /// The model name the API reports.
    pub fn served_model_name(&self) -> &str {
        self.served_model_name
            .as_deref()
            .unwrap_or(&self.model_path)
    }

    /// `Some((ttft, itl))` in fixed-latency mode.
    pub fn fixed_latency(&self) -> Option<(Duration, Duration)> {
        if self.ttft_ms.is_none() && self.itl_ms.is_none() {
            return None;
        }
        let ms = |v: Option<f64>| Duration::from_secs_f64(v.unwrap_or(0.0) / 1e3);
        Some((ms(self.ttft_ms), ms(self.itl_ms)))
    }

    /// Start-up delay in wall-clock time, slow-start fault included (not time-scaled: it is a
    /// control of the simulator, not a simulated engine duration).
    pub fn effective_startup_delay(&self) -> Duration {
        let base = self.startup_delay_s;
        let s = if self.faults.slow_start {
            if base > 0.0 { base * 10.0 } else { 10.0 }
        } else {
            base
        };
        Duration::from_secs_f64(s)
    }
}

/// Why the command line was refused. Messages follow argparse's wording.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    /// `-h` / `--help` was given: the caller prints [`usage`] and exits 0.
    #[error("help requested")]
    HelpRequested,
    /// A flag the simulator (like SGLang) does not know.
    #[error("unrecognized arguments: {flag}")]
    UnknownFlag { flag: String },
    /// A prefix that matches more than one flag.
    #[error("ambiguous option: {flag} could match {candidates}")]
    Ambiguous { flag: String, candidates: String },
    /// A flag that takes a value was last on the line.
    #[error("argument {flag}: expected one argument")]
    MissingValue { flag: String },
    /// A value that does not parse or is out of range.
    #[error("argument {flag}: invalid {expected} value: '{value}'")]
    BadValue {
        flag: String,
        value: String,
        expected: String,
    },
    /// A value outside a fixed set of choices.
    #[error("argument {flag}: invalid choice: '{value}' (choose from {choices})")]
    BadChoice {
        flag: String,
        value: String,
        choices: String,
    },
    /// A switch was given a value (`--disable-cuda-graph=1`).
    #[error("argument {flag}: ignored explicit argument '{value}'")]
    UnexpectedValue { flag: String, value: String },
}
