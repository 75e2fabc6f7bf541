//! A real SGLang (0.5.23 from the Python registry) serving the tiny random-weight Llama on the
//! CPU, started by the agent through an `sglang`-kind profile. SGLang runs on the CPU with
//! fleetbench's stand-in for its CPU kernel helpers (`scripts/engines/sgl_kernel_cpu_standin`:
//! the registry has no CPU build of SGLang's kernel package); SGLang's own server, tokenizer
//! manager, scheduler, radix cache and metrics run, its GPU kernels are not exercised.
//!
//! The same checks as vLLM's (`vllm.rs`, `common/truth.rs`): readiness on `/health` 200 (SGLang
//! answers 503 during its own warm-up request, which the level counters leave out because they
//! are read around each level), the flag rules from the real `--help`, effective args from the
//! server's `server_args=` line, a restart with another `--max-running-requests`, per-level
//! truth against SGLang's counters, `/flush_cache` between levels, and a stop that ends the
//! tree and leaves nothing behind. Two engine starts (25-40 s each on 2 cores); a third, with no
//! room for a KV cache, fails at start-up and is classified from its traceback.

mod common;

use std::time::Duration;

use common::truth::{self, Judge, fact, scratch_dirs, tmp_entries};
use common::*;
use fleetbench_agent::http::HttpClient;
use fleetbench_proto::agentpb::{self, engine_event::Event};
use fleetbench_testkit::engines::{SGLANG_CPU_NOTE, SglangCpu, sglang_cpu, sglang_cpu_env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_on_cpu_with_a_kernel_stand_in_serves_restarts_and_agrees_with_its_counters() {
    println!("{SGLANG_CPU_NOTE}");
    let s = sglang_cpu();
    let port = fleetbench_testkit::free_port();
    let extra = profile(&s, "sglang-cpu", port, 8192);
    let tmp_before = tmp_entries();
    let agent = Agent::start(&extra).unwrap();
    let mut c = agent.client().await.unwrap();
    let http = HttpClient::new();
    let base = format!("http://127.0.0.1:{port}");
    let model = s.model.to_string_lossy().into_owned();
    let judge = Judge {
        http: &http,
        base: &base,
        names: truth::SGLANG,
        note: " (SGLang on the CPU with a stand-in for its CPU kernel helpers)",
    };

    let t = std::time::Instant::now();
    let ev = apply(
        &mut c,
        spec(
            "sglang-cpu",
            &model,
            0,
            &[("--max-running-requests", Some("1"))],
        ),
        Duration::from_secs(360),
    )
    .await
    .unwrap();
    let first = spawned(&ev).expect("spawned").clone();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    println!("SGLang ready in {:.1} s", t.elapsed().as_secs_f64());
    let log = agent.log_text();
    assert!(
        log.contains("sglang.launch_server --help (") && log.contains("options) and the profile"),
        "the agent did not read SGLang's --help:\n{log}"
    );
    let scratch = scratch_dirs(&agent.data_dir());
    assert_eq!(scratch.len(), 1, "{scratch:?}");
    let scratch_tmp = agent.data_dir().join("s").join(&scratch[0]).join("tmp");
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    let args: serde_json::Value =
        serde_json::from_str(&fact(&st, "server_args").expect("server_args from the log")).unwrap();
    assert_eq!(args["max_running_requests"], 1, "{args}");
    assert_eq!(args["device"], "cpu", "{args}");

    // The flush is honest: a prompt SGLang has cached hits, and after a level that asked for
    // /flush_cache, the same prompt hits nothing.
    truth::probe_hits(&http, &base, &truth::SGLANG, &model).await;
    let cached = truth::probe_hits(&http, &base, &truth::SGLANG, &model).await;
    assert!(cached > 100.0, "{cached}");
    for conc in [1, 4] {
        let l = judge
            .level(&mut c, conc, &format!("sglang-a-{conc}"), true, false)
            .await;
        assert_eq!(l.prefix_cache.as_ref().unwrap().reset, "flushed");
    }
    // The radix cache matches single tokens: after the flush the probe may share its first
    // token (the BOS) with the level's own prompts, nothing more.
    let after = truth::probe_hits(&http, &base, &truth::SGLANG, &model).await;
    assert!(
        after <= 2.0,
        "a prompt cached before /flush_cache still hits {after} of {cached} tokens after it"
    );
    // Shared prefixes, one at a time: the radix cache serves each group's prefix after its
    // first request, by SGLang's own count.
    let shared = judge.level(&mut c, 1, "sglang-a-shared", true, true).await;
    assert!(
        shared.prefix_cache.as_ref().unwrap().hit_rate.unwrap() > 0.3,
        "{:?}",
        shared.prefix_cache
    );

    // SGLang's temporary directories went to the run's scratch, not /tmp.
    assert!(
        std::fs::read_dir(&scratch_tmp).unwrap().count() > 0,
        "nothing in {}",
        scratch_tmp.display()
    );

    // Restart with eight running requests.
    let ev = apply(
        &mut c,
        spec(
            "sglang-cpu",
            &model,
            0,
            &[("--max-running-requests", Some("8"))],
        ),
        Duration::from_secs(360),
    )
    .await
    .unwrap();
    let second = spawned(&ev).expect("spawned").clone();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    assert!(group_members(first.pid as i32).is_empty());
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    let args: serde_json::Value = serde_json::from_str(&fact(&st, "server_args").unwrap()).unwrap();
    assert_eq!(args["max_running_requests"], 8, "{args}");
    judge.level(&mut c, 8, "sglang-b-8", true, false).await;

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
    assert_eq!(new, Vec::<String>::new(), "SGLang wrote into /tmp");
}

/// A KV cache too small for the context (`--max-total-tokens 0`: SGLang's scheduler raises
/// "Not enough memory" while sizing its pool) ends by SGLang's own SIGKILL of its tree; the agent
/// reports the traceback as `oom`, not as a kill from outside fleetbench (which would make the
/// trial run again as a host fault). The one-token pool's `AssertionError` is the recorded
/// fixture `sglang_cpu_kv_cache_one_token.log` (engines/tests/sglang_cpu_recorded.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_cache_too_small_is_sglangs_oom_traceback_not_a_kill_from_outside() {
    println!("{SGLANG_CPU_NOTE}");
    let s = sglang_cpu();
    let port = fleetbench_testkit::free_port();
    let agent = Agent::start(&profile(&s, "sglang-no-kv", port, 0)).unwrap();
    let mut c = agent.client().await.unwrap();
    let model = s.model.to_string_lossy().into_owned();
    let ev = apply(
        &mut c,
        spec("sglang-no-kv", &model, 0, &[]),
        Duration::from_secs(360),
    )
    .await
    .unwrap();
    let pid = spawned(&ev).expect("spawned").pid;
    let Some(Event::Failed(crash)) = ev.last() else {
        panic!("last event is not a failure: {ev:?}\n{}", agent.log_text())
    };
    assert_eq!(crash.signal, Some(9), "{crash:?}");
    assert_eq!(crash.class, agentpb::CrashClass::Oom as i32, "{crash:?}");
    assert_eq!(crash.exception_type, "RuntimeError", "{crash:?}");
    assert!(crash.message.starts_with("Not enough memory."), "{crash:?}");
    assert!(
        crash.summary.ends_with("; killed itself with SIGKILL (9)"),
        "{}",
        crash.summary
    );
    assert!(ready(&ev).is_none());
    assert!(group_members(pid as i32).is_empty());
}

/// An `sglang`-kind profile `name` for the tiny Llama on the CPU on `port`, with a KV pool of
/// `kv_tokens` tokens for a 512-token context.
fn profile(s: &SglangCpu, name: &str, port: u16, kv_tokens: u32) -> String {
    let env: String = sglang_cpu_env(s)
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[profiles.{name}]\nkind = \"sglang\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\n\
         start_timeout_s = 300\nrun_as_root = true\n\
         args = [\"-m\", \"sglang.launch_server\", \"--model-path\", \"{{model}}\", \"--host\", \
         \"{{host}}\", \"--port\", \"{{port}}\", \"--enable-metrics\", \"--device\", \"cpu\", \
         \"--attention-backend\", \"torch_native\", \"--sampling-backend\", \"pytorch\", \
         \"--disable-overlap-schedule\", \"--dtype\", \"bfloat16\", \"--context-length\", \"512\", \
         \"--max-total-tokens\", \"{kv_tokens}\"]\nenv = {{ {env} }}\n",
        s.python, s.model,
    )
}
