//! The built-in flag tables. Names and choices come from the engines' own argument parsers
//! (sglang 0.5.9 `server_args.py`, 0.5.23 `arg_groups/` and main's `server_args.py`
//! (`MOE_A2A_BACKEND_CHOICES`), vllm 0.33 `arg_utils.py` (`human_readable_int`, deprecated
//! flags), `llama-server --help` of the packaged build). The agent reads the engine's own
//! `--help` at start and narrows or extends these (see `help`); they stand alone only when the
//! engine cannot be asked. Where a choice list changed between versions,
//! the union is allowed: refusing a value one supported version accepts would block a real
//! experiment, while the engine itself still rejects a value its version lacks.

use std::collections::BTreeMap;

use super::{FlagRule, FlagType, JsonKey};
use crate::EngineKind;

/// One row: the flag's names (canonical first, then aliases) and its type.
type Row = (&'static [&'static str], FlagType);

fn int(min: i64) -> FlagType {
    FlagType::Int {
        min: Some(min),
        max: None,
    }
}

fn human_int(min: i64) -> FlagType {
    FlagType::HumanInt { min: Some(min) }
}

fn any_int() -> FlagType {
    FlagType::Int {
        min: None,
        max: None,
    }
}

fn float(min: f64, max: Option<f64>) -> FlagType {
    FlagType::Float {
        min: Some(min),
        max,
    }
}

fn choice(values: &[&str]) -> FlagType {
    FlagType::Choice {
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

const SW: FlagType = FlagType::Switch;
const STR: FlagType = FlagType::String;

/// SGLang `--moe-runner-backend` choices, 0.5.9 and 0.5.23 together.
pub const SGLANG_MOE_RUNNER_BACKENDS: &[&str] = &[
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

/// SGLang `--moe-a2a-backend` choices: 0.5.9, 0.5.23 and main (`MOE_A2A_BACKEND_CHOICES`).
pub const SGLANG_MOE_A2A_BACKENDS: &[&str] = &[
    "none",
    "deepep",
    "mooncake",
    "mori",
    "nixl",
    "ascend_fuseep",
    "flashinfer",
    "megamoe",
    "deepep_v2",
    "pplx",
    "ascend_tp",
];

/// SGLang attention backends, 0.5.9 and 0.5.23 together.
pub const SGLANG_ATTENTION_BACKENDS: &[&str] = &[
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

/// SGLang `--kv-cache-dtype` values, 0.5.9 and 0.5.23 together.
pub const SGLANG_KV_CACHE_DTYPES: &[&str] = &[
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

const SGLANG_SCHEDULE_POLICIES: &[&str] = &[
    "lpm",
    "random",
    "fcfs",
    "dfs-weight",
    "lof",
    "priority",
    "routing-key",
    "hrrn",
    "shortest-prefill-first",
];

const DTYPES: &[&str] = &["auto", "half", "float16", "bfloat16", "float", "float32"];

fn sglang_rows() -> Vec<Row> {
    vec![
        // `--tp`/`--dp` are what argparse's prefix matching makes of `--tp-size`/`--dp-size`
        // and what recipes write; they are canonicalised, so the engine sees the full name.
        (&["--tp-size", "--tensor-parallel-size", "--tp"], int(1)),
        (&["--dp-size", "--data-parallel-size", "--dp"], int(1)),
        (&["--ep-size", "--expert-parallel-size", "--ep"], int(1)),
        (&["--pp-size", "--pipeline-parallel-size"], int(1)),
        (&["--attn-dp-size"], int(1)),
        (&["--enable-dp-attention"], SW),
        (&["--max-running-requests"], int(1)),
        (&["--max-queued-requests"], int(1)),
        (&["--mem-fraction-static"], float(0.0, Some(1.0))),
        (&["--disable-cuda-graph"], SW),
        (&["--disable-cuda-graph-padding"], SW),
        // 0 is valid upstream: no decode batch is captured.
        (&["--cuda-graph-max-bs"], int(0)),
        (&["--cuda-graph-max-bs-decode"], int(1)),
        (&["--cuda-graph-max-bs-prefill"], int(1)),
        (
            &["--cuda-graph-backend-decode"],
            choice(&["full", "breakable", "disabled"]),
        ),
        (
            &["--cuda-graph-backend-prefill"],
            choice(&["full", "breakable", "disabled"]),
        ),
        (
            &["--moe-runner-backend"],
            choice(SGLANG_MOE_RUNNER_BACKENDS),
        ),
        (&["--moe-a2a-backend"], choice(SGLANG_MOE_A2A_BACKENDS)),
        (&["--attention-backend"], choice(SGLANG_ATTENTION_BACKENDS)),
        (
            &["--prefill-attention-backend"],
            choice(SGLANG_ATTENTION_BACKENDS),
        ),
        (
            &["--decode-attention-backend"],
            choice(SGLANG_ATTENTION_BACKENDS),
        ),
        (&["--chunked-prefill-size"], int(-1)),
        (&["--max-prefill-tokens"], int(1)),
        (&["--kv-cache-dtype"], choice(SGLANG_KV_CACHE_DTYPES)),
        (&["--max-total-tokens"], int(1)),
        (&["--context-length"], int(1)),
        (&["--schedule-policy"], choice(SGLANG_SCHEDULE_POLICIES)),
        (&["--schedule-conservativeness"], float(0.0, None)),
        (&["--page-size"], int(1)),
        (&["--stream-interval"], int(1)),
        (&["--num-continuous-decode-steps"], int(1)),
        (&["--enable-metrics"], SW),
        (&["--enable-torch-compile"], SW),
        (&["--torch-compile-max-bs"], int(1)),
        (&["--disable-radix-cache"], SW),
        (&["--enable-mixed-chunk"], SW),
        (&["--disable-overlap-schedule"], SW),
        (&["--enable-nan-detection"], SW),
        (
            &["--sampling-backend"],
            choice(&["flashinfer", "pytorch", "ascend", "intel_xpu"]),
        ),
        (
            &["--grammar-backend"],
            choice(&["xgrammar", "outlines", "llguidance", "none"]),
        ),
        (&["--dtype"], choice(DTYPES)),
        (&["--quantization"], STR),
        (&["--served-model-name"], STR),
        (&["--random-seed"], any_int()),
        (&["--watchdog-timeout"], float(0.0, None)),
        (&["--stream-response-default-include-usage"], SW),
        (
            &["--log-level"],
            choice(&["debug", "info", "warning", "error", "critical"]),
        ),
        (&["--speculative-algorithm"], STR),
        (&["--speculative-num-steps"], int(1)),
        (&["--speculative-eagle-topk"], int(1)),
        (&["--speculative-num-draft-tokens"], int(1)),
    ]
}

fn sim_own_rows() -> Vec<Row> {
    vec![
        (&["--ttft-ms"], float(0.0, None)),
        (&["--itl-ms"], float(0.0, None)),
        (&["--stream-writes"], choice(&["per-token", "coalesced"])),
        (&["--startup-delay-s"], float(0.0, None)),
        (&["--time-scale"], float(1e-6, None)),
        (&["--seed"], int(0)),
        (&["--jitter"], float(0.0, None)),
        (&["--slowdown"], float(0.0, None)),
        (&["--gpu-memory-gb"], float(0.0, None)),
        (&["--crash-above-batch"], int(1)),
        (&["--workers"], int(1)),
        (&["--crash-backend"], choice(SGLANG_MOE_RUNNER_BACKENDS)),
        (&["--fail-rate"], float(0.0, Some(1.0))),
        (&["--max-prompt-len"], int(1)),
        (&["--decode-ms-per-1k-context"], float(0.0, None)),
        (&["--noise-seed"], int(0)),
        // The simulator reads `--fault hang-after-requests=N` as one value.
        (
            &["--fault"],
            choice(&["nan", "oom-at-start", "hang-after-requests=N", "slow-start"]),
        ),
    ]
}

fn vllm_rows() -> Vec<Row> {
    vec![
        (&["--tensor-parallel-size", "-tp"], int(1)),
        (&["--data-parallel-size", "-dp"], int(1)),
        (&["--pipeline-parallel-size", "-pp"], int(1)),
        (&["--enable-expert-parallel"], SW),
        (&["--enforce-eager"], SW),
        (&["--gpu-memory-utilization"], float(0.0, Some(1.0))),
        (&["--max-num-seqs"], int(1)),
        // vLLM reads both with `human_readable_int`: `8k`, `16K` and `25.6k` are valid.
        (&["--max-num-batched-tokens"], human_int(1)),
        (&["--max-model-len"], human_int(1)),
        (
            &["--kv-cache-dtype"],
            choice(&[
                "auto",
                "float16",
                "bfloat16",
                "fp8",
                "fp8_e4m3",
                "fp8_e5m2",
                "fp8_inc",
                "fp8_ds_mla",
                "nvfp4_ds_mla",
                "turboquant_k8v4",
                "turboquant_4bit_nc",
                "turboquant_k3v4_nc",
            ]),
        ),
        (&["--block-size"], int(1)),
        (&["--enable-prefix-caching"], SW),
        (&["--no-enable-prefix-caching"], SW),
        (&["--enable-chunked-prefill"], SW),
        (&["--no-enable-chunked-prefill"], SW),
        (&["--long-prefill-token-threshold"], int(0)),
        (&["--max-num-partial-prefills"], int(1)),
        (&["--async-scheduling"], SW),
        (&["--scheduling-policy"], choice(&["fcfs", "priority"])),
        (&["--dtype"], choice(DTYPES)),
        (&["--quantization", "-q"], STR),
        // Replaces the deprecated `--cuda-graph-sizes` (see DEPRECATED).
        (&["--max-cudagraph-capture-size"], int(1)),
        (&["--attention-backend"], STR),
        (&["--swap-space"], float(0.0, None)),
        (&["--cpu-offload-gb"], float(0.0, None)),
        (&["--num-gpu-blocks-override"], int(1)),
        (&["--shutdown-timeout"], int(0)),
        (&["--served-model-name"], STR),
        (&["--seed"], any_int()),
        (&["--enable-force-include-usage"], SW),
        // Replaces the deprecated `--disable-log-requests` (see DEPRECATED).
        (&["--enable-log-requests"], SW),
        (&["--no-enable-log-requests"], SW),
        (&["--disable-log-stats"], SW),
    ]
}

fn llamacpp_rows() -> Vec<Row> {
    let kv_types = choice(&[
        "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1",
    ]);
    vec![
        (&["--parallel", "-np"], int(-1)),
        (&["--ctx-size", "-c"], int(0)),
        (&["--threads", "-t"], int(-1)),
        (&["--threads-batch", "-tb"], int(-1)),
        (&["--batch-size", "-b"], int(1)),
        (&["--ubatch-size", "-ub"], int(1)),
        // N, "auto" or "all": not one integer type.
        (&["--n-gpu-layers", "-ngl", "--gpu-layers"], STR),
        (&["--cont-batching", "-cb"], SW),
        (&["--no-cont-batching", "-nocb"], SW),
        (&["--flash-attn", "-fa"], choice(&["on", "off", "auto"])),
        (&["--metrics"], SW),
        (&["--cache-type-k", "-ctk"], kv_types.clone()),
        (&["--cache-type-v", "-ctv"], kv_types),
        (&["--kv-unified", "-kvu"], SW),
        (&["--no-kv-unified", "-no-kvu"], SW),
        (
            &["--split-mode", "-sm"],
            choice(&["none", "layer", "row", "tensor"]),
        ),
        (&["--tensor-split", "-ts"], STR),
        (&["--main-gpu", "-mg"], int(0)),
        (&["--fit", "-fit"], choice(&["on", "off"])),
        (&["--cache-ram", "-cram"], int(-1)),
        (&["--cache-prompt"], SW),
        (&["--no-cache-prompt"], SW),
        (&["--no-warmup"], SW),
        (&["--slots"], SW),
        (&["--no-slots"], SW),
        (&["--jinja"], SW),
        (&["--no-jinja"], SW),
        (&["--alias", "-a"], STR),
        (&["--timeout", "-to"], int(1)),
        (&["--seed", "-s"], any_int()),
        (&["--n-predict", "-n", "--predict"], int(-1)),
        (&["--verbosity", "-lv", "--log-verbosity"], int(0)),
        // Sampling runs on the host, once per slot per token, over the whole vocabulary: with
        // Llama 3's 128k tokens it held an H200 to 17 % utilisation at 64 requests in flight
        // (docs/validation/h200.md). `--backend-sampling` moves it to the GPU; `--samplers` and
        // `--top-k` shorten the chain (the server's defaults for requests that set neither).
        (&["--backend-sampling", "-bs"], SW),
        (&["--samplers"], STR),
        (&["--top-k"], int(0)),
    ]
}

pub(super) fn rows(kind: EngineKind) -> Vec<Row> {
    match kind {
        EngineKind::Sglang => sglang_rows(),
        EngineKind::Vllm => vllm_rows(),
        EngineKind::Llamacpp => llamacpp_rows(),
        EngineKind::Sim => {
            let mut r = sglang_rows();
            r.extend(sim_own_rows());
            r
        }
        EngineKind::Generic => Vec::new(),
    }
}

fn json(keys: &[(&str, JsonKey)]) -> FlagType {
    FlagType::Json {
        keys: keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn jint(min: i64, max: i64) -> JsonKey {
    JsonKey::Int {
        min: Some(min),
        max: Some(max),
    }
}

fn jchoice(values: &[&str]) -> JsonKey {
    JsonKey::Choice {
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// Flags that load code, weights or files, or take a JSON config that can name them. Known by
/// name (so no alias or prefix slips past) but off until a profile lists them in
/// `allow_flags`. A JSON flag's keys are a schema: only listed keys with values of their type.
pub(super) fn gated_rows(kind: EngineKind) -> Vec<Row> {
    let python = vec![
        (&["--trust-remote-code"][..], SW),
        (&["--enable-lora"][..], SW),
    ];
    match kind {
        EngineKind::Sglang | EngineKind::Sim => {
            let mut r = python;
            r.extend([
                (&["--lora-paths"][..], STR),
                (&["--cuda-graph-config"][..], STR),
                (&["--json-model-override-args"][..], json(&[])),
                (
                    &[
                        "--speculative-draft-model-path",
                        "--speculative-draft-model",
                    ][..],
                    STR,
                ),
            ]);
            r
        }
        EngineKind::Vllm => {
            let mut r = python;
            r.extend([
                (&["--lora-modules"][..], STR),
                (
                    &["--speculative-config"][..],
                    json(&[
                        (
                            "method",
                            jchoice(&[
                                "ngram",
                                "suffix",
                                "eagle",
                                "eagle3",
                                "medusa",
                                "mlp_speculator",
                                "mtp",
                                "deepseek_mtp",
                            ]),
                        ),
                        ("num_speculative_tokens", jint(1, 64)),
                        ("prompt_lookup_max", jint(1, 64)),
                        ("prompt_lookup_min", jint(1, 64)),
                        ("disable_padded_drafter_batch", JsonKey::Bool),
                    ]),
                ),
                (
                    &["--compilation-config", "-O"][..],
                    json(&[
                        ("level", jint(0, 3)),
                        ("mode", jint(0, 3)),
                        (
                            "cudagraph_mode",
                            jchoice(&[
                                "NONE",
                                "PIECEWISE",
                                "FULL",
                                "FULL_DECODE_ONLY",
                                "FULL_AND_PIECEWISE",
                            ]),
                        ),
                        (
                            "cudagraph_capture_sizes",
                            JsonKey::IntList {
                                min: Some(1),
                                max: Some(8192),
                                max_len: 256,
                            },
                        ),
                        ("max_cudagraph_capture_size", jint(1, 8192)),
                        ("use_inductor", JsonKey::Bool),
                    ]),
                ),
                (&["--hf-overrides"][..], json(&[])),
                (&["--kv-transfer-config"][..], json(&[])),
                (&["--model-loader-extra-config"][..], json(&[])),
            ]);
            r
        }
        EngineKind::Llamacpp => vec![
            (&["--lora"][..], STR),
            (&["--chat-template-file"][..], STR),
            (&["--model-draft", "-md"][..], STR),
        ],
        EngineKind::Generic => Vec::new(),
    }
}

/// Flags the engines deprecated, with what replaced them: refused with the replacement named,
/// so that a spec moves on instead of breaking at the next engine upgrade.
pub const DEPRECATED: &[(EngineKind, &str, &str)] = &[
    (
        EngineKind::Vllm,
        "--disable-log-requests",
        "--no-enable-log-requests (request logging is off by default)",
    ),
    (
        EngineKind::Vllm,
        "--cuda-graph-sizes",
        "--max-cudagraph-capture-size, or cudagraph_capture_sizes in --compilation-config",
    ),
];

/// What replaced a deprecated flag of `kind`, if `name` is one.
pub fn replacement(kind: EngineKind, name: &str) -> Option<&'static str> {
    DEPRECATED
        .iter()
        .find(|(k, n, _)| *k == kind && *n == name)
        .map(|(_, _, r)| *r)
}

/// The tuning flags callers may set on a built-in kind, one rule per name (aliases included:
/// `-np` and `--parallel` both appear). `generic` has none: its profile lists them.
pub fn builtin_rules(kind: EngineKind) -> Vec<FlagRule> {
    rows(kind)
        .into_iter()
        .flat_map(|(names, ty)| names.iter().map(move |n| FlagRule::new(*n, ty.clone())))
        .collect()
}

/// The canonical spelling of a built-in flag (`-np` -> `--parallel`, `--tensor-parallel-size`
/// -> `--tp-size` for sglang), so two specs that spell one flag two ways can be compared.
/// `None` when the kind has no such flag.
pub fn canonical_flag(kind: EngineKind, name: &str) -> Option<&'static str> {
    rows(kind)
        .into_iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(names, _)| names[0])
}
