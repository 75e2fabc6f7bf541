//! Job behaviour against a real agent process and the sim engine, with the controller
//! in-process: crashes as results with an engine restart, cancel, engine start failures,
//! watch replay, validation, authentication, hosts that do not match.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_controller::{ControllerConfig, ControllerHandle};
use fleetbench_proto::agentpb::{
    CrashClass, EngineState, GetEngineRequest, LevelOutcome, agent_client::AgentClient,
    engine_event,
};
use fleetbench_proto::controllerpb::{
    CancelJobRequest, GetResultsRequest, GetResultsResponse, JobState, ListJobsRequest, RunState,
    SubmitJobRequest, TrialState, WatchJobRequest, controller_client::ControllerClient, job_event,
};

async fn controller(
    dir: &std::path::Path,
    agents: &[&Proc],
    edit: impl FnOnce(&mut ControllerConfig),
) -> ControllerHandle {
    let mut cfg = local_config(dir, agents);
    edit(&mut cfg);
    start_local(cfg).await
}

fn spec(name: &str, config_flags: &str, levels: &str, requests: u32) -> String {
    format!(
        r#"name = "{name}"
[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = {{ "--ttft-ms" = 5, "--itl-ms" = 5{config_flags} }}

[[workloads]]
name = "w"
dataset = "random"
input_len = 8
output_len = 8

[load]
concurrency = [{levels}]
requests = {requests}
"#
    )
}

/// Everything stored for job `id`, with its telemetry when asked.
async fn results(
    c: &mut ControllerClient<tonic::transport::Channel>,
    id: &str,
    include_telemetry: bool,
) -> GetResultsResponse {
    c.get_results(GetResultsRequest {
        job_ids: vec![id.to_string()],
        include_telemetry,
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_a_result_and_the_engine_restarts_for_the_next_level() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&agent], |_| {}).await;
    let mut c = client(ctl.addr).await;
    // Level 1 (8 in flight) is above the crash threshold; level 2 must still be measured.
    let id = submit_toml(
        &mut c,
        &spec("crash", r#", "--crash-above-batch" = 4"#, "1, 8, 2", 16),
    )
    .await;
    let job = wait_job(&mut c, &id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total, job.crashes), (3, 3, 1));

    let r = results(&mut c, &id, true).await;
    let outcomes: Vec<i32> = r
        .levels
        .iter()
        .map(|l| l.result.as_ref().unwrap().outcome)
        .collect();
    assert_eq!(
        outcomes,
        [LevelOutcome::Ok, LevelOutcome::Crashed, LevelOutcome::Ok].map(|o| o as i32)
    );
    let crash = r.levels[1].result.as_ref().unwrap().crash.clone().unwrap();
    assert_ne!(crash.class(), CrashClass::Unspecified, "{crash:?}");
    assert!(r.levels[2].result.as_ref().unwrap().completed > 0);
    assert_eq!(r.runs.len(), 1);
    assert_eq!(r.runs[0].state, RunState::Done as i32);
    assert!(r.runs[0].crash.is_some(), "the run keeps its crash");
    assert!(
        !r.runs[0].argv.is_empty(),
        "the run keeps the engine's argv"
    );
    // The engine's metrics were relayed during the trial and kept (downsampled) for reports.
    assert!(
        r.telemetry
            .iter()
            .any(|p| p.series == "engine.running_requests" && p.run_id == r.runs[0].run_id),
        "{:?}",
        r.telemetry.iter().map(|p| &p.series).collect::<Vec<_>>()
    );

    // Watching a finished job replays it: two engine starts (before and after the crash),
    // three levels, and the final state last.
    let mut s = c
        .watch_job(WatchJobRequest { job_id: id.clone() })
        .await
        .unwrap()
        .into_inner();
    let (mut ready, mut levels, mut last_state) = (0, 0, 0);
    while let Some(ev) = s.message().await.unwrap() {
        match ev.event {
            Some(job_event::Event::Engine(e)) => {
                if matches!(
                    e.event.and_then(|e| e.event),
                    Some(engine_event::Event::Ready(_))
                ) {
                    ready += 1;
                }
            }
            Some(job_event::Event::Level(_)) => levels += 1,
            Some(job_event::Event::Job(j)) => last_state = j.state,
            _ => {}
        }
    }
    assert_eq!((ready, levels), (2, 3));
    assert_eq!(last_state, JobState::Succeeded as i32);
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_job_and_leaves_the_engine_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&agent], |_| {}).await;
    let mut c = client(ctl.addr).await;
    let text = spec("long", "", "1, 2, 3, 4, 5, 6", 60).replace("repeats", "x");
    let text = format!("repeats = 3\n{text}");
    let id = submit_toml(&mut c, &text).await;
    let mut s = c
        .watch_job(WatchJobRequest { job_id: id.clone() })
        .await
        .unwrap()
        .into_inner();
    // Cancel in the middle of the first trial's levels.
    loop {
        let ev = s.message().await.unwrap().expect("job running");
        if matches!(ev.event, Some(job_event::Event::Level(_))) {
            break;
        }
    }
    let job = c
        .cancel_job(CancelJobRequest { job_id: id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(job.state, JobState::Cancelled as i32, "{job:?}");
    assert!(job.levels_done < job.levels_total);
    let mut agent_client = AgentClient::connect(format!("http://{}", agent.addr))
        .await
        .unwrap();
    let engine = agent_client
        .get_engine(GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(engine.state(), EngineState::Idle, "{engine:?}");
    // Nothing runs after the cancel.
    let done = job.levels_done;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = results(&mut c, &id, false).await;
    assert_eq!(r.levels.len() as u32, done);
    assert_eq!(r.runs.last().unwrap().state, RunState::Cancelled as i32);
    let trials = ctl.store.trials(&id).await.unwrap();
    assert!(
        trials
            .iter()
            .all(|t| t.state == TrialState::Cancelled || t.state == TrialState::Done)
    );
    assert!(trials.iter().any(|t| t.state == TrialState::Cancelled));
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_cannot_start_is_a_classified_result() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&agent], |_| {}).await;
    let mut c = client(ctl.addr).await;
    let oom = "\n[[configs]]\nname = \"B\"\nextends = \"A\"\n\
               flags = { \"--fault\" = \"oom-at-start\" }\n";
    let id = submit_toml(&mut c, &format!("{}{oom}", spec("oom", "", "1, 2", 4))).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.trials_done, job.levels_done, job.crashes), (2, 2, 1));
    let r = results(&mut c, &id, false).await;
    let b_runs: Vec<_> = r.runs.iter().filter(|r| r.config_name == "B").collect();
    assert_eq!(
        b_runs.len(),
        1,
        "an engine failure is not retried: {b_runs:#?}"
    );
    assert_eq!(b_runs[0].state, RunState::EngineFailed as i32);
    assert_eq!(b_runs[0].crash.as_ref().unwrap().class(), CrashClass::Oom);
    let trials = ctl.store.trials(&id).await.unwrap();
    // Trials are in the job's (shuffled, blocked) order: find B's by name.
    let b = trials.iter().find(|t| t.config_name == "B").unwrap();
    assert_eq!(b.state, TrialState::EngineFailed);
    assert!(r.levels.iter().all(|l| l.config_name == "A"));

    // When no engine started at all, nothing was measured: the job fails and says why.
    let only_oom = spec("oom-only", r#", "--fault" = "oom-at-start""#, "1", 2);
    let id = submit_toml(&mut c, &only_oom).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    assert!(job.error.contains("nothing was measured"), "{}", job.error);
    ctl.shutdown().await;
}

#[tokio::test]
async fn an_invalid_spec_is_refused_with_every_problem_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = controller(dir.path(), &[], |_| {}).await;
    let mut c = client(ctl.addr).await;
    let bad =
        spec("bad", r#", "--seed" = "lots""#, "1, 0", 4).replace("input_len = 8", "input_len = -1");
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: bad,
            file_name: "bad.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.job_id.is_empty());
    assert!(r.errors.len() >= 2, "{:?}", r.errors);
    assert!(
        r.errors.iter().all(|e| e.file == "bad.toml" && e.line > 0),
        "{:?}",
        r.errors
    );
    assert!(
        r.errors.iter().any(|e| e.field.contains("--seed")),
        "{:?}",
        r.errors
    );
    let jobs = c
        .list_jobs(ListJobsRequest {
            limit: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(jobs.jobs.is_empty());
    ctl.shutdown().await;
}

#[tokio::test]
async fn the_api_requires_the_configured_token() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = controller(dir.path(), &[], |c| c.api_token = Some("s3cret".into())).await;
    let mut c = client(ctl.addr).await;
    let err = c
        .list_jobs(ListJobsRequest {
            limit: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", ctl.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut wrong =
        ControllerClient::with_interceptor(channel.clone(), |mut r: tonic::Request<()>| {
            r.metadata_mut()
                .insert("authorization", "Bearer nope".parse().unwrap());
            Ok(r)
        });
    assert_eq!(
        wrong
            .list_jobs(ListJobsRequest {
                limit: 0,
                ..Default::default()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::Unauthenticated
    );
    let mut right = ControllerClient::with_interceptor(channel, |mut r: tonic::Request<()>| {
        r.metadata_mut()
            .insert("authorization", "Bearer s3cret".parse().unwrap());
        Ok(r)
    });
    assert!(
        right
            .list_jobs(ListJobsRequest {
                limit: 0,
                ..Default::default()
            })
            .await
            .is_ok()
    );
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_no_host_matches_fails_and_names_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&agent], |c| {
        c.host_wait = Duration::from_secs(2)
    })
    .await;
    let mut c = client(ctl.addr).await;
    let text = format!(
        "{}\n[hosts]\nnames = [\"gpu-9\"]\n",
        spec("nohost", "", "1", 2)
    );
    let id = submit_toml(&mut c, &text).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(60)).await;
    assert_eq!(job.state, JobState::Failed as i32);
    assert!(job.error.contains("no ready host matched"), "{}", job.error);
    assert!(
        job.error.contains("h1 (ready, does not match)"),
        "{}",
        job.error
    );
    ctl.shutdown().await;
}

#[test]
fn a_bad_config_exits_non_zero_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let port = fleetbench_testkit::free_port();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("listen = \"0.0.0.0:{port}\"\nheartbeat_interval = \"often\"\n"),
    )
    .unwrap();
    let out =
        std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-controller"))
            .args(["--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listen: 0.0.0.0:"), "{err}");
    assert!(err.contains("heartbeat_interval: \"often\""), "{err}");
    // Nothing was bound.
    std::net::TcpListener::bind(("0.0.0.0", port)).expect("port still free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_on_a_postgres_store() {
    let db = TestDatabase::create("jobs").await;
    let url = db.url.clone();

    let dir = tempfile::tempdir().unwrap();
    let a1 = spawn_agent(dir.path(), "p1", fleetbench_testkit::free_port());
    let a2 = spawn_agent(dir.path(), "p2", fleetbench_testkit::free_port());
    let ctl = controller(dir.path(), &[&a1, &a2], |c| c.store_url = url.clone()).await;
    let mut c = client(ctl.addr).await;
    let text = format!(
        "repeats = 2\n{}\n[[configs]]\nname = \"B\"\nextends = \"A\"\nflags = {{ \"--itl-ms\" = 7 }}\n",
        spec("pg", "", "1, 2, 4", 6)
    );
    let id = submit_toml(&mut c, &text).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.trials_done, job.levels_done), (4, 12));
    let r = results(&mut c, &id, false).await;
    assert_eq!(r.levels.len(), 12);
    assert_eq!(r.configs.len(), 2);
    let hosts: std::collections::BTreeSet<_> = r.runs.iter().map(|r| r.host.as_str()).collect();
    assert_eq!(hosts.len(), 2, "both hosts ran trials: {hosts:?}");
    ctl.shutdown().await;
    db.remove().await;
}
