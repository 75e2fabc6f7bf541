//! `--save-result`: one level's results in the JSON form `vllm bench serve --save-result`
//! writes, so scripts and dashboards built on vLLM's files read fleetbench's unchanged.
//!
//! The keys and units are vLLM's (`ttfts` and `itls` in seconds, `*_ms` statistics in
//! milliseconds, `request_rate` `"inf"` for a closed loop). The figures are fleetbench's, with
//! two differences a reader of both should know: TTFT and E2EL count from the intended send
//! time (client queueing included; vLLM counts from the actual send), and ITL is per token (a
//! chunk carrying k tokens after a gap g gives k gaps of g/k; vLLM gives one gap per chunk).
//! Statistics come from the per-request records of the completed requests; `median` is the
//! 50th percentile and `std` the population standard deviation, as numpy computes them.

use std::path::{Path, PathBuf};

use fleetbench_loadgen::{Api, LevelReport, RequestRecord};
use serde_json::{Map, Value, json};

/// What the result file says about the run besides the level's figures.
pub struct Meta<'a> {
    pub api: Api,
    pub model: &'a str,
    pub tokenizer: Option<&'a Path>,
    pub num_prompts: Option<u32>,
    pub burstiness: f64,
    pub percentiles: &'a [f64],
    pub goodput: bool,
    /// `YYYYMMDD-HHMMSS` (UTC), as vLLM names its files.
    pub date: &'a str,
}

/// The result document of one level.
pub fn result(meta: &Meta, level: &LevelReport, records: &[RequestRecord]) -> Value {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.error.is_none()).collect();
    let ttfts: Vec<f64> = ok.iter().filter_map(|r| r.ttft_ms).collect();
    let e2els: Vec<f64> = ok.iter().filter_map(|r| r.e2e_ms).collect();
    let tpots: Vec<f64> = ok
        .iter()
        .filter(|r| r.output_tokens > 1)
        .filter_map(|r| Some((r.e2e_ms? - r.ttft_ms?) / (r.output_tokens - 1) as f64))
        .collect();
    let itls_per_request: Vec<Vec<f64>> = records
        .iter()
        .map(|r| r.token_ms.windows(2).map(|w| w[1] - w[0]).collect())
        .collect();
    let itls: Vec<f64> = ok
        .iter()
        .flat_map(|r| r.token_ms.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let (backend, endpoint) = match meta.api {
        Api::Completions => ("openai", "/v1/completions"),
        Api::Chat => ("openai-chat", "/v1/chat/completions"),
    };
    let rate = match level.request_rate {
        Some(r) => json!(r),
        None => json!("inf"),
    };
    let mut doc = Map::new();
    let mut put = |k: &str, v: Value| {
        doc.insert(k.to_string(), v);
    };
    put("date", json!(meta.date));
    put("backend", json!(backend));
    put("endpoint", json!(endpoint));
    put("label", Value::Null);
    put("model_id", json!(meta.model));
    put(
        "tokenizer_id",
        json!(
            meta.tokenizer
                .map_or(meta.model.to_string(), |p| p.display().to_string())
        ),
    );
    put("num_prompts", json!(meta.num_prompts.map(u64::from)));
    put("request_rate", rate);
    put("burstiness", json!(meta.burstiness));
    put("max_concurrency", json!(level.concurrency));
    put("duration", json!(level.duration_s));
    put("completed", json!(level.completed));
    put("failed", json!(level.failed));
    put("total_input_tokens", json!(level.input_tokens));
    put("total_output_tokens", json!(level.output_tokens));
    put("request_throughput", json!(level.requests_per_s));
    put(
        "request_goodput",
        if meta.goodput {
            json!(level.goodput_requests_per_s)
        } else {
            Value::Null
        },
    );
    put("output_throughput", json!(level.output_tokens_per_s));
    put("total_token_throughput", json!(level.total_tokens_per_s));
    put("max_concurrent_requests", json!(level.peak_concurrency));
    put(
        "input_lens",
        json!(records.iter().map(|r| r.input_tokens).collect::<Vec<_>>()),
    );
    put(
        "output_lens",
        json!(records.iter().map(|r| r.output_tokens).collect::<Vec<_>>()),
    );
    put(
        "ttfts",
        json!(
            records
                .iter()
                .map(|r| r.ttft_ms.filter(|_| r.error.is_none()).unwrap_or(0.0) / 1e3)
                .collect::<Vec<_>>()
        ),
    );
    put(
        "itls",
        json!(
            itls_per_request
                .iter()
                .map(|v| v.iter().map(|ms| ms / 1e3).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        ),
    );
    put(
        "errors",
        json!(
            records
                .iter()
                .map(|r| r.error.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        ),
    );
    for (name, values) in [
        ("ttft", &ttfts),
        ("tpot", &tpots),
        ("itl", &itls),
        ("e2el", &e2els),
    ] {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        put(&format!("mean_{name}_ms"), json!(mean(&sorted)));
        put(
            &format!("median_{name}_ms"),
            json!(percentile(&sorted, 50.0)),
        );
        put(&format!("std_{name}_ms"), json!(std(&sorted)));
        for p in meta.percentiles {
            put(
                &format!("p{}_{name}_ms", p_word(*p)),
                json!(percentile(&sorted, *p)),
            );
        }
    }
    Value::Object(doc)
}

/// `99` → `"99"`, `99.9` → `"99.9"` (vLLM's `p_word`).
fn p_word(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("{}", p as i64)
    } else {
        format!("{p}")
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn std(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
}

/// numpy's default (linear interpolation between closest ranks) on sorted values; 0 when empty.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = p / 100.0 * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

/// Where level `index` of `levels` goes: the given name (or vLLM-style default) in `dir`; with
/// several levels, the level's load is added before the extension.
pub fn path(
    dir: Option<&Path>,
    filename: Option<&Path>,
    level: &LevelReport,
    levels: usize,
    model: &str,
    date: &str,
) -> PathBuf {
    let load = match (level.request_rate, level.concurrency) {
        (Some(r), Some(c)) => format!("{r}qps-concurrency{c}"),
        (Some(r), None) => format!("{r}qps"),
        (None, Some(c)) => format!("infqps-concurrency{c}"),
        (None, None) => "level".into(),
    };
    let name = match filename {
        Some(f) if levels == 1 => f.to_path_buf(),
        Some(f) => {
            let stem = f
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            let ext = f
                .extension()
                .map_or_else(|| "json".to_string(), |e| e.to_string_lossy().into_owned());
            f.with_file_name(format!("{stem}-{load}.{ext}"))
        }
        None => {
            let model = model.rsplit('/').next().unwrap_or(model);
            PathBuf::from(format!("fleetbench-{load}-{model}-{date}.json"))
        }
    };
    match dir {
        Some(d) => d.join(name),
        None => name,
    }
}

/// Now as `YYYYMMDD-HHMMSS` in UTC.
pub fn date_now() -> String {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // 2026-12-01T20:22:43Z → 20261201-202243
    let digits: String = t.chars().filter(char::is_ascii_digit).collect();
    format!("{}-{}", &digits[..8], &digits[8..14])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_std_match_numpy() {
        // numpy.percentile([1, 2, 3, 4], [50, 99]) = [2.5, 3.97]; numpy.std = 1.1180339887
        let v = [1.0, 2.0, 3.0, 4.0];
        assert!((percentile(&v, 50.0) - 2.5).abs() < 1e-12);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert!((std(&v) - 1.118_033_988_749_895).abs() < 1e-12);
        assert_eq!(p_word(99.0), "99");
        assert_eq!(p_word(99.9), "99.9");
        assert_eq!(date_now().len(), 15);
    }

    #[test]
    fn several_levels_get_one_file_each() {
        let mut l = LevelReport {
            concurrency: Some(4),
            ..Default::default()
        };
        let f = Path::new("out/run.json");
        assert_eq!(
            path(None, Some(f), &l, 1, "m", "d"),
            Path::new("out/run.json")
        );
        assert_eq!(
            path(Some(Path::new("r")), Some(f), &l, 2, "m", "d"),
            Path::new("r/out/run-infqps-concurrency4.json")
        );
        l.request_rate = Some(2.5);
        l.concurrency = None;
        assert_eq!(
            path(None, None, &l, 2, "org/model", "20261201-000000"),
            Path::new("fleetbench-2.5qps-model-20261201-000000.json")
        );
    }
}
