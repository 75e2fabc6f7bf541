//! Metric mapping on scrapes: llama.cpp's recorded from the real server with `--metrics`,
//! SGLang's and vLLM's in prometheus_client's exposition with the engines' names and labels.

mod common;

use common::fixture;
use fleetbench_engines::prom::{self, MetricType};
use fleetbench_engines::{EngineKind, map_metrics};

#[test]
fn llamacpp_recorded_scrape_after_one_request() {
    let text = fixture("metrics/llamacpp_after_one_request.txt");
    let m = map_metrics(EngineKind::Llamacpp, &text);
    assert_eq!(m.running_requests, Some(0.0));
    assert_eq!(m.queued_requests, Some(0.0));
    assert_eq!(m.prompt_tokens_total, Some(31.0));
    assert_eq!(m.generation_tokens_total, Some(11.0));
    // `predicted_tokens_seconds` (114.035 here) is one request's decode speed, not the
    // server's rate: left to be derived from the counter.
    assert_eq!(m.generation_tokens_per_s, None);
    // This build no longer exports KV-cache usage.
    assert_eq!(m.kv_cache_usage, None);
    assert_eq!(m.raw.len(), 15);
    assert!(m.parse_errors.is_empty());
    assert!(
        m.raw
            .iter()
            .any(|s| s.name == "llamacpp:n_busy_slots_per_decode")
    );
}

#[test]
fn llamacpp_recorded_scrape_under_load() {
    // 6 requests on 4 slots: 4 processing, 2 deferred.
    let m = map_metrics(
        EngineKind::Llamacpp,
        &fixture("metrics/llamacpp_busy_np4.txt"),
    );
    assert_eq!(m.running_requests, Some(4.0));
    assert_eq!(m.queued_requests, Some(2.0));
}

#[test]
fn sglang_tp_ranks_are_counted_once_and_counters_summed_over_labels() {
    let m = map_metrics(EngineKind::Sglang, &fixture("metrics/sglang_tp2.txt"));
    assert_eq!(m.running_requests, Some(248.0));
    assert_eq!(m.queued_requests, Some(8.0));
    assert_eq!(m.kv_cache_usage, Some(0.16));
    assert_eq!(m.generation_tokens_per_s, Some(1950.3418912));
    assert_eq!(m.prompt_tokens_total, Some(3_355_443.2 + 1024.0));
    assert_eq!(m.generation_tokens_total, Some(413_000.0));
    let sim = map_metrics(EngineKind::Sim, &fixture("metrics/sglang_tp2.txt"));
    assert_eq!(sim, m);
}

#[test]
fn vllm_engines_summed_and_kv_usage_averaged() {
    let m = map_metrics(EngineKind::Vllm, &fixture("metrics/vllm_0.33_dp2.txt"));
    assert_eq!(m.running_requests, Some(238.0));
    assert_eq!(m.queued_requests, Some(3.0));
    assert_eq!(m.kv_cache_usage, Some(0.4));
    assert_eq!(m.generation_tokens_per_s, None);
    assert_eq!(m.prompt_tokens_total, Some(2_048_576.0));
    assert_eq!(m.generation_tokens_total, Some(499_000.0));
}

#[test]
fn vllm_v0_names_still_map() {
    let m = map_metrics(EngineKind::Vllm, &fixture("metrics/vllm_v0_old_names.txt"));
    assert_eq!(m.running_requests, Some(31.0));
    assert_eq!(m.kv_cache_usage, Some(0.9712));
    assert_eq!(m.generation_tokens_total, Some(120_533.0));
}

#[test]
fn generic_picks_the_names_the_scrape_carries() {
    let m = map_metrics(EngineKind::Generic, &fixture("metrics/vllm_0.33_dp2.txt"));
    assert_eq!(m.running_requests, Some(238.0));
    let m = map_metrics(
        EngineKind::Generic,
        &fixture("metrics/llamacpp_busy_np4.txt"),
    );
    assert_eq!(m.queued_requests, Some(2.0));
}

#[test]
fn histogram_families_and_types_are_read() {
    let e = prom::parse(&fixture("metrics/sglang_tp2.txt"));
    assert!(e.errors.is_empty(), "{:?}", e.errors);
    assert_eq!(
        e.type_of("sglang:time_to_first_token_seconds_bucket"),
        MetricType::Histogram
    );
    assert_eq!(e.type_of("sglang:prompt_tokens_total"), MetricType::Counter);
    let inf = e
        .series
        .iter()
        .find(|s| {
            s.name == "sglang:time_to_first_token_seconds_bucket"
                && s.labels.get("le").map(String::as_str) == Some("+Inf")
        })
        .unwrap();
    assert_eq!(inf.value, 3301.0);
    assert_eq!(inf.labels["model_name"], "Qwen/Qwen3-30B-A3B");
}
