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

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::controllerpb::{JobState, SubmitJobRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_running_requests_8_wins_at_concurrency_8_and_nothing_is_called_at_1() {
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
         start_timeout_s = 300\nrun_as_root = true\n\
         args = [\"-m\", \"sglang.launch_server\", \"--model-path\", \"{{model}}\", \"--host\", \
         \"{{host}}\", \"--port\", \"{{port}}\", \"--enable-metrics\", \"--device\", \"cpu\", \
         \"--attention-backend\", \"torch_native\", \"--sampling-backend\", \"pytorch\", \
         \"--disable-overlap-schedule\", \"--dtype\", \"bfloat16\", \"--context-length\", \"512\", \
         \"--max-total-tokens\", \"8192\"]\nenv = {{ {env} }}\n",
        v.python, v.model,
    );
    let agent = spawn_agent_toml(dir.path(), "h1", &agent_toml);
    let ctl = start_local(local_config(dir.path(), &[&agent])).await;
    let mut c = client(ctl.addr).await;

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
        v.model.to_string_lossy()
    );
    let t = std::time::Instant::now();
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec,
            file_name: "sglang-ab.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let job = wait_job(&mut c, &r.job_id, Duration::from_secs(900)).await;
    assert_eq!(
        job.state,
        JobState::Succeeded as i32,
        "{job:?}\n{}",
        agent.log_text()
    );
    println!(
        "SGLang A/B job (on the CPU with a kernel-helper stand-in): {:.0} s",
        t.elapsed().as_secs_f64()
    );

    // Every stored level: nothing lost, the cache emptied before it, SGLang's own cache figure.
    engine_ab::check_levels_and_verdicts(
        &mut c,
        &r.job_id,
        "sglang:cached_tokens_total",
        "running8",
    )
    .await;
    ctl.shutdown().await;
}
