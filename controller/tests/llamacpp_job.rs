//! A job on a real `llama-server` (CPU, SmolLM2-135M) through the whole path: the controller
//! (in-process), a real agent process, the engine the agent starts for the job. Judged by the
//! server's own accounting as stored with each level: over a sweep of levels with the same
//! request count the server evaluates (nearly) every prompt token fleetbench sent, so no level
//! is measured on prompts cached by the level before. The agent-level test
//! (`agent/tests/llamacpp_cache.rs`) checks that the per-level figure adds up to the server's
//! counter; this one checks that the figure is what the store keeps and what `compare` reads.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::controllerpb::{GetResultsRequest, JobState, SubmitJobRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_llama_cpp_sweep_stores_fresh_prompts_by_the_servers_own_count() {
    let llama = fleetbench_testkit::llama_cpp();
    let dir = tempfile::tempdir().unwrap();
    let port = fleetbench_testkit::free_port();
    let data = dir.path().join("h1");
    let agent_toml = format!(
        "name = \"h1\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = {:?}\n\
         [profiles.llamacpp]\nkind = \"llamacpp\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\n\
         start_timeout_s = 180\n\
         args = [\"-m\", \"{{model}}\", \"--host\", \"{{host}}\", \"--port\", \"{{port}}\", \"--metrics\"]\n",
        data, llama.server, llama.model,
    );
    let agent = spawn_agent_toml(dir.path(), "h1", &agent_toml);

    let ctl = start_local(local_config(dir.path(), &[&agent])).await;
    let mut c = client(ctl.addr).await;

    // Three levels (1, 2 and 3 streams) of 8 requests with 64-token prompts. Without a marker per request, every
    // level after the first would resend the first level's prompts into the slots' cache.
    let spec = format!(
        r#"name = "llama-fresh"
[[configs]]
name = "small"
engine = "llamacpp"
model = {:?}
flags = {{ "--ctx-size" = 4096, "--threads" = 2, "--parallel" = 2 }}

[[workloads]]
name = "random-64-4"
dataset = "random"
input_len = 64
output_len = 4
range_ratio = 1.0
ignore_eos = true

[load]
concurrency = [1, 2, 3]
requests = 8
warmup = 1
"#,
        llama.model.to_string_lossy()
    );
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec,
            file_name: "llama.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let job = wait_job(&mut c, &r.job_id, Duration::from_secs(420)).await;
    assert_eq!(
        job.state,
        JobState::Succeeded as i32,
        "{job:?}\n{}",
        agent.log_text()
    );
    let res = c
        .get_results(GetResultsRequest {
            job_ids: vec![r.job_id.clone()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.levels.len(), 3, "{:?}", res.levels);
    let (mut sent, mut evaluated) = (0u64, 0.0);
    for l in &res.levels {
        let result = l.result.as_ref().expect("a stored result");
        assert_eq!((result.completed, result.sent), (8, 8), "{result:?}");
        let cache = result
            .prefix_cache
            .as_ref()
            .expect("every stored level has a cache figure");
        assert!(
            cache.source.contains("llamacpp:prompt_tokens_total"),
            "{cache:?}"
        );
        // 8 measured requests + 1 warm-up, 64 prompt tokens each by the server's count.
        assert_eq!(cache.prompt_tokens_sent, 9 * 64, "{cache:?}");
        let engine = cache.prompt_tokens_engine.expect("the server's count");
        let hit = cache.hit_rate.expect("a hit rate");
        assert!(
            hit <= 0.05,
            "level {} served {hit} of its prompt from the cache: {cache:?}",
            result.level_index
        );
        sent += cache.prompt_tokens_sent;
        evaluated += engine;
    }
    println!(
        "stored: sent {sent} prompt tokens, llama-server evaluated {evaluated} ({:.1}%)",
        100.0 * evaluated / sent as f64
    );
    assert!(
        evaluated >= 0.95 * sent as f64,
        "evaluated {evaluated} of {sent}"
    );
    ctl.shutdown().await;
}
