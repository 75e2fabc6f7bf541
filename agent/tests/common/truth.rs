//! Truth per level for the real Python engines (vLLM, SGLang): a benchmark level judged by the
//! engine's own Prometheus counters, read before and after it. Output tokens equal the
//! engine's generation counter, prompt tokens its prompt counter, the stored cache figure its
//! own cache counters, the client's mean ITL is within 5% of the engine's inter-token
//! histogram, and every request sent finished by both counts.

use std::path::Path;
use std::time::Duration;

use fleetbench_agent::http::HttpClient;
use fleetbench_proto::agentpb;

use super::{bench, closed, random_workload};

/// An engine's names for the counters a level is judged by.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    pub generation: &'static str,
    pub prompt: &'static str,
    /// Histogram family of inter-token latencies (seconds).
    pub itl: &'static str,
    /// Requests finished.
    pub requests: &'static str,
    /// Prompt tokens looked up in the cache, and those served from it.
    pub cache_lookups: &'static str,
    pub cache_hits: &'static str,
}

pub const VLLM: Names = Names {
    generation: "vllm:generation_tokens_total",
    prompt: "vllm:prompt_tokens_total",
    itl: "vllm:inter_token_latency_seconds",
    requests: "vllm:request_success_total",
    cache_lookups: "vllm:prefix_cache_queries_total",
    cache_hits: "vllm:prefix_cache_hits_total",
};

pub const SGLANG: Names = Names {
    generation: "sglang:generation_tokens_total",
    prompt: "sglang:prompt_tokens_total",
    itl: "sglang:inter_token_latency_seconds",
    requests: "sglang:num_requests_total",
    cache_lookups: "sglang:prompt_tokens_total",
    cache_hits: "sglang:cached_tokens_total",
};

/// The counters a level is judged by.
#[derive(Debug, Clone, Copy, Default)]
pub struct Engine {
    pub generation: f64,
    pub prompt: f64,
    pub lookups: f64,
    pub hits: f64,
    pub itl_sum: f64,
    pub itl_count: f64,
    pub requests: f64,
}

impl Engine {
    fn delta(&self, before: &Engine) -> Engine {
        Engine {
            generation: self.generation - before.generation,
            prompt: self.prompt - before.prompt,
            lookups: self.lookups - before.lookups,
            hits: self.hits - before.hits,
            itl_sum: self.itl_sum - before.itl_sum,
            itl_count: self.itl_count - before.itl_count,
            requests: self.requests - before.requests,
        }
    }
}

/// The engine's counters now (a family not yet exported counts as zero: SGLang exports its
/// ITL histogram after the first streamed request).
pub async fn scrape(http: &HttpClient, base: &str, names: &Names) -> Engine {
    let r = http
        .get(&format!("{base}/metrics"), Duration::from_secs(10), 8 << 20)
        .await
        .expect("the engine's /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    let expo = fleetbench_engines::prom::parse(&r.body);
    let sum = |name: &str| -> f64 {
        expo.series
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    };
    assert!(
        expo.series.iter().any(|s| s.name == names.generation),
        "{} missing from /metrics",
        names.generation
    );
    Engine {
        generation: sum(names.generation),
        prompt: sum(names.prompt),
        lookups: sum(names.cache_lookups),
        hits: sum(names.cache_hits),
        itl_sum: sum(&format!("{}_sum", names.itl)),
        itl_count: sum(&format!("{}_count", names.itl)),
        requests: sum(names.requests),
    }
}

pub const REQUESTS: u64 = 8;
/// 32 output tokens: a request's mean ITL spreads any delay of its first streamed chunk over 31
/// gaps (with 16, one run under a build on both cores read -16.8% at c=8).
pub const OUTPUT: u32 = 32;

/// One level of `REQUESTS` prompts at concurrency `c`, the cache reset first when `reset`.
/// Random prompts (fleetbench's random dataset starts each with tokens of its own, so nothing
/// matches by accident), or with `shared` two groups of four sharing a 256-token prefix (vLLM's
/// CPU build caches whole blocks of 128 tokens: a shorter prefix never hits).
pub fn level_request(
    c: u32,
    run_id: &str,
    reset: bool,
    shared: bool,
) -> agentpb::RunBenchmarkRequest {
    let mut workload = random_workload(48, OUTPUT);
    if shared {
        workload.dataset = Some(agentpb::workload::Dataset::SharedPrefix(
            agentpb::SharedPrefixDataset {
                groups: 2,
                prompts_per_group: 4,
                prefix_len: 256,
                suffix_len: 16,
                output_len: OUTPUT,
            },
        ));
    }
    agentpb::RunBenchmarkRequest {
        workload: Some(workload),
        levels: vec![closed(c)],
        warmup_requests: 0,
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(
            REQUESTS as u32,
        )),
        percentiles: vec![50.0, 99.0],
        run_id: run_id.into(),
        reset_cache: reset,
        ..Default::default()
    }
}

/// How a level is run and judged.
pub struct Judge<'a> {
    pub http: &'a HttpClient,
    pub base: &'a str,
    pub names: Names,
    /// Printed with every level (SGLang's stand-in note).
    pub note: &'a str,
}

impl Judge<'_> {
    /// Runs one level and checks it against the engine's counters; returns the level.
    pub async fn level(
        &self,
        c: &mut agentpb::agent_client::AgentClient<tonic::transport::Channel>,
        concurrency: u32,
        run_id: &str,
        reset: bool,
        shared: bool,
    ) -> agentpb::LevelResult {
        let before = scrape(self.http, self.base, &self.names).await;
        let (_, levels) = bench(
            c,
            level_request(concurrency, run_id, reset, shared),
            Duration::from_secs(240),
        )
        .await
        .unwrap();
        let after = scrape(self.http, self.base, &self.names).await;
        assert_eq!(levels.len(), 1, "{levels:?}");
        let l = levels.into_iter().next().unwrap();
        let d = after.delta(&before);
        assert_eq!(l.outcome, agentpb::LevelOutcome::Ok as i32, "{l:?}");
        // Nothing lost: every request sent finished, by both counts.
        assert_eq!(
            (l.sent, l.completed, l.failed),
            (REQUESTS, REQUESTS, 0),
            "{l:?}"
        );
        assert_eq!(d.requests, REQUESTS as f64, "{} {d:?}", self.names.requests);
        // Tokens: the client's (from `usage`) against the engine's counters.
        assert_eq!(l.output_tokens, REQUESTS * u64::from(OUTPUT), "{l:?}");
        assert_eq!(l.output_tokens as f64, d.generation, "generation {d:?}");
        assert_eq!(l.input_tokens as f64, d.prompt, "prompt {d:?} {l:?}");
        // The stored cache figure is the engine's own.
        let cache = l.prefix_cache.as_ref().expect("a cache figure");
        assert!(cache.source.contains(self.names.cache_hits), "{cache:?}");
        assert_eq!(
            cache.prompt_tokens_engine,
            Some(d.lookups),
            "{cache:?} {d:?}"
        );
        let rate = if d.lookups > 0.0 {
            d.hits / d.lookups
        } else {
            0.0
        };
        let stored = cache.hit_rate.expect("a hit rate");
        assert!((stored - rate).abs() < 1e-9, "{cache:?} {d:?}");
        // ITL: the client's per-token mean against the engine's histogram over the same tokens.
        let engine_itl_ms = 1000.0 * d.itl_sum / d.itl_count;
        let client_itl_ms = l.itl_ms.as_ref().expect("ITL").mean;
        let off = (client_itl_ms - engine_itl_ms).abs() / engine_itl_ms;
        println!(
            "c={concurrency}: {:.1} tok/s, output {} = engine {}, prompt {} = engine {}, \
             cache {:.3} ({} of {} tokens), ITL client {client_itl_ms:.3} ms engine \
             {engine_itl_ms:.3} ms ({:+.2}%), reset: {}{}",
            l.output_tokens_per_s,
            l.output_tokens,
            d.generation,
            l.input_tokens,
            d.prompt,
            stored,
            d.hits,
            d.lookups,
            100.0 * (client_itl_ms - engine_itl_ms) / engine_itl_ms,
            cache.reset,
            self.note,
        );
        assert!(
            off <= 0.05,
            "mean ITL client {client_itl_ms} ms, engine {engine_itl_ms} ms"
        );
        l
    }
}

pub fn fact(st: &agentpb::EngineStatus, key: &str) -> Option<String> {
    st.facts
        .iter()
        .find(|f| f.key == key)
        .map(|f| f.value.clone())
}

/// Entries of `/tmp` vLLM and torch leave when nothing points them elsewhere (SGLang's are
/// Python's anonymous `tmpXXXX` directories, told apart by looking in the run's scratch).
pub fn tmp_entries() -> Vec<String> {
    std::fs::read_dir("/tmp")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("vllm_dist_") || n.starts_with("torchinductor_"))
        .collect()
}

/// Scratch directories of runs (the agent's `DATA_DIR/s/RUN`) still present.
pub fn scratch_dirs(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("s"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Sends one fixed 300-token-ish prompt (four blocks of vLLM's CPU cache, many of SGLang's
/// radix tokens) straight to the engine (`/v1/completions`, raw HTTP/1.1) and returns the
/// cache hits the engine counted for it. Used around a level: after the agent's reset a
/// repeat must hit nothing; without a reset it hits.
pub async fn probe_hits(http: &HttpClient, base: &str, names: &Names, model: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let prompt: Vec<String> = (0..150).map(|i| format!("word{}", i % 50)).collect();
    let body = serde_json::json!({
        "model": model,
        "prompt": prompt.join(" "),
        "max_tokens": 2,
    })
    .to_string();
    let before = scrape(http, base, names).await;
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_string(&mut out))
        .await
        .expect("a completion within 60 s")
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let hits = scrape(http, base, names).await.hits - before.hits;
    println!("probe prompt: {hits} tokens from the cache");
    hits
}
