//! Counters and histograms served on `/metrics` under SGLang's names.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0, 60.0,
];

/// A Prometheus histogram with fixed buckets, updated lock-free.
#[derive(Debug)]
pub struct Histogram {
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: LATENCY_BUCKETS.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records `n` observations of `secs` seconds each.
    pub fn observe_n(&self, secs: f64, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(n, Relaxed);
        }
        self.sum_ns.fetch_add((secs * 1e9) as u64 * n, Relaxed);
        self.count.fetch_add(n, Relaxed);
    }

    /// Records one observation.
    pub fn observe(&self, secs: f64) {
        self.observe_n(secs, 1);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in LATENCY_BUCKETS.iter().zip(&self.counts) {
            cum += c.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cum}");
        }
        let total = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {total}");
        let sum = self.sum_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
    }
}

/// Everything `/metrics` reports.
#[derive(Debug)]
pub struct Metrics {
    pub running: AtomicU64,
    pub queued: AtomicU64,
    pub kv_used: AtomicU64,
    pub max_total_num_tokens: u64,
    pub cuda_graph: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub requests: AtomicU64,
    pub aborted: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue_time: Histogram,
    throughput: Mutex<(Instant, u64, f64)>,
}

impl Metrics {
    /// Empty metrics for a KV pool of `max_total_num_tokens`.
    pub fn new(max_total_num_tokens: u64) -> Self {
        Metrics {
            running: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            kv_used: AtomicU64::new(0),
            max_total_num_tokens,
            cuda_graph: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            ttft: Histogram::default(),
            itl: Histogram::default(),
            e2e: Histogram::default(),
            queue_time: Histogram::default(),
            throughput: Mutex::new((Instant::now(), 0, 0.0)),
        }
    }

    /// Generation throughput since the previous call (at least 0.5 s apart, else the last value).
    pub fn gen_throughput(&self) -> f64 {
        let tokens = self.generation_tokens.load(Relaxed);
        let mut g = self.throughput.lock().expect("metrics lock");
        let dt = g.0.elapsed().as_secs_f64();
        if dt >= 0.5 {
            g.2 = (tokens - g.1) as f64 / dt;
            *g = (Instant::now(), tokens, g.2);
        }
        g.2
    }

    /// The Prometheus text exposition.
    pub fn render(&self, model_name: &str) -> String {
        let model = model_name.replace('\\', "\\\\").replace('"', "\\\"");
        let labels =
            format!("model_name=\"{model}\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"");
        let mut out = String::with_capacity(8192);
        let used = self.kv_used.load(Relaxed);
        let usage = used as f64 / self.max_total_num_tokens.max(1) as f64;
        let gauges: [(&str, &str, f64); 8] = [
            (
                "sglang:num_running_reqs",
                "The number of running requests.",
                self.running.load(Relaxed) as f64,
            ),
            (
                "sglang:num_queue_reqs",
                "The number of requests in the waiting queue.",
                self.queued.load(Relaxed) as f64,
            ),
            (
                "sglang:num_used_tokens",
                "The number of used tokens.",
                used as f64,
            ),
            ("sglang:token_usage", "The token usage.", usage),
            (
                "sglang:gen_throughput",
                "The generation throughput (token/s).",
                self.gen_throughput(),
            ),
            (
                "sglang:max_total_num_tokens",
                "Maximum total number of tokens in the KV cache pool.",
                self.max_total_num_tokens as f64,
            ),
            (
                "sglang:is_cuda_graph",
                "Whether the batch is using CUDA graph.",
                self.cuda_graph.load(Relaxed) as f64,
            ),
            (
                "sglang:cache_hit_rate",
                "The prefix cache hit rate.",
                self.cached_tokens.load(Relaxed) as f64
                    / self.prompt_tokens.load(Relaxed).max(1) as f64,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}"
            );
        }
        let counters: [(&str, &str, u64); 5] = [
            (
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens.",
                self.cached_tokens.load(Relaxed),
            ),
            (
                "sglang:prompt_tokens_total",
                "Number of prefill tokens processed.",
                self.prompt_tokens.load(Relaxed),
            ),
            (
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                self.generation_tokens.load(Relaxed),
            ),
            (
                "sglang:num_requests_total",
                "Number of requests processed.",
                self.requests.load(Relaxed),
            ),
            (
                "sglang:num_aborted_requests_total",
                "Number of requests aborted.",
                self.aborted.load(Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {v}"
            );
        }
        self.ttft.render(
            &mut out,
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
        );
        self.itl.render(
            &mut out,
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &labels,
        );
        self.e2e.render(
            &mut out,
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            &labels,
        );
        self.queue_time.render(
            &mut out,
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            &labels,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_sglang_names_with_model_label() {
        let m = Metrics::new(1000);
        m.kv_used.store(250, Relaxed);
        m.generation_tokens.fetch_add(42, Relaxed);
        m.ttft.observe(0.05);
        m.itl.observe_n(0.005, 9);
        let text = m.render("my-model");
        assert!(text.contains("sglang:token_usage{model_name=\"my-model\""));
        assert!(text.contains(" 0.25\n"));
        assert!(text.contains("sglang:generation_tokens_total{model_name=\"my-model\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"} 42"));
        assert!(text.contains("sglang:inter_token_latency_seconds_count{model_name=\"my-model\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"} 9"));
        assert!(text.contains("sglang:time_to_first_token_seconds_bucket{model_name=\"my-model\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\",le=\"0.06\"} 1"));
        assert!(text.contains("sglang:max_total_num_tokens{"));
    }
}
