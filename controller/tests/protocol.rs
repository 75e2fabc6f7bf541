//! The measurement protocol end to end (controller in-process, a real agent process, the
//! simulated engine), judged by what is stored: each level's prefix-cache figure from the
//! engine's own counters, and failed requests as a per-level error rate.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use fleetbench_controller::ControllerHandle;
use fleetbench_proto::controllerpb::{
    GetResultsRequest, GetResultsResponse, JobState, StoredLevel, SubmitJobRequest,
    controller_client::ControllerClient,
};

async fn controller(dir: &std::path::Path, agents: &[&Proc]) -> ControllerHandle {
    start_local(local_config(dir, agents)).await
}

/// Submits `spec`, waits for it to succeed, and returns what was stored.
async fn run(
    c: &mut ControllerClient<tonic::transport::Channel>,
    spec: &str,
) -> GetResultsResponse {
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec.into(),
            file_name: "job.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let job = wait_job(c, &r.job_id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    c.get_results(GetResultsRequest {
        job_ids: vec![r.job_id],
        include_telemetry: false,
    })
    .await
    .unwrap()
    .into_inner()
}

fn hit_rate(l: &StoredLevel) -> Option<f64> {
    l.result
        .as_ref()
        .and_then(|r| r.prefix_cache.as_ref())
        .and_then(|c| c.hit_rate)
}

/// Two configs, two levels each, on the simulator with its prefix cache on. The random
/// workload's prompts never hit it (every request carries its own marker); the shared-prefix
/// workload hits exactly its shared blocks, the same at every level and for both configs: no
/// level inherits the previous level's prompts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_configs_get_the_same_cache_figure_from_the_sim_prefix_cache() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&agent]).await;
    let mut c = client(ctl.addr).await;
    let spec = r#"name = "cache"
[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 2, "--itl-ms" = 2 }

[[configs]]
name = "B"
extends = "A"
flags = { "--itl-ms" = 3 }

[[workloads]]
name = "random"
dataset = "random"
input_len = 48
output_len = 4

[[workloads]]
name = "shared"
dataset = "shared-prefix"
groups = 2
prompts_per_group = 4
prefix_len = 64
suffix_len = 16
output_len = 4

[load]
concurrency = [1, 4]
requests = 8
reset_cache = true
"#;
    let r = run(&mut c, spec).await;
    assert_eq!(r.levels.len(), 2 * 2 * 2, "configs x workloads x levels");
    for l in &r.levels {
        let cache = l.result.as_ref().unwrap().prefix_cache.as_ref().unwrap();
        assert_eq!(
            cache.reset, "flushed",
            "POST /flush_cache before every level"
        );
        assert!(
            cache.source.starts_with("sglang:cached_tokens_total"),
            "{cache:?}"
        );
    }
    let mut figures: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for l in &r.levels {
        let h = hit_rate(l).unwrap_or_else(|| panic!("no cache figure: {l:?}"));
        figures
            .entry((l.workload.clone(), l.config_name.clone()))
            .or_default()
            .push(h);
    }
    println!("{figures:?}");
    for ((w, cfg), hs) in &figures {
        let want = if w == "random" {
            0.0
        } else {
            // Per group, 3 of 4 requests find the 64-token prefix: 2 x 3 x 64 of 8 x 80.
            0.6
        };
        assert_eq!(hs, &vec![want, want], "{w} on {cfg}");
    }
    ctl.shutdown().await;
}

/// A build that answers a fifth of its requests at once with HTTP 500 keeps its throughput;
/// the stored levels carry the failures as an error rate near 0.2 at every load level, by kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifth_of_requests_failing_is_stored_as_each_levels_error_rate() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&agent]).await;
    let mut c = client(ctl.addr).await;
    let spec = r#"name = "faults"
[[configs]]
name = "flaky"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 1, "--itl-ms" = 1, "--fail-rate" = 0.2 }

[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 4

[load]
concurrency = [1, 4, 16]
requests = 200
"#;
    let r = run(&mut c, spec).await;
    assert_eq!(r.levels.len(), 3);
    for l in &r.levels {
        let res = l.result.as_ref().unwrap();
        println!(
            "c={:?}: error rate {:.3} ({} of {})",
            res.level.and_then(|lv| lv.concurrency),
            res.error_rate,
            res.failed,
            res.sent
        );
        assert_eq!(res.sent, 200, "{res:?}");
        assert_eq!(res.completed + res.failed, res.sent);
        // Binomial(200, 0.2): 14 to 66 failures (0.07..=0.33) holds but for a chance of 5e-6
        // per level; the 22 to 58 of before failed one run in 300.
        assert!((0.07..=0.33).contains(&res.error_rate), "{res:?}");
        assert_eq!(res.failures_by_kind.get("http_500"), Some(&res.failed));
        let left = res.left_out.unwrap();
        assert_eq!(
            left.failed, res.failed,
            "latency figures leave the failures out"
        );
        assert_eq!(res.ttft_ms.as_ref().unwrap().count, res.completed);
    }
    ctl.shutdown().await;
}

/// `order = "blocked"` on a two-host fleet on loopback: each (repeat, workload) block runs all
/// its configs on one host, in the order recorded from the seed (reproducible with
/// `order_seed`), the two blocks in parallel on the two hosts; the seed is in the job's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_order_keeps_each_repeat_block_on_one_host_in_the_recorded_order() {
    use fleetbench_proto::controllerpb::{WatchJobRequest, job_event};
    let dir = tempfile::tempdir().unwrap();
    let a1 = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let a2 = spawn_agent(dir.path(), "h2", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&a1, &a2]).await;
    let mut c = client(ctl.addr).await;
    let spec = r#"name = "blocked"
repeats = 2
order = "blocked"
order_seed = 7

[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 2, "--itl-ms" = 2 }

[[configs]]
name = "B"
extends = "A"
flags = { "--itl-ms" = 3 }

[[configs]]
name = "C"
extends = "A"
flags = { "--itl-ms" = 4 }

[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 8

[load]
concurrency = [2]
requests = 8
"#;
    let r = run(&mut c, spec).await;
    assert_eq!(r.runs.len(), 6, "3 configs x 2 repeats");
    // The recorded order: the trials' positions, as the seed shuffled each block.
    let parsed = fleetbench_spec::parse("job.toml", spec).unwrap();
    let want: Vec<(u32, String)> = parsed
        .expand_trials_seeded(7)
        .iter()
        .map(|t| (t.repeat, parsed.configs[t.config].name.clone()))
        .collect();
    let mut runs = r.runs.clone();
    runs.sort_by(|a, b| a.trial_id.cmp(&b.trial_id));
    let got: Vec<(u32, String)> = runs
        .iter()
        .map(|r| (r.repeat, r.config_name.clone()))
        .collect();
    assert_eq!(got, want, "trials in the order the seed gave");
    let orders: Vec<Vec<&str>> = (0..2)
        .map(|rep| {
            want.iter()
                .filter(|(r, _)| *r == rep)
                .map(|(_, c)| c.as_str())
                .collect()
        })
        .collect();
    println!("block orders: {orders:?}");
    let mut hosts = BTreeMap::new();
    for rep in 0..2u32 {
        let block: Vec<_> = runs.iter().filter(|r| r.repeat == rep).collect();
        let on: std::collections::BTreeSet<&str> = block.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(on.len(), 1, "repeat {rep} ran on {on:?}");
        hosts.insert(rep, on.into_iter().next().unwrap().to_string());
        // One after another, in the recorded order.
        for pair in block.windows(2) {
            assert!(
                pair[1].started_unix_ms >= pair[0].finished_unix_ms,
                "repeat {rep}: {} started before {} ended",
                pair[1].config_name,
                pair[0].config_name
            );
        }
    }
    println!("block hosts: {hosts:?}");
    assert_ne!(
        hosts[&0], hosts[&1],
        "the two blocks ran in parallel on both hosts"
    );

    let mut s = c
        .watch_job(WatchJobRequest {
            job_id: r.jobs[0].id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut seeded = false;
    while let Some(ev) = s.message().await.unwrap() {
        if let Some(job_event::Event::Message(m)) = ev.event {
            seeded |= m.contains("seed 7 (order_seed = 7 reproduces it)");
        }
    }
    assert!(seeded, "the job's events record the seed");
    ctl.shutdown().await;
}
