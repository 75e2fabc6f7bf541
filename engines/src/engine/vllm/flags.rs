//! vLLM's flag tables: the tuning flags callers may set, the risky ones a profile must turn on
//! (JSON configs with a key schema), and the flags it deprecated. Names from vLLM 0.33
//! `arg_utils.py` (`human_readable_int`, deprecated flags).

use crate::flags::JsonKey;
use crate::flags::tables::{
    DTYPES, Row, STR, SW, any_int, choice, float, human_int, int, jchoice, jint, json,
    python_gated_rows,
};

/// The tuning flags.
pub(crate) fn rows() -> Vec<Row> {
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

/// Flags that load code, weights or files, or take a JSON config that can name them.
pub(crate) fn gated_rows() -> Vec<Row> {
    let mut r = python_gated_rows();
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

/// Flags vLLM deprecated, with what replaced them: refused with the replacement named, so
/// that a spec moves on instead of breaking at the next engine upgrade.
pub(crate) const DEPRECATED: &[(&str, &str)] = &[
    (
        "--disable-log-requests",
        "--no-enable-log-requests (request logging is off by default)",
    ),
    (
        "--cuda-graph-sizes",
        "--max-cudagraph-capture-size, or cudagraph_capture_sizes in --compilation-config",
    ),
];
