//! Engines spanning hosts, for real: two agents on loopback, each running one rank of the
//! simulated engine (`--nnodes 2 --node-rank R --dist-init-addr ...`, chosen by the in-process
//! controller), rank 0 waiting for rank 1 before it is ready.
//!
//! - both ranks start and a job's levels are measured through rank 0; nothing runs after it;
//! - a rank 1 that cannot start (its host's profile makes the simulator fail at start) leaves
//!   neither rank running, and the trial names rank 1 and its host;
//! - rank 1's process SIGKILLed mid-level ends the gang: the level is stored as crashed naming
//!   rank 1 and its host (`rank_lost`), rank 0's process is gone, the rest runs on a new gang;
//!   the same when rank 0 hangs after losing its peer instead of exiting.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::spawned::{alive, follow, nothing_running};
use common::*;
use fleetbench_proto::agentpb::{CrashClass, LevelOutcome};
use fleetbench_proto::controllerpb::{GetResultsRequest, JobState, TrialState};

/// An agent whose sim profile reserves a rendezvous port (rank 0 may run here) when
/// `rendezvous`, and adds `extra_args` to the simulator's fixed arguments.
fn gang_agent(dir: &Path, name: &str, rendezvous: bool, extra_args: &[&str]) -> Proc {
    let port = fleetbench_testkit::free_port();
    let mut profile = format!(
        "[profiles.sim]\nkind = \"sim\"\nport = {port}\n{}\n",
        fleetbench_testkit::process::SIM_MODELS
    );
    if rendezvous {
        profile.push_str(&format!(
            "rendezvous_port = {}\n",
            fleetbench_testkit::free_port()
        ));
    }
    if !extra_args.is_empty() {
        let mut args = vec!["--host", "{host}", "--port", "{port}", "--model", "{model}"];
        args.extend(extra_args);
        let list: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
        profile.push_str(&format!("args = [{}]\n", list.join(", ")));
    }
    let toml = format!(
        "name = \"{name}\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"{}\"\n{profile}",
        dir.join(name).display()
    );
    spawn_agent_toml(dir, name, &toml)
}

/// A one-config job of `nodes = 2` over these load levels.
fn spec(levels: &str, requests: u32) -> String {
    spec_with(levels, requests, "")
}

/// As [`spec`], with more simulator flags (`, "--x" = 1`).
fn spec_with(levels: &str, requests: u32, more_flags: &str) -> String {
    format!(
        r#"name = "gang"

[[configs]]
name = "two-nodes"
engine = "sim"
model = "sim-model"
nodes = 2
flags = {{ "--ttft-ms" = 20, "--itl-ms" = 10{more_flags} }}

[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [{levels}]
requests = {requests}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ranks_start_and_levels_run_through_rank_0() {
    let dir = tempfile::tempdir().unwrap();
    let g1 = gang_agent(dir.path(), "g1", true, &[]);
    let g2 = gang_agent(dir.path(), "g2", false, &[]);
    let ctl = start_local(local_config(dir.path(), &[&g1, &g2])).await;
    let mut client = client(ctl.addr).await;
    let began = Instant::now();
    let id = submit_trials(&mut client, spec("1, 2", 8), "gang.toml", 1).await;
    let pids = follow(&mut client, &id, |_| {}).await;
    let job = wait_job(&mut client, &id, Duration::from_secs(60)).await;
    eprintln!("gang job: {:.1} s", began.elapsed().as_secs_f64());
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    // One run, on rank 0's host, whose facts name rank 1; both levels measured there.
    let runs = ctl.store.runs(&id).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let run = &runs[0];
    assert_eq!(run.host, "g1");
    let fact = |k: &str| {
        run.facts
            .iter()
            .find(|f| f.key == k)
            .map(|f| f.value.clone())
            .unwrap_or_default()
    };
    assert_eq!(fact("gang.nodes"), "2");
    assert_eq!(fact("gang.rank1.host"), "g2");
    let rank0_argv = run.argv.join(" ");
    assert!(
        rank0_argv.contains("--nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:"),
        "{rank0_argv}"
    );
    let rank1_argv = fact("gang.rank1.argv");
    assert!(
        rank1_argv.contains("--nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:"),
        "{rank1_argv}"
    );
    let levels = ctl.store.levels(&id).await.unwrap();
    assert_eq!(levels.len(), 2);
    for l in &levels {
        let r = l.result.as_ref().unwrap();
        assert_eq!(r.outcome, LevelOutcome::Ok as i32, "{r:?}");
        assert_eq!(l.host, "g1");
        assert!(r.completed >= 8, "{r:?}");
    }
    // Telemetry came from both ranks' hosts, each under its own run id.
    let res = client
        .get_results(GetResultsRequest {
            job_ids: vec![id.clone()],
            include_telemetry: true,
        })
        .await
        .unwrap()
        .into_inner();
    let sources: std::collections::BTreeSet<(&str, &str)> = res
        .telemetry
        .iter()
        .map(|p| (p.host.as_str(), p.run_id.as_str()))
        .collect();
    let rank1_run = format!("{}-r1", run.run_id);
    assert!(
        sources.contains(&("g1", run.run_id.as_str()))
            && sources.contains(&("g2", rank1_run.as_str())),
        "{sources:?}"
    );
    // Both ranks ran (one process each), and neither runs now.
    assert_eq!(pids.get("g1").map(Vec::len), Some(1), "{pids:?}");
    assert_eq!(pids.get("g2").map(Vec::len), Some(1), "{pids:?}");
    nothing_running(&pids, &[&g1, &g2]).await;
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_cannot_start_leaves_no_rank_running() {
    let dir = tempfile::tempdir().unwrap();
    let g1 = gang_agent(dir.path(), "g1", true, &[]);
    // Rank 1's host starts the simulator so that it dies at start (a CUDA OOM traceback).
    let g2 = gang_agent(dir.path(), "g2", false, &["--fault", "oom-at-start"]);
    let ctl = start_local(local_config(dir.path(), &[&g1, &g2])).await;
    let mut client = client(ctl.addr).await;
    let id = submit_trials(&mut client, spec("1", 4), "gang.toml", 1).await;
    let pids = follow(&mut client, &id, |_| {}).await;
    let job = wait_job(&mut client, &id, Duration::from_secs(60)).await;
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    let trials = ctl.store.trials(&id).await.unwrap();
    assert_eq!(trials[0].state, TrialState::EngineFailed, "{trials:?}");
    let reason = &trials[0].reason;
    assert!(
        reason.contains("rank 1 on host g2 could not start") && reason.contains("oom"),
        "{reason}"
    );
    assert!(ctl.store.levels(&id).await.unwrap().is_empty());
    // Rank 1 ran and died; rank 0 (started at the same time, waiting for its peer, whether or
    // not its spawn was reported before the gang stopped) was stopped with the gang.
    assert!(pids.contains_key("g2"), "{pids:?}");
    nothing_running(&pids, &[&g1, &g2]).await;
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_killed_mid_level_ends_the_gang_and_marks_the_level() {
    // Rank 0 exits with NCCL's remote error as soon as its peer's connection drops.
    let summary = kill_rank_1_in_level_0("").await;
    assert!(summary.contains("; rank 0: rank_lost: "), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_0_that_hangs_after_its_peer_is_lost_is_stopped() {
    // Rank 0 stops answering instead (as in a collective waiting for NCCL's time-out): the
    // controller (or rank 0's agent, when its health probe fails first) ends it.
    let summary = kill_rank_1_in_level_0(r#", "--fault" = "hang-on-peer-loss""#).await;
    assert!(!summary.contains("; rank 0: rank_lost: "), "{summary}");
    assert!(
        summary.contains("rank 0 was stopped after 10 s") || summary.contains("unhealthy"),
        "{summary}"
    );
}

/// Runs a two-level gang job and SIGKILLs rank 1's simulator at level 0's first progress;
/// checks what every variant shares and returns level 0's crash summary.
async fn kill_rank_1_in_level_0(more_flags: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let g1 = gang_agent(dir.path(), "g1", true, &[]);
    let g2 = gang_agent(dir.path(), "g2", false, &[]);
    let ctl = start_local(local_config(dir.path(), &[&g1, &g2])).await;
    let mut client = client(ctl.addr).await;
    let began = Instant::now();
    // Level 0: 20 requests of ~180 ms one at a time (~3.6 s); level 1 half that.
    let id = submit_trials(
        &mut client,
        spec_with("1, 2", 20, more_flags),
        "gang.toml",
        1,
    )
    .await;
    let mut killed: Option<(u32, u32)> = None;
    let pids = follow(&mut client, &id, |pids| {
        if killed.is_some() {
            return;
        }
        let (Some(r0), Some(r1)) = (pids.get("g1"), pids.get("g2")) else {
            return;
        };
        // SAFETY: SIGKILL to rank 1's simulator, a process this test's agent spawned.
        assert_eq!(unsafe { libc::kill(r1[0] as i32, libc::SIGKILL) }, 0);
        killed = Some((r0[0], r1[0]));
    })
    .await;
    let (rank0_pid, rank1_pid) = killed.expect("a level ran: rank 1 was killed");
    let job = wait_job(&mut client, &id, Duration::from_secs(60)).await;
    eprintln!(
        "gang job with a killed rank ({more_flags:?}): {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    // Level 0 is stored as crashed, naming rank 1 and its host; level 1 ran on a new gang.
    let levels = ctl.store.levels(&id).await.unwrap();
    let by_index: BTreeMap<u32, _> = levels
        .iter()
        .map(|l| {
            (
                l.result.as_ref().unwrap().level_index,
                l.result.clone().unwrap(),
            )
        })
        .collect();
    let l0 = &by_index[&0];
    assert_eq!(l0.outcome, LevelOutcome::Crashed as i32, "{l0:?}");
    let crash = l0.crash.as_ref().unwrap();
    assert_eq!(crash.class, CrashClass::RankLost as i32, "{crash:?}");
    assert!(
        crash
            .summary
            .starts_with("rank 1 on host g2 ended mid-level"),
        "{}",
        crash.summary
    );
    assert_eq!(by_index[&1].outcome, LevelOutcome::Ok as i32);
    // The killed gang's processes are gone, and a second gang (one more process per host)
    // ran the rest; nothing runs now.
    assert!(!alive(rank0_pid) && !alive(rank1_pid));
    assert_eq!(pids.get("g1").map(Vec::len), Some(2), "{pids:?}");
    assert_eq!(pids.get("g2").map(Vec::len), Some(2), "{pids:?}");
    nothing_running(&pids, &[&g1, &g2]).await;
    ctl.shutdown().await;
    eprintln!("level 0 crash: {}", crash.summary);
    crash.summary.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_gang_is_placed_without_a_host_that_can_be_rank_0() {
    // Two ready hosts, neither reserving a rendezvous port: the gang never holds one of them
    // while it waits, and the job ends saying what it needs.
    let dir = tempfile::tempdir().unwrap();
    let g1 = gang_agent(dir.path(), "g1", false, &[]);
    let g2 = gang_agent(dir.path(), "g2", false, &[]);
    let mut cfg = local_config(dir.path(), &[&g1, &g2]);
    cfg.host_wait = Duration::from_secs(2);
    let ctl = start_local(cfg).await;
    let mut client = client(ctl.addr).await;
    let id = submit_trials(&mut client, spec("1", 4), "gang.toml", 1).await;
    let job = wait_job(&mut client, &id, Duration::from_secs(30)).await;
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    assert!(
        job.error.contains("g1 (ready, matches)")
            && job.error.contains("config \"two-nodes\" spans 2 hosts")
            && job.error.contains("rendezvous_port in profile \"sim\""),
        "{}",
        job.error
    );
    assert!(ctl.store.runs(&id).await.unwrap().is_empty());
    ctl.shutdown().await;
}
