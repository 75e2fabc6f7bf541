//! The controller process killed (SIGKILL) mid-job and started again on the same store: the job
//! completes, levels stored before the kill are kept (not re-run), the running trial is re-run
//! as a new attempt, and every level is stored exactly once.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use fleetbench_controller::store::Store;
use fleetbench_proto::controllerpb::{GetResultsRequest, JobState, RunState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_finishes_the_job_with_every_level_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let agents = spawn_agents(dir.path(), &["r1", "r2"]);
    // A fixed port: the restarted controller serves where clients already point.
    let listen = format!("127.0.0.1:{}", fleetbench_testkit::free_port());
    let cfg = controller_config(dir.path(), &listen, &agents.iter().collect::<Vec<_>>());
    let mut ctl = spawn_controller(&cfg, &dir.path().join("controller-1.log"));
    let mut c = client(ctl.addr).await;

    // 2 configs x 2 repeats = 4 trials of 4 levels on 2 hosts.
    let job_id = submit(
        &mut c,
        sim_spec("restart", 2, &["r1", "r2"]),
        "restart.toml",
    )
    .await;
    let mut events = watch(&mut c, &job_id).await;
    // Kill once three levels are stored (trials are mid-way: none has all four yet).
    let before = stored_levels(&mut events, 3).await;
    drop(events);
    ctl.kill();
    let interrupted: BTreeSet<String> = before.keys().map(|(t, _)| t.clone()).collect();

    let ctl2 = spawn_controller(&cfg, &dir.path().join("controller-2.log"));
    assert_eq!(ctl2.addr, ctl.addr);
    let mut c = client(ctl2.addr).await;
    let job = wait_job(&mut c, &job_id, Duration::from_secs(300)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total), (16, 16));
    assert_eq!((job.trials_done, job.trials_total), (4, 4));

    let results = c
        .get_results(GetResultsRequest {
            job_ids: vec![job_id.clone()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    // Exactly once per (trial, level).
    let mut seen = BTreeSet::new();
    for l in &results.levels {
        let idx = l.result.as_ref().unwrap().level_index;
        assert!(
            seen.insert((l.trial_id.clone(), idx)),
            "stored twice: {} {idx}",
            l.trial_id
        );
    }
    assert_eq!(seen.len(), 16);
    // Levels stored before the kill are the very same results (not measured again).
    for ((trial, idx), run_id) in &before {
        let l = results
            .levels
            .iter()
            .find(|l| &l.trial_id == trial && l.result.as_ref().unwrap().level_index == *idx)
            .unwrap();
        assert_eq!(&l.run_id, run_id, "level {idx} of {trial} was re-run");
    }
    // Each interrupted trial: its first run was cut off, a later attempt finished it.
    for trial in &interrupted {
        let runs: Vec<_> = results
            .runs
            .iter()
            .filter(|r| &r.trial_id == trial)
            .collect();
        assert!(runs.len() >= 2, "{trial}: {runs:#?}");
        assert_eq!(
            runs[0].state,
            RunState::HostLost as i32,
            "{trial}: {runs:#?}"
        );
        assert_eq!(runs.last().unwrap().state, RunState::Done as i32);
        assert!(runs.last().unwrap().attempt > runs[0].attempt);
    }

    // The same, straight from the store file.
    drop(ctl2);
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    assert_eq!(store.levels(&job_id).await.unwrap().len(), 16);
    drop(agents);
}
