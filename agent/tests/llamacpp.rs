//! The same lifecycle against a real `llama-server` (CPU) with the SmolLM2-135M GGUF: apply,
//! restart with a different `--parallel`, a short benchmark, its `/metrics` through the stream.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb;
use tokio_stream::StreamExt;

fn fact(st: &agentpb::EngineStatus, key: &str) -> Option<String> {
    st.facts
        .iter()
        .find(|f| f.key == key)
        .map(|f| f.value.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_apply_restart_benchmark_metrics() {
    let llama = fleetbench_testkit::llama_cpp();
    let port = fleetbench_testkit::free_port();
    let extra = format!(
        "[profiles.llama]\nkind = \"llamacpp\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\nstart_timeout_s = 180\nrun_as_root = true\n",
        llama.server, llama.model,
    );
    let agent = Agent::start(&extra).unwrap();
    let mut c = agent.client().await.unwrap();
    let model = llama.model.to_string_lossy().into_owned();
    let small = [("--ctx-size", Some("2048")), ("--threads", Some("2"))];

    let flags1: Vec<_> = small
        .iter()
        .copied()
        .chain([("--parallel", Some("1"))])
        .collect();
    let ev = apply(
        &mut c,
        spec("llama", &model, 0, &flags1),
        Duration::from_secs(240),
    )
    .await
    .unwrap();
    let first = spawned(&ev).expect("spawned").clone();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fact(&st, "n_slots").as_deref(), Some("1"), "{:?}", st.facts);

    // Restart with two slots: the first server is gone, the new one reports two slots.
    let flags2: Vec<_> = small
        .iter()
        .copied()
        .chain([("--parallel", Some("2"))])
        .collect();
    let ev = apply(
        &mut c,
        spec("llama", &model, 0, &flags2),
        Duration::from_secs(240),
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
    assert_eq!(fact(&st, "n_slots").as_deref(), Some("2"), "{:?}", st.facts);

    // A short benchmark (prompts from a JSONL file: no prompt shaping through /tokenize).
    let prompts = write(
        &agent.dir.path().join("prompts.jsonl"),
        "\"Name three colours.\"\n\"What is two plus two?\"\n\"Say hello in French.\"\n\"Count to five.\"\n",
    );
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(agentpb::Workload {
            name: "prompts".into(),
            dataset: Some(agentpb::workload::Dataset::Jsonl(agentpb::JsonlDataset {
                path: prompts.to_string_lossy().into_owned(),
                output_len: 8,
            })),
            api: agentpb::ApiKind::Chat as i32,
            model: String::new(),
            ignore_eos: true,
            seed: 1,
        }),
        levels: vec![closed(1), closed(2)],
        warmup_requests: 0,
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(4)),
        percentiles: vec![50.0, 99.0],
        slo: None,
        run_id: "llama".into(),
        skip_levels: vec![],
        ..Default::default()
    };
    let (_, levels) = bench(&mut c, req, Duration::from_secs(300)).await.unwrap();
    assert_eq!(levels.len(), 2, "{levels:?}");
    for l in &levels {
        assert_eq!(l.outcome, agentpb::LevelOutcome::Ok as i32, "{l:?}");
        assert_eq!(l.completed, 4, "{l:?}");
        assert!(l.output_tokens > 0);
    }

    // Its /metrics through the stream: llama.cpp's own names, mapped and raw.
    let mut ms = engine_metrics(&mut c, 250, false).await;
    let s = tokio::time::timeout(Duration::from_secs(10), ms.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let engine = s.engine.unwrap();
    assert!(engine.scraped, "{engine:?}");
    assert!(
        engine.raw.iter().any(|r| r.name.starts_with("llamacpp:")),
        "{:?}",
        engine.raw
    );
    assert!(
        engine.generation_tokens_total.is_some_and(|t| t > 0.0),
        "{engine:?}"
    );
    assert!(s.process.unwrap().rss_bytes > 0);

    let st = c
        .stop_engine(agentpb::StopEngineRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
    assert!(group_members(second.pid as i32).is_empty());
}
