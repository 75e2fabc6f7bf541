//! Multi-turn sessions through the agent against a real `llama-server` (CPU, SmolLM2-135M):
//! each level's stored cache figure carries the reuse the workload designs
//! (`prefix_cache.designed_reuse`) beside the server's own (`hit_rate`, from
//! `llamacpp:prompt_tokens_total`), and the two agree within 5 points.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_level_states_its_designed_reuse_beside_the_engines() {
    let llama = fleetbench_testkit::llama_cpp();
    let port = fleetbench_testkit::free_port();
    let extra = format!(
        "[profiles.llama]\nkind = \"llamacpp\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\nstart_timeout_s = 180\nrun_as_root = true\n\
         args = [\"-m\", \"{{model}}\", \"--host\", \"{{host}}\", \"--port\", \"{{port}}\", \"--metrics\"]\n",
        llama.server, llama.model,
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
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());

    // Three turns of 64-token messages and 16-token answers: prompts of 64, 144 and 224
    // tokens, of which 0, 64 and 144 repeat the session's previous prompt (48.1%).
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(agentpb::Workload {
            name: "chat".into(),
            dataset: Some(agentpb::workload::Dataset::Conversation(
                agentpb::ConversationDataset {
                    turns: 3,
                    input_len: 64,
                    output_len: 16,
                    think_time_ms: 20,
                    system_prompt_len: 0,
                },
            )),
            api: agentpb::ApiKind::Completions as i32,
            model: String::new(),
            ignore_eos: true,
            seed: 1,
        }),
        levels: vec![closed(2)],
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(12)),
        percentiles: vec![50.0, 99.0],
        run_id: "job-conv/trial-1/a0".into(),
        ..Default::default()
    };
    let (_, levels) = bench(&mut c, req, Duration::from_secs(300)).await.unwrap();
    assert_eq!(levels.len(), 1, "{levels:?}");
    let l = &levels[0];
    assert_eq!(l.outcome, agentpb::LevelOutcome::Ok as i32, "{l:?}");
    assert_eq!((l.completed, l.error_rate), (12, 0.0), "{l:?}");
    let f = l.prefix_cache.as_ref().expect("a cache figure");
    assert_eq!(f.prompt_tokens_sent, 4 * (64 + 144 + 224), "{f:?}");
    assert_eq!(f.prompt_tokens_reusable, 4 * (64 + 144), "{f:?}");
    let designed = f.designed_reuse.expect("a conversation states its reuse");
    let hit = f.hit_rate.expect("llama-server's figure");
    println!(
        "designed reuse {:.1}%, llama-server's hit rate {:.1}% ({})",
        designed * 100.0,
        hit * 100.0,
        f.source
    );
    assert!(
        (designed - hit).abs() <= 0.05,
        "designed {designed:.3}, engine {hit:.3}: {f:?}"
    );
}
