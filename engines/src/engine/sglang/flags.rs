//! SGLang's flag tables: the tuning flags callers may set and the risky ones a profile must
//! turn on. Names and choices from SGLang 0.5.9 `server_args.py`, 0.5.23 `arg_groups/` and
//! main's `server_args.py` (`MOE_A2A_BACKEND_CHOICES`); where a choice list changed between
//! versions the union is allowed (see `crate::flags::tables`).

use crate::flags::tables::{
    DTYPES, Row, STR, SW, any_int, choice, float, int, json, python_gated_rows,
};

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

/// The tuning flags (the simulator takes them too).
pub(crate) fn rows() -> Vec<Row> {
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

/// Flags that load code, weights or files, or take a JSON config that can name them.
pub(crate) fn gated_rows() -> Vec<Row> {
    let mut r = python_gated_rows();
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
