//! `fleetbench bench`'s flags turned into a validated `BenchConfig`; every error names its flag
//! (a configuration field's error is mapped back to the flag behind it).

use anyhow::bail;
use fleetbench_loadgen::{
    Api, BenchConfig, Bound, ClientOptions, DatasetSpec, Level, LoadgenError, Slo,
};

use super::{Args, DatasetKind};

fn flag_error(flag: &str, message: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{flag}: {message}")
}

/// Turns the flags into a validated configuration; every error names its flag.
pub fn config(a: &Args, base_url: String) -> anyhow::Result<BenchConfig> {
    let output_len = a.output_len.unwrap_or(128);
    if a.ramp_up.is_some() && a.concurrency.is_empty() {
        bail!(flag_error(
            "--ramp-up",
            "spreads the streams of closed-loop levels: give --concurrency"
        ));
    }
    if !a.concurrency.is_empty() && a.max_concurrency.is_some() {
        bail!(flag_error(
            "--max-concurrency",
            "caps --request-rate levels; --concurrency levels are already closed loops"
        ));
    }
    // vLLM's closed loop: every request due at once (`--request-rate inf`, its default), at most
    // --max-concurrency in flight.
    let infinite = a.request_rate.iter().filter(|r| r.is_infinite()).count();
    if infinite > 0 && infinite < a.request_rate.len() {
        bail!(flag_error(
            "--request-rate",
            "inf (a closed loop) and finite rates cannot be mixed in one run"
        ));
    }
    if a.concurrency.is_empty()
        && (infinite > 0 || (a.request_rate.is_empty() && a.max_concurrency.is_some()))
    {
        let c = match (a.max_concurrency, a.num_prompts) {
            (Some(c), _) => c,
            (None, Some(n)) => n,
            (None, None) => bail!(flag_error(
                "--request-rate",
                "inf sends every request at once: give --max-concurrency (or --num-prompts)"
            )),
        };
        let mut closed = a.clone();
        closed.concurrency = vec![c];
        closed.request_rate.clear();
        closed.max_concurrency = None;
        return config(&closed, base_url);
    }
    let levels: Vec<Level> = match (a.concurrency.is_empty(), a.request_rate.is_empty()) {
        (true, true) => bail!("give --concurrency (closed loop) or --request-rate (open loop)"),
        (false, _) => a
            .concurrency
            .iter()
            .map(|c| Level {
                concurrency: Some(*c),
                request_rate: None,
                burstiness: a.burstiness,
            })
            .collect(),
        (true, false) => a
            .request_rate
            .iter()
            .map(|r| Level {
                concurrency: a.max_concurrency,
                request_rate: Some(*r),
                burstiness: a.burstiness,
            })
            .collect(),
    };
    let path = |kind: &str| {
        a.dataset_path
            .clone()
            .ok_or_else(|| flag_error("--dataset-path", format!("--dataset {kind} needs a file")))
    };
    let dataset = match a.dataset {
        DatasetKind::Random => DatasetSpec::Random {
            input_len: a.input_len,
            output_len,
            range_ratio: a.range_ratio,
        },
        DatasetKind::Sharegpt => DatasetSpec::ShareGpt {
            path: path("sharegpt")?,
            output_len: a.output_len,
        },
        DatasetKind::SharedPrefix => DatasetSpec::SharedPrefix {
            groups: a.groups,
            prompts_per_group: a.prompts_per_group,
            prefix_len: a.prefix_len,
            suffix_len: a.input_len,
            output_len,
        },
        DatasetKind::Jsonl => DatasetSpec::Jsonl {
            path: path("jsonl")?,
            output_len,
        },
        DatasetKind::Trace => DatasetSpec::Trace {
            path: path("trace")?,
            block_tokens: a.trace_block_tokens,
            speedup: a.trace_speedup,
        },
    };
    for p in [&a.dataset_path, &a.tokenizer, &a.ca_cert]
        .into_iter()
        .flatten()
    {
        if !p.is_file() {
            let flag = if Some(p) == a.tokenizer.as_ref() {
                "--tokenizer"
            } else if Some(p) == a.ca_cert.as_ref() {
                "--ca-cert"
            } else {
                "--dataset-path"
            };
            return Err(flag_error(
                flag,
                format!("{} is not a readable file", p.display()),
            ));
        }
    }
    let slo = match (a.slo, a.goodput.is_empty()) {
        (Some(s), _) => Some(s),
        (None, true) => None,
        (None, false) => Some(goodput_slo(&a.goodput).map_err(|m| flag_error("--goodput", m))?),
    };
    let bound = match (a.num_prompts, a.duration) {
        (_, Some(d)) => Bound::Duration(d),
        (n, None) => Bound::Requests(n.unwrap_or(100)),
    };
    let mut headers = Vec::with_capacity(a.headers.len());
    for h in &a.headers {
        // 'Name: value', or vLLM's KEY=VALUE: whichever separator comes first.
        let sep = h.find([':', '=']).ok_or_else(|| {
            flag_error(
                "--header",
                format!("{h:?} is not 'Name: value' or NAME=VALUE"),
            )
        })?;
        let (name, value) = (&h[..sep], &h[sep + 1..]);
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    // The environment's key yields to an explicit Authorization header; the flag does not (both
    // given is an error that names them).
    let has_authorization = headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("authorization"));
    let api_key = a.api_key.clone().or_else(|| {
        std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !has_authorization && !k.trim().is_empty())
    });
    let client = ClientOptions {
        headers,
        api_key,
        ca_cert: a.ca_cert.clone(),
    };
    // vLLM command lines give both --backend and --endpoint; the endpoint decides.
    let backend_api = match a.backend.as_deref() {
        None => None,
        Some("openai" | "vllm") => Some(Api::Completions),
        Some("openai-chat") => Some(Api::Chat),
        Some(other) => bail!(flag_error(
            "--backend",
            format!("{other:?}: expected openai, vllm or openai-chat")
        )),
    };
    let api = match &a.endpoint {
        Some(e) => match e.trim_end_matches('/') {
            "/v1/completions" => Api::Completions,
            "/v1/chat/completions" => Api::Chat,
            other => bail!(flag_error(
                "--endpoint",
                format!("{other:?}: expected /v1/completions or /v1/chat/completions")
            )),
        },
        None => backend_api.unwrap_or(a.api),
    };
    let cfg = BenchConfig {
        base_url,
        client,
        api,
        model: a.model.clone(),
        dataset,
        levels,
        bound,
        warmup: a.warmup,
        percentiles: a.percentiles.clone(),
        slo,
        seed: a.seed,
        ignore_eos: !a.no_ignore_eos,
        request_timeout: a.request_timeout,
        tokenizer: a.tokenizer.clone(),
        tokenize_url: None,
    };
    cfg.validate().map_err(config_error)?;
    Ok(cfg)
}

/// vLLM's `--goodput ttft:500 tpot:50 e2el:10000` as an SLO (its TPOT is fleetbench's per-request
/// time per output token, `tpot_ms`).
fn goodput_slo(items: &[String]) -> Result<Slo, String> {
    let mut parts = Vec::new();
    for item in items.iter().flat_map(|i| i.split_whitespace()) {
        let (k, v) = item
            .split_once(':')
            .ok_or_else(|| format!("{item:?} is not KEY:VALUE (keys: ttft, tpot, e2el)"))?;
        let key = match k {
            "ttft" => "ttft_ms",
            "tpot" => "tpot_ms",
            "e2el" => "e2e_ms",
            other => return Err(format!("unknown key {other:?} (keys: ttft, tpot, e2el)")),
        };
        parts.push(format!("{key}={v}"));
    }
    parts.join(",").parse()
}

/// Names the flag behind a configuration field.
pub(super) fn config_error(e: LoadgenError) -> anyhow::Error {
    let LoadgenError::Config { field, message } = &e else {
        return e.into();
    };
    let flag = match field.as_str() {
        f if f.starts_with("levels") => "--concurrency/--request-rate/--burstiness",
        "bound" => "--num-prompts/--duration",
        "percentiles" => "--percentiles",
        "request_timeout" => "--request-timeout",
        "dataset.input_len" | "dataset.suffix_len" => "--input-len",
        "dataset.output_len" => "--output-len",
        "dataset.range_ratio" => "--range-ratio",
        "dataset.groups" => "--groups/--prompts-per-group",
        "dataset.trace_block_tokens" => "--trace-block-tokens",
        "dataset.trace_speedup" => "--trace-speedup",
        "client.headers" => "--header",
        "client.api_key" => "--api-key (or OPENAI_API_KEY)",
        "client.ca_cert" => "--ca-cert",
        _ => return e.into(),
    };
    flag_error(flag, message)
}
