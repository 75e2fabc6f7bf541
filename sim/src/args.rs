//! Command-line flags of `fleetbench-sim`, parsed the way SGLang's argparse parser does:
//! `--flag value` or `--flag=value`, unique prefixes accepted (`--tp` for `--tp-size`), and an
//! unknown flag is an error that names it (exit status 2 in the binary).

use std::fmt;
use std::time::Duration;

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
pub const MOE_BACKEND_CHOICES: &[&str] = &[
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "flashinfer_megamoe",
    "cutlass",
    "aiter",
    "marlin",
    "humming",
    "experimental_sgl_marlin",
    "lora_cutedsl",
    "lora_triton",
    "lora_marlin",
    "hpc_ops",
    "megamoe",
    "intel_xpu",
];

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

/// The one-line usage argparse prints before an error.
pub fn usage() -> String {
    let mut s = String::from("usage: fleetbench-sim [-h]");
    for f in FLAGS {
        if f.canonical != f.name {
            continue;
        }
        match f.kind {
            Kind::Switch | Kind::Accept(Accepted::Switch) => s.push_str(&format!(" [{}]", f.name)),
            _ => s.push_str(&format!(
                " [{} {}]",
                f.name,
                f.name
                    .trim_start_matches("--")
                    .replace('-', "_")
                    .to_uppercase()
            )),
        }
    }
    s
}

#[derive(Clone, Copy)]
enum Kind {
    Switch,
    Value,
    /// Accepted for SGLang compatibility, checked for type, no effect on the model.
    Accept(Accepted),
}

#[derive(Clone, Copy)]
enum Accepted {
    Switch,
    Int,
    Float,
    Str,
    Choice(&'static [&'static str]),
}

struct Flag {
    name: &'static str,
    canonical: &'static str,
    kind: Kind,
}

const fn v(name: &'static str) -> Flag {
    Flag {
        name,
        canonical: name,
        kind: Kind::Value,
    }
}
const fn sw(name: &'static str) -> Flag {
    Flag {
        name,
        canonical: name,
        kind: Kind::Switch,
    }
}
const fn acc(name: &'static str, a: Accepted) -> Flag {
    Flag {
        name,
        canonical: name,
        kind: Kind::Accept(a),
    }
}
const fn alias(name: &'static str, canonical: &'static str, kind: Kind) -> Flag {
    Flag {
        name,
        canonical,
        kind,
    }
}

const FLAGS: &[Flag] = &[
    v("--host"),
    v("--port"),
    v("--model-path"),
    alias("--model", "--model-path", Kind::Value),
    v("--served-model-name"),
    v("--ttft-ms"),
    v("--itl-ms"),
    v("--stream-writes"),
    v("--max-running-requests"),
    sw("--disable-cuda-graph"),
    v("--cuda-graph-max-bs"),
    v("--moe-runner-backend"),
    v("--tp-size"),
    alias("--tensor-parallel-size", "--tp-size", Kind::Value),
    v("--mem-fraction-static"),
    v("--chunked-prefill-size"),
    v("--max-prefill-tokens"),
    v("--context-length"),
    sw("--enable-metrics"),
    v("--attention-backend"),
    sw("--trust-remote-code"),
    v("--log-level"),
    v("--startup-delay-s"),
    v("--time-scale"),
    v("--seed"),
    alias("--random-seed", "--seed", Kind::Value),
    v("--jitter"),
    v("--slowdown"),
    v("--gpu-memory-gb"),
    v("--crash-above-batch"),
    v("--crash-backend"),
    v("--fault"),
    v("--workers"),
    v("--kv-cache-dtype"),
    v("--max-total-tokens"),
    sw("--stream-response-default-include-usage"),
    v("--cuda-graph-max-bs-decode"),
    v("--stream-interval"),
    v("--cuda-graph-backend-decode"),
    // Accepted as SGLang accepts them; the model does not depend on them.
    acc("--dp-size", Accepted::Int),
    alias(
        "--data-parallel-size",
        "--dp-size",
        Kind::Accept(Accepted::Int),
    ),
    acc("--ep-size", Accepted::Int),
    alias(
        "--expert-parallel-size",
        "--ep-size",
        Kind::Accept(Accepted::Int),
    ),
    alias("--ep", "--ep-size", Kind::Accept(Accepted::Int)),
    acc("--pp-size", Accepted::Int),
    alias(
        "--pipeline-parallel-size",
        "--pp-size",
        Kind::Accept(Accepted::Int),
    ),
    acc("--attn-dp-size", Accepted::Int),
    acc("--enable-dp-attention", Accepted::Switch),
    acc("--max-queued-requests", Accepted::Int),
    acc("--disable-cuda-graph-padding", Accepted::Switch),
    acc("--cuda-graph-max-bs-prefill", Accepted::Int),
    acc(
        "--cuda-graph-backend-prefill",
        Accepted::Choice(GRAPH_BACKENDS),
    ),
    acc("--cuda-graph-config", Accepted::Str),
    acc(
        "--moe-a2a-backend",
        Accepted::Choice(&[
            "none",
            "deepep",
            "mooncake",
            "mori",
            "nixl",
            "ascend_fuseep",
            "flashinfer",
        ]),
    ),
    acc(
        "--prefill-attention-backend",
        Accepted::Choice(ATTENTION_BACKENDS),
    ),
    acc(
        "--decode-attention-backend",
        Accepted::Choice(ATTENTION_BACKENDS),
    ),
    acc(
        "--schedule-policy",
        Accepted::Choice(&[
            "lpm",
            "random",
            "fcfs",
            "dfs-weight",
            "lof",
            "priority",
            "routing-key",
            "hrrn",
        ]),
    ),
    acc("--schedule-conservativeness", Accepted::Float),
    acc("--page-size", Accepted::Int),
    acc("--num-continuous-decode-steps", Accepted::Int),
    acc("--enable-torch-compile", Accepted::Switch),
    acc("--torch-compile-max-bs", Accepted::Int),
    acc("--disable-radix-cache", Accepted::Switch),
    acc("--enable-mixed-chunk", Accepted::Switch),
    acc("--disable-overlap-schedule", Accepted::Switch),
    acc("--enable-nan-detection", Accepted::Switch),
    acc(
        "--sampling-backend",
        Accepted::Choice(&["flashinfer", "pytorch", "ascend", "intel_xpu"]),
    ),
    acc(
        "--grammar-backend",
        Accepted::Choice(&["xgrammar", "outlines", "llguidance", "none"]),
    ),
    acc(
        "--dtype",
        Accepted::Choice(&["auto", "half", "float16", "bfloat16", "float", "float32"]),
    ),
    acc("--quantization", Accepted::Str),
    acc("--watchdog-timeout", Accepted::Float),
    acc("--speculative-algorithm", Accepted::Str),
    acc("--speculative-num-steps", Accepted::Int),
    acc("--speculative-eagle-topk", Accepted::Int),
    acc("--speculative-num-draft-tokens", Accepted::Int),
    acc("--tokenizer-path", Accepted::Str),
    acc("--skip-server-warmup", Accepted::Switch),
];

const GRAPH_BACKENDS: &[&str] = &["full", "breakable", "disabled"];

const KV_CACHE_DTYPES: &[&str] = &[
    "auto",
    "fp8_e5m2",
    "fp8_e4m3",
    "mxfp8",
    "bf16",
    "bfloat16",
    "nvfp4",
    "fp4_mx_block16",
    "fp4_e2m1",
];

const ATTENTION_BACKENDS: &[&str] = &[
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "hpc_ops",
    "dual_chunk_flash_attn",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
];

fn choice(flag: &str, value: &str, choices: &[&str]) -> Result<(), ArgError> {
    if choices.contains(&value) {
        return Ok(());
    }
    Err(ArgError::BadChoice {
        flag: flag.to_string(),
        value: value.to_string(),
        choices: choices
            .iter()
            .map(|b| format!("'{b}'"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

fn lookup(given: &str) -> Result<&'static Flag, ArgError> {
    if let Some(f) = FLAGS.iter().find(|f| f.name == given) {
        return Ok(f);
    }
    let matches: Vec<&Flag> = FLAGS.iter().filter(|f| f.name.starts_with(given)).collect();
    let mut canon: Vec<&str> = matches.iter().map(|f| f.canonical).collect();
    canon.dedup();
    match (matches.first(), canon.len()) {
        (Some(f), 1) if given.len() > 2 => Ok(f),
        (_, n) if n > 1 && given.len() > 2 => Err(ArgError::Ambiguous {
            flag: given.to_string(),
            candidates: matches
                .iter()
                .map(|f| f.name)
                .collect::<Vec<_>>()
                .join(", "),
        }),
        _ => Err(ArgError::UnknownFlag {
            flag: given.to_string(),
        }),
    }
}

fn num<T: std::str::FromStr>(flag: &str, value: &str, expected: &str) -> Result<T, ArgError> {
    value.parse().map_err(|_| ArgError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    })
}

fn float_in(flag: &str, value: &str, lo: f64, hi: f64) -> Result<f64, ArgError> {
    let x: f64 = num(flag, value, "float")?;
    if !(x.is_finite() && x >= lo && x <= hi) {
        return Err(ArgError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: format!("float in [{lo}, {hi}]"),
        });
    }
    Ok(x)
}

fn positive_int(flag: &str, value: &str) -> Result<u32, ArgError> {
    let x: u32 = num(flag, value, "int")?;
    if x == 0 {
        return Err(ArgError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: "positive int".into(),
        });
    }
    Ok(x)
}

fn backend(flag: &str, value: &str) -> Result<MoeBackend, ArgError> {
    MoeBackend::parse(value).ok_or_else(|| ArgError::BadChoice {
        flag: flag.to_string(),
        value: value.to_string(),
        choices: MOE_BACKEND_CHOICES
            .iter()
            .map(|b| format!("'{b}'"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Parses the flags (without the program name).
pub fn parse_args(args: &[String]) -> Result<SimArgs, ArgError> {
    let mut out = SimArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-h" || arg == "--help" {
            return Err(ArgError::HelpRequested);
        }
        if !arg.starts_with("--") {
            return Err(ArgError::UnknownFlag { flag: arg.clone() });
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let flag = lookup(name)?;
        let switch = matches!(flag.kind, Kind::Switch | Kind::Accept(Accepted::Switch));
        let value = match (switch, inline) {
            (true, Some(v)) => {
                return Err(ArgError::UnexpectedValue {
                    flag: flag.canonical.to_string(),
                    value: v,
                });
            }
            (true, None) => String::new(),
            (false, Some(v)) => v,
            (false, None) => match args.get(i) {
                Some(v) if !v.starts_with("--") || v.parse::<f64>().is_ok() => {
                    i += 1;
                    v.clone()
                }
                _ => {
                    return Err(ArgError::MissingValue {
                        flag: flag.canonical.to_string(),
                    });
                }
            },
        };
        let f = flag.canonical;
        let v = value.as_str();
        if let Kind::Accept(a) = flag.kind {
            match a {
                Accepted::Switch | Accepted::Str => {}
                Accepted::Int => {
                    num::<i64>(f, v, "int")?;
                }
                Accepted::Float => {
                    num::<f64>(f, v, "float")?;
                }
                Accepted::Choice(c) => choice(f, v, c)?,
            }
            let shown = if switch { "True".to_string() } else { value };
            out.accepted.push((f.to_string(), shown));
            continue;
        }
        match f {
            "--host" => out.host = value,
            "--port" => out.port = num(f, v, "int")?,
            "--model-path" => out.model_path = value,
            "--served-model-name" => out.served_model_name = Some(value),
            "--ttft-ms" => out.ttft_ms = Some(float_in(f, v, 0.0, 3.6e6)?),
            "--itl-ms" => out.itl_ms = Some(float_in(f, v, 0.0, 3.6e6)?),
            "--stream-writes" => {
                out.stream_writes = match v {
                    "per-token" => StreamWrites::PerToken,
                    "coalesced" => StreamWrites::Coalesced,
                    _ => {
                        return Err(ArgError::BadChoice {
                            flag: f.into(),
                            value,
                            choices: "'per-token', 'coalesced'".into(),
                        });
                    }
                }
            }
            "--max-running-requests" => out.max_running_requests = Some(positive_int(f, v)?),
            "--disable-cuda-graph" => out.disable_cuda_graph = true,
            "--cuda-graph-max-bs" => out.cuda_graph_max_bs = Some(positive_int(f, v)?),
            "--moe-runner-backend" => out.moe_runner_backend = backend(f, v)?,
            "--tp-size" => {
                let tp = positive_int(f, v)?;
                if !tp.is_power_of_two() || tp > 16 {
                    return Err(ArgError::BadValue {
                        flag: f.into(),
                        value,
                        expected: "power-of-two int <= 16".into(),
                    });
                }
                out.tp_size = tp;
            }
            "--mem-fraction-static" => out.mem_fraction_static = Some(float_in(f, v, 0.01, 1.0)?),
            "--chunked-prefill-size" => {
                let c: i64 = num(f, v, "int")?;
                if c == 0 || c < -1 {
                    return Err(ArgError::BadValue {
                        flag: f.into(),
                        value,
                        expected: "positive int or -1".into(),
                    });
                }
                out.chunked_prefill_size = Some(c);
            }
            "--max-prefill-tokens" => out.max_prefill_tokens = positive_int(f, v)?,
            "--context-length" => out.context_length = Some(positive_int(f, v)?),
            "--enable-metrics" => out.enable_metrics = true,
            "--attention-backend" => {
                choice(f, v, ATTENTION_BACKENDS)?;
                out.attention_backend = Some(value);
            }
            "--kv-cache-dtype" => {
                choice(f, v, KV_CACHE_DTYPES)?;
                out.kv_cache_dtype = value;
            }
            "--max-total-tokens" => out.max_total_tokens = Some(positive_int(f, v)?),
            "--stream-response-default-include-usage" => out.default_include_usage = true,
            "--stream-interval" => out.stream_interval = positive_int(f, v)?,
            "--cuda-graph-max-bs-decode" => out.cuda_graph_max_bs = Some(positive_int(f, v)?),
            "--cuda-graph-backend-decode" => {
                choice(f, v, GRAPH_BACKENDS)?;
                out.disable_cuda_graph = v == "disabled";
            }
            "--trust-remote-code" => out.trust_remote_code = true,
            "--log-level" => out.log_level = value,
            "--startup-delay-s" => out.startup_delay_s = float_in(f, v, 0.0, 86400.0)?,
            "--time-scale" => out.time_scale = float_in(f, v, 1e-6, 1e6)?,
            "--seed" => out.seed = num(f, v, "int")?,
            "--jitter" => out.jitter = float_in(f, v, 0.0, 0.5)?,
            "--slowdown" => out.slowdown = float_in(f, v, 0.01, 100.0)?,
            "--gpu-memory-gb" => out.gpu_memory_gb = float_in(f, v, 1.0, 10000.0)?,
            "--crash-above-batch" => out.crash_above_batch = Some(positive_int(f, v)?),
            "--crash-backend" => out.crash_backend = Some(backend(f, v)?),
            "--workers" => out.workers = Some(positive_int(f, v)? as usize),
            "--fault" => {
                let (kind, arg) = match v.split_once('=') {
                    Some((k, a)) => (k, Some(a.to_string())),
                    None => (v, None),
                };
                match kind {
                    "nan" => out.faults.nan = true,
                    "oom-at-start" => out.faults.oom_at_start = true,
                    "slow-start" => out.faults.slow_start = true,
                    "hang-after-requests" => {
                        let n = match arg {
                            Some(a) => a,
                            None => match args.get(i) {
                                Some(a) if !a.starts_with("--") => {
                                    i += 1;
                                    a.clone()
                                }
                                _ => {
                                    return Err(ArgError::MissingValue {
                                        flag: "--fault hang-after-requests".into(),
                                    });
                                }
                            },
                        };
                        out.faults.hang_after_requests =
                            Some(num("--fault hang-after-requests", &n, "int")?);
                    }
                    _ => {
                        return Err(ArgError::BadChoice {
                            flag: f.into(),
                            value,
                            choices: "'nan', 'oom-at-start', 'hang-after-requests N', 'slow-start'"
                                .into(),
                        });
                    }
                }
            }
            other => unreachable!("flag table entry {other} without a handler"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<SimArgs, ArgError> {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse_args(&v)
    }

    #[test]
    fn parses_sglang_flags_and_aliases() {
        let a = p(
            "--host 127.0.0.1 --port 0 --model-path m --tp 2 --moe-runner-backend=triton \
                   --disable-cuda-graph --max-running-requests 64 --enable-metrics",
        )
        .unwrap();
        assert_eq!(a.port, 0);
        assert_eq!(a.tp_size, 2);
        assert_eq!(a.moe_runner_backend, MoeBackend::Triton);
        assert!(a.disable_cuda_graph && a.enable_metrics);
        assert_eq!(a.max_running_requests, Some(64));
        assert_eq!(a.fixed_latency(), None);
    }

    #[test]
    fn unknown_flag_is_named() {
        let e = p("--port 1 --frobnicate 3").unwrap_err();
        assert_eq!(e.to_string(), "unrecognized arguments: --frobnicate");
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = p("--max-running-requests lots").unwrap_err();
        assert_eq!(
            e.to_string(),
            "argument --max-running-requests: invalid int value: 'lots'"
        );
        let e = p("--moe-runner-backend magic").unwrap_err();
        assert!(e.to_string().contains("invalid choice: 'magic'"), "{e}");
        assert_eq!(
            p("--port").unwrap_err(),
            ArgError::MissingValue {
                flag: "--port".into()
            }
        );
    }

    #[test]
    fn sglang_compat_flags_are_accepted_and_typed() {
        let a = p(
            "--dp-size 2 --enable-mixed-chunk --schedule-policy lpm --kv-cache-dtype fp8_e4m3 \
                   --cuda-graph-backend-decode disabled --moe-runner-backend marlin",
        )
        .unwrap();
        assert!(a.disable_cuda_graph);
        assert_eq!(a.kv_cache_dtype, "fp8_e4m3");
        assert_eq!(a.moe_runner_backend, MoeBackend::Other("marlin"));
        assert_eq!(a.accepted.len(), 3);
        assert!(
            p("--dp-size two")
                .unwrap_err()
                .to_string()
                .contains("--dp-size")
        );
        assert!(
            p("--schedule-policy best")
                .unwrap_err()
                .to_string()
                .contains("invalid choice")
        );
        assert!(matches!(
            p("--enable-mixed-chunk=1").unwrap_err(),
            ArgError::UnexpectedValue { .. }
        ));
    }

    #[test]
    fn ambiguous_prefix() {
        assert!(matches!(
            p("--c 1").unwrap_err(),
            ArgError::Ambiguous { .. }
        ));
    }

    #[test]
    fn faults_and_fixed_mode() {
        let a = p("--ttft-ms 50 --itl-ms 5 --fault hang-after-requests 3 --fault nan").unwrap();
        assert_eq!(
            a.fixed_latency(),
            Some((Duration::from_millis(50), Duration::from_millis(5)))
        );
        assert_eq!(a.faults.hang_after_requests, Some(3));
        assert!(a.faults.nan);
        let a = p("--fault slow-start --startup-delay-s 0.5").unwrap();
        assert_eq!(a.effective_startup_delay(), Duration::from_secs(5));
    }
}
