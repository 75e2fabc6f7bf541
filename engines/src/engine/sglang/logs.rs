//! SGLang (0.5.9 and 0.5.23) start-up lines; the simulated engine prints the same ones.

use std::sync::LazyLock;

use regex::Regex;

use crate::logs::{LogFact, LogParser, repr_to_json_object, strip_prefix};

static KV_POOL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"KV Cache (?:is allocated|VA upper bound)\. (?:dtype: ([\w.]+), )?#tokens: (\d+), (?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)?",
    )
    .expect("valid regex")
});

static SUMMARY_PAIR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(\w+)=(-?[\d.]+)").expect("valid regex"));

static WEIGHT_ELAPSED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"elapsed=([\d.]+) s").expect("valid regex"));

static MEM_USAGE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"mem usage=([\d.]+) GB").expect("valid regex"));

static GRAPH_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Capture .*?graph end\. .*?(?:elapsed=|Time elapsed: )([\d.]+) s")
        .expect("valid regex")
});

/// SGLang's parser: keeps the running total of CUDA graph capture time.
#[derive(Debug, Default)]
pub(super) struct SglangParser {
    cuda_graph_s: f64,
}

impl LogParser for SglangParser {
    fn parse_line(&mut self, line: &str) -> Vec<LogFact> {
        let stripped = strip_prefix(line);
        if !stripped.is_rank_zero() {
            return Vec::new();
        }
        let msg = stripped.message.trim();
        let mut out = Vec::new();
        if let Some(rest) = msg.strip_prefix("server_args=") {
            if let Some(json) = repr_to_json_object(rest) {
                out.push(LogFact::new("server_args", json));
            }
        } else if msg.starts_with("max_total_num_tokens=") {
            for c in SUMMARY_PAIR.captures_iter(msg) {
                let key = match &c[1] {
                    "available_gpu_mem" | "available_cpu_mem" => "available_gpu_mem_gb",
                    k @ ("max_total_num_tokens"
                    | "chunked_prefill_size"
                    | "max_prefill_tokens"
                    | "max_running_requests"
                    | "context_len") => k,
                    _ => continue,
                };
                out.push(LogFact::new(key, &c[2]));
            }
        } else if let Some(c) = KV_POOL.captures(msg) {
            out.push(LogFact::new("kv_cache_tokens", &c[2]));
            if let Some(dtype) = c.get(1) {
                out.push(LogFact::new("kv_cache_dtype", dtype.as_str()));
            }
            let gb = match (c.get(3), c.get(4), c.get(5)) {
                (Some(k), Some(v), _) => {
                    Some(num(k.as_str()) + num(v.as_str())).filter(|x| x.is_finite())
                }
                (_, _, Some(kv)) => Some(num(kv.as_str())).filter(|x| x.is_finite()),
                _ => None,
            };
            if let Some(gb) = gb {
                out.push(LogFact::new("kv_cache_gb", format!("{gb:.2}")));
            }
        } else if msg.starts_with("Load weight end.") {
            if let Some(c) = WEIGHT_ELAPSED.captures(msg) {
                out.push(LogFact::new("weight_load_s", &c[1]));
            }
            if let Some(c) = MEM_USAGE.captures(msg) {
                out.push(LogFact::new("weight_mem_gb", &c[1]));
            }
        } else if let Some(c) = GRAPH_END.captures(msg) {
            let s = num(&c[1]);
            if s.is_finite() {
                self.cuda_graph_s += s;
                out.push(LogFact::new(
                    "cuda_graph_s",
                    format!("{:.2}", self.cuda_graph_s),
                ));
            }
        } else if msg.contains("The server is fired up and ready to roll!") {
            out.push(LogFact::new("ready", "true"));
        }
        out
    }
}

fn num(s: &str) -> f64 {
    s.parse().unwrap_or(f64::NAN)
}
