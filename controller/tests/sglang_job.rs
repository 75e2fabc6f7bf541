//! An A/B job on a real SGLang (0.5.23 on the CPU, the tiny random-weight Llama) through the
//! whole path: the controller (in-process), a real agent process, the engines it starts for
//! each trial. SGLang runs on the CPU with fleetbench's stand-in for its CPU kernel helpers
//! (`scripts/engines/sgl_kernel_cpu_standin`); its GPU kernels are not exercised.
//! `--max-running-requests 1` against `8`, at concurrency 1 and 8: at 8 the engine that
//! batches eight requests must win significantly; at 1 both run one request at a time and
//! nothing may be called significant.
//!
//! Three repeats per config, interleaved: six engine starts of 25-40 s each on 2 cores, about
//! five minutes in all. With two (the fewest with a measured spread) a busy machine (repeats
//! ±20% apart at c=8) left a +358% effect at Holm p 0.056. Every level runs after a
//! radix-cache flush, and the stored cache figure is SGLang's own.
//!
//! Beside it, an A/A job (two configs differing only in the sampling seed, 2 repeats at concurrency 4: four
//! engine starts) in which nothing may be called, and a regression suite run twice through
//! `fleetbench regress --controller` (1 repeat a run, as a nightly suite on an expensive host
//! runs: two engine starts; with one stored run the checks are "forming" whatever the repeats).

mod common;

use common::*;

/// A real agent whose `sglang` profile starts SGLang on the CPU (with the kernel-helper
/// stand-in), and an in-process controller that knows it.
///
/// The profile does not ask SGLang for its `--help` (`help_args = []`): reading it imports
/// torch and SGLang, 21 s of every rig here (the suite test's first run: 66 s with it, 45 s
/// without), and it is `agent/tests/sglang.rs`'s subject; the flags these jobs set are in the
/// built-in tables.
struct Rig {
    agent: Proc,
    ctl: fleetbench_controller::ControllerHandle,
    c: Client,
    model: String,
    dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    println!("{}", fleetbench_testkit::engines::SGLANG_CPU_NOTE);
    let v = fleetbench_testkit::engines::sglang_cpu();
    let dir = tempfile::tempdir().unwrap();
    let port = fleetbench_testkit::free_port();
    let data = dir.path().join("h1");
    let env: String = fleetbench_testkit::engines::sglang_cpu_env(&v)
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let agent_toml = format!(
        "name = \"h1\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = {data:?}\n\
         [profiles.sglang]\nkind = \"sglang\"\nprogram = {:?}\nmodels = [{:?}]\nport = {port}\n\
         start_timeout_s = 300\nrun_as_root = true\nhelp_args = []\n\
         args = [\"-m\", \"sglang.launch_server\", \"--model-path\", \"{{model}}\", \"--host\", \
         \"{{host}}\", \"--port\", \"{{port}}\", \"--enable-metrics\", \"--device\", \"cpu\", \
         \"--attention-backend\", \"torch_native\", \"--sampling-backend\", \"pytorch\", \
         \"--disable-overlap-schedule\", \"--dtype\", \"bfloat16\", \"--context-length\", \"512\", \
         \"--max-total-tokens\", \"8192\"]\nenv = {{ {env} }}\n",
        v.python, v.model,
    );
    let agent = spawn_agent_toml(dir.path(), "h1", &agent_toml);
    let ctl = start_local(local_config(dir.path(), &[&agent])).await;
    let c = client(ctl.addr).await;
    Rig {
        agent,
        ctl,
        c,
        model: v.model.to_string_lossy().into_owned(),
        dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_running_requests_8_wins_at_concurrency_8_and_nothing_is_called_at_1() {
    let Rig {
        agent,
        ctl,
        mut c,
        model,
        dir: _dir,
    } = rig().await;
    let spec = format!(
        r#"name = "sglang-ab"
repeats = 3
order = "interleaved"

[[configs]]
name = "running1"
engine = "sglang"
model = {:?}
flags = {{ "--max-running-requests" = 1 }}

[[configs]]
name = "running8"
extends = "running1"
flags = {{ "--max-running-requests" = 8 }}

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
"#,
        model
    );
    let job = engine_ab::run_job(
        &mut c,
        &agent,
        "SGLang A/B job (on the CPU with a kernel-helper stand-in)",
        spec,
    )
    .await;

    // Every stored level: nothing lost, the cache emptied before it, SGLang's own cache figure.
    engine_ab::check_levels_and_verdicts(&mut c, &job, "sglang:cached_tokens_total", "running8")
        .await;
    ctl.shutdown().await;
}

/// Two configs with the same flags, each trial a fresh engine: nothing may be called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aa_job_calls_nothing() {
    let Rig {
        agent,
        ctl,
        mut c,
        model,
        dir: _dir,
    } = rig().await;
    let spec = engine_ab::aa_spec(
        "sglang",
        &model,
        "--max-running-requests",
        4,
        "--random-seed",
    );
    let job = engine_ab::run_job(&mut c, &agent, "SGLang A/A job (CPU, stand-in)", spec).await;
    engine_ab::check_aa(&mut c, &job).await;
    ctl.shutdown().await;
}

/// A regression suite as CI runs it, twice, with `fleetbench regress --controller`: the first
/// run has no baseline, the second is compared with the first and passes (its checks are
/// "forming": one stored run cannot say how much runs differ, so nothing may fail yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regression_suite_runs_twice_and_the_second_run_passes_against_the_first() {
    let Rig {
        agent,
        ctl,
        c: _c,
        model,
        dir,
    } = rig().await;
    let suite = format!(
        r#"name = "sglang-nightly"
repeats = 1

[[configs]]
name = "running8"
engine = "sglang"
model = {model:?}
flags = {{ "--max-running-requests" = 8 }}

[[workloads]]
name = "random-48-32"
dataset = "random"
input_len = 48
output_len = 32
ignore_eos = true

[load]
concurrency = [4]
requests = 16
reset_cache = true

[suite]
baseline = "last-passing"
metrics = [
  {{ name = "output_tokens_per_s", tolerance = 0.10 }},
  {{ name = "itl_p50_ms", direction = "lower", tolerance = 0.10 }},
  {{ name = "error_rate", tolerance = 0.01 }},
]
"#
    );
    let path = dir.path().join("suite.toml");
    std::fs::write(&path, suite).unwrap();
    let url = format!("http://{}", ctl.addr);
    let regress = |run: &str| {
        let (path, url, data) = (
            path.clone(),
            url.clone(),
            dir.path().join(format!("cli-{run}")),
        );
        tokio::task::spawn_blocking(move || {
            let t = std::time::Instant::now();
            let o = fleetbench_testkit::fleetbench_cli()
                .arg("regress")
                .arg(&path)
                .args(["--controller", &url, "--data-dir"])
                .arg(&data)
                .output()
                .expect("run fleetbench regress");
            (o, t.elapsed().as_secs_f64())
        })
    };
    let (first, s1) = regress("1").await.unwrap();
    let out1 = fleetbench_testkit::output_text(&first);
    println!("SGLang suite, run 1 ({s1:.0} s):\n{out1}");
    assert_eq!(first.status.code(), Some(0), "{out1}\n{}", agent.log_text());
    assert!(out1.contains("baseline: none (first run"), "{out1}");
    let first_job = out1
        .split("(job ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("the first run's job id")
        .to_string();

    let (second, s2) = regress("2").await.unwrap();
    let out2 = fleetbench_testkit::output_text(&second);
    println!("SGLang suite, run 2 ({s2:.0} s):\n{out2}");
    assert_eq!(
        second.status.code(),
        Some(0),
        "{out2}\n{}",
        agent.log_text()
    );
    assert!(
        out2.contains(&format!("baseline: {first_job}")),
        "the second run is not compared with the first ({first_job}):\n{out2}"
    );
    assert!(out2.contains("forming"), "{out2}");
    assert!(!out2.contains("REGRESSED"), "{out2}");
    ctl.shutdown().await;
}
