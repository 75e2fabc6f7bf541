//! Fresh prompts against a real `llama-server` (CPU, SmolLM2-135M), judged by the server's own
//! accounting: a sweep of several levels with the same request count has the server evaluate
//! nearly every prompt token fleetbench sent (`llamacpp:prompt_tokens_total`), and each
//! level's stored cache figure adds up to what the server's counter says. A shared-prefix
//! workload, which asks for sharing, shows hits in the same figure; a reset empties the slots.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_agent::http::HttpClient;
use fleetbench_proto::agentpb;

/// The server's count of prompt tokens it evaluated.
async fn evaluated(http: &HttpClient, base: &str) -> f64 {
    let r = http
        .get(&format!("{base}/metrics"), Duration::from_secs(5), 1 << 20)
        .await
        .expect("llama-server /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix("llamacpp:prompt_tokens_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("llamacpp:prompt_tokens_total in /metrics")
}

fn cache(l: &agentpb::LevelResult) -> &agentpb::PrefixCache {
    l.prefix_cache
        .as_ref()
        .expect("every level has a cache figure")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_evaluates_what_was_sent_and_the_cache_figure_agrees() {
    let llama = fleetbench_testkit::llama_cpp();
    let port = fleetbench_testkit::free_port();
    // Slot actions (erase included) are served only with --slot-save-path: the operator's
    // fixed args name the directory, as callers may not pass paths.
    let slots = tempfile::tempdir().unwrap();
    let extra = format!(
        "[profiles.llama]\nkind = \"llamacpp\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\nstart_timeout_s = 180\nrun_as_root = true\n\
         args = [\"-m\", \"{{model}}\", \"--host\", \"{{host}}\", \"--port\", \"{{port}}\", \"--metrics\", \"--slot-save-path\", {:?}]\n",
        llama.server,
        llama.model,
        slots.path(),
    );
    let agent = Agent::start(&extra).unwrap();
    let mut c = agent.client().await.unwrap();
    let model = llama.model.to_string_lossy().into_owned();
    let flags = [
        ("--ctx-size", Some("4096")),
        ("--threads", Some("2")),
        ("--parallel", Some("2")),
    ];
    let ev = apply(
        &mut c,
        spec("llama", &model, 0, &flags),
        Duration::from_secs(240),
    )
    .await
    .unwrap();
    let base = ready(&ev)
        .unwrap_or_else(|| panic!("{ev:?}\n{}", agent.log_text()))
        .base_url
        .clone();
    let http = HttpClient::new();

    // Three levels, 8 requests each, 64-token prompts: without request markers every level
    // after the first would resend the first level's prompts.
    let before = evaluated(&http, &base).await;
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(random_workload(64, 4)),
        levels: vec![closed(1), closed(2), closed(2)],
        warmup_requests: 1,
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(8)),
        percentiles: vec![50.0, 99.0],
        run_id: "job-cache/trial-1/a0".into(),
        ..Default::default()
    };
    let (_, levels) = bench(&mut c, req, Duration::from_secs(300)).await.unwrap();
    let after = evaluated(&http, &base).await;
    assert_eq!(levels.len(), 3, "{levels:?}");
    let mut sent = 0u64;
    let mut engine = 0.0;
    for l in &levels {
        assert_eq!(l.outcome, agentpb::LevelOutcome::Ok as i32, "{l:?}");
        assert_eq!((l.completed, l.sent, l.error_rate), (8, 8, 0.0), "{l:?}");
        // Every prompt is 64 tokens by the server's own count (markers keep the length).
        assert_eq!(l.input_tokens, 8 * 64, "{l:?}");
        let f = cache(l);
        assert!(f.source.contains("llamacpp:prompt_tokens_total"), "{f:?}");
        // 8 measured + 1 warm-up request.
        assert_eq!(f.prompt_tokens_sent, 9 * 64, "{f:?}");
        let hit = f.hit_rate.expect("a figure");
        assert!(
            hit <= 0.05,
            "level {} reused {hit} of its prompt: {f:?}",
            l.level_index
        );
        sent += f.prompt_tokens_sent;
        engine += f.prompt_tokens_engine.expect("evaluated tokens");
    }
    let server = after - before;
    println!(
        "sent {sent} prompt tokens; llama-server evaluated {server} ({:.1}%); per-level figures sum to {engine}",
        100.0 * server / sent as f64
    );
    assert!(server >= 0.95 * sent as f64, "evaluated {server} of {sent}");
    assert_eq!(
        engine, server,
        "the stored per-level figures add up to the server's counter"
    );

    // A workload that asks for sharing: one group, a 96-token prefix shared by every request
    // of the level. The same figure shows the server reusing it; a reset first empties the
    // slots, so the level's first request evaluates the prefix again.
    let shared = agentpb::Workload {
        name: "shared".into(),
        dataset: Some(agentpb::workload::Dataset::SharedPrefix(
            agentpb::SharedPrefixDataset {
                groups: 1,
                prompts_per_group: 6,
                prefix_len: 96,
                suffix_len: 16,
                output_len: 4,
            },
        )),
        api: agentpb::ApiKind::Completions as i32,
        model: String::new(),
        ignore_eos: true,
        seed: 2,
    };
    let before = evaluated(&http, &base).await;
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(shared),
        levels: vec![closed(1)],
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(6)),
        run_id: "job-cache/trial-2/a0".into(),
        reset_cache: true,
        ..Default::default()
    };
    let (_, levels) = bench(&mut c, req, Duration::from_secs(300)).await.unwrap();
    let after = evaluated(&http, &base).await;
    let f = cache(&levels[0]);
    println!("shared prefix: {f:?}; server evaluated {}", after - before);
    assert!(f.reset.starts_with("flushed (2 slots erased"), "{f:?}");
    assert_eq!(f.prompt_tokens_engine, Some(after - before));
    let hit = f.hit_rate.unwrap();
    assert!(
        hit > 0.4,
        "a shared 96-token prefix should be reused: {f:?}"
    );
}
