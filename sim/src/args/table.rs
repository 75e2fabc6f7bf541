//! The flag table: names, aliases, value kinds, and the choice lists SGLang uses.

use super::ArgError;

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
pub(super) enum Kind {
    Switch,
    Value,
    /// Accepted for SGLang compatibility, checked for type, no effect on the model.
    Accept(Accepted),
}

#[derive(Clone, Copy)]
pub(super) enum Accepted {
    Switch,
    Int,
    Float,
    Str,
    Choice(&'static [&'static str]),
}

pub(super) struct Flag {
    pub(super) name: &'static str,
    pub(super) canonical: &'static str,
    pub(super) kind: Kind,
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
    v("--fail-rate"),
    v("--max-prompt-len"),
    v("--decode-ms-per-1k-context"),
    v("--noise-seed"),
    v("--kv-cache-dtype"),
    v("--max-total-tokens"),
    sw("--stream-response-default-include-usage"),
    v("--cuda-graph-max-bs-decode"),
    v("--stream-interval"),
    v("--cuda-graph-backend-decode"),
    // Spanning hosts (SGLang's spelling): see `crate::gang`.
    v("--nnodes"),
    v("--node-rank"),
    v("--dist-init-addr"),
    v("--dist-timeout"),
    // vLLM's spelling of the same (data-parallel ranks across nodes, one per node).
    v("--data-parallel-address"),
    v("--data-parallel-rpc-port"),
    v("--data-parallel-start-rank"),
    v("--data-parallel-size-local"),
    sw("--headless"),
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
    sw("--disable-radix-cache"),
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

pub(super) const GRAPH_BACKENDS: &[&str] = &["full", "breakable", "disabled"];

// SGLang's choice lists are kept once, where the agent and the controller check real
// engines' flags; the simulator accepts what SGLang accepts.
pub(super) use fleetbench_engines::flags::{
    SGLANG_ATTENTION_BACKENDS as ATTENTION_BACKENDS, SGLANG_KV_CACHE_DTYPES as KV_CACHE_DTYPES,
};

pub(super) fn choice(flag: &str, value: &str, choices: &[&str]) -> Result<(), ArgError> {
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

pub(super) fn lookup(given: &str) -> Result<&'static Flag, ArgError> {
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
