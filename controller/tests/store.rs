//! The store suite, run against SQLite (a temp file) and a real PostgreSQL
//! (`FLEETBENCH_TEST_POSTGRES_URL`, set by scripts/test.sh; required, never skipped).

mod common;

use fleetbench_controller::store::{NewJob, RegisteredAgent, Store, StoreError, TrialRow};
use fleetbench_proto::agentpb::{self, LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::{
    ConfigInfo, JobEvent, JobKind, JobState, Run, RunState, StoredLevel, TelemetryPoint,
    TrialState, job_event,
};

fn new_job(id: &str, created: i64) -> NewJob {
    NewJob {
        id: id.into(),
        name: format!("job {id}"),
        kind: JobKind::Sweep,
        spec_toml: "name = \"x\"\n".into(),
        file_name: "x.toml".into(),
        tag: String::new(),
        created_unix_ms: created,
    }
}

fn trial(job: &str, pos: u32, levels: u32) -> TrialRow {
    TrialRow {
        id: format!("{job}-t{pos:03}"),
        job_id: job.into(),
        position: pos,
        config_index: pos % 2,
        workload_index: 0,
        repeat: pos / 2,
        config_id: format!("cfg{}", pos % 2),
        config_name: ["A", "B"][(pos % 2) as usize].into(),
        workload: "w".into(),
        level_count: levels,
        state: TrialState::Pending,
        attempts: 0,
        reason: String::new(),
    }
}

fn config(job: &str, name: &str) -> ConfigInfo {
    ConfigInfo {
        config_id: format!("id-{name}"),
        name: name.into(),
        spec: Some(agentpb::EngineSpec {
            profile: "sim".into(),
            model: "m".into(),
            ..Default::default()
        }),
        kind: agentpb::EngineKind::Sim as i32,
        job_id: job.into(),
    }
}

fn level(t: &TrialRow, run_id: &str, index: u32, outcome: LevelOutcome, tps: f64) -> StoredLevel {
    StoredLevel {
        job_id: t.job_id.clone(),
        run_id: run_id.into(),
        trial_id: t.id.clone(),
        host: "h1".into(),
        config_id: t.config_id.clone(),
        config_name: t.config_name.clone(),
        workload: t.workload.clone(),
        repeat: t.repeat,
        attempt: 1,
        result: Some(LevelResult {
            level_index: index,
            outcome: outcome as i32,
            output_tokens_per_s: tps,
            ..Default::default()
        }),
        gpu_power_w: None,
        lease_epoch: 0,
    }
}

async fn suite(url: &str) {
    let store = Store::open(url).await.expect("open store");
    let job = "job1";
    let trials: Vec<TrialRow> = (0..4).map(|i| trial(job, i, 3)).collect();
    store
        .insert_job(
            &new_job(job, 1000),
            &[config(job, "A"), config(job, "B")],
            &trials,
        )
        .await
        .unwrap();

    // A failed insert stores nothing (duplicate trial id inside one job).
    let dup = vec![trial("job2", 0, 3), trial("job2", 0, 3)];
    assert!(
        store
            .insert_job(&new_job("job2", 2000), &[], &dup)
            .await
            .is_err()
    );
    assert!(store.get_job("job2").await.unwrap().is_none());
    assert!(store.trials("job2").await.unwrap().is_empty());

    let j = store.get_job(job).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued as i32);
    assert_eq!(
        (j.trials_total, j.trials_done, j.levels_total, j.levels_done),
        (4, 0, 12, 0)
    );
    assert_eq!(
        store.unfinished_jobs().await.unwrap(),
        vec![job.to_string()]
    );
    assert_eq!(store.trials(job).await.unwrap(), trials);
    let cfgs = store.configs(job).await.unwrap();
    assert_eq!(
        cfgs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["A", "B"]
    );
    assert_eq!(cfgs[0].spec.as_ref().unwrap().profile, "sim");

    // Attempts count up per trial.
    assert_eq!(store.next_attempt(&trials[0].id).await.unwrap(), 1);
    assert_eq!(store.next_attempt(&trials[0].id).await.unwrap(), 2);
    assert_eq!(store.next_attempt(&trials[1].id).await.unwrap(), 1);

    // Runs are upserted as they progress.
    let mut run = Run {
        run_id: format!("{}-a1", trials[0].id),
        job_id: job.into(),
        trial_id: trials[0].id.clone(),
        host: "h1".into(),
        attempt: 1,
        state: RunState::Running as i32,
        ..Default::default()
    };
    store.put_run(&run).await.unwrap();
    run.argv = vec!["sim".into(), "--port".into(), "1".into()];
    run.state = RunState::HostLost as i32;
    store.put_run(&run).await.unwrap();
    let runs = store.runs(job).await.unwrap();
    assert_eq!(runs, vec![run.clone()]);
    assert_eq!(store.get_run(&run.run_id).await.unwrap(), Some(run.clone()));
    assert_eq!(store.get_run("nope").await.unwrap(), None);

    // Levels: idempotent per (job, trial, level index), whichever attempt reports them.
    let l0 = level(&trials[0], &run.run_id, 0, LevelOutcome::Ok, 100.0);
    assert!(store.put_level(&l0).await.unwrap());
    assert!(
        !store.put_level(&l0).await.unwrap(),
        "a replayed level must not be stored again"
    );
    let mut retry = level(&trials[0], "other-run", 0, LevelOutcome::Ok, 999.0);
    retry.attempt = 2;
    assert!(
        !store.put_level(&retry).await.unwrap(),
        "a retried level must not overwrite"
    );
    assert!(
        store
            .put_level(&level(
                &trials[0],
                "other-run",
                2,
                LevelOutcome::Crashed,
                0.0
            ))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_level(&level(&trials[1], "r", 0, LevelOutcome::Ok, 50.0))
            .await
            .unwrap()
    );
    assert_eq!(
        store.stored_level_indices(&trials[0].id).await.unwrap(),
        vec![0, 2]
    );
    assert_eq!(
        store.level_outcome(&trials[0].id, 2).await.unwrap(),
        Some(LevelOutcome::Crashed)
    );
    let levels = store.levels(job).await.unwrap();
    assert_eq!(levels.len(), 3);
    assert_eq!(levels[0], l0, "the first report is the one kept");

    // Trial states and job counts.
    store
        .set_trial_state(&trials[0].id, TrialState::Done, "")
        .await
        .unwrap();
    store
        .set_trial_state(&trials[1].id, TrialState::EngineFailed, "oom")
        .await
        .unwrap();
    store
        .set_trial_state(&trials[2].id, TrialState::HostLost, "gone")
        .await
        .unwrap();
    let mut failed_run = run.clone();
    failed_run.run_id = "failed".into();
    failed_run.trial_id = trials[1].id.clone();
    failed_run.state = RunState::EngineFailed as i32;
    store.put_run(&failed_run).await.unwrap();
    store.mark_job_running(job, 5000).await.unwrap();
    store.mark_job_running(job, 6000).await.unwrap();
    let j = store.get_job(job).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Running as i32);
    assert_eq!(j.started_unix_ms, 5000, "the first start time is kept");
    assert_eq!((j.trials_done, j.levels_done, j.crashes), (2, 3, 2));
    let t = store.trials(job).await.unwrap();
    assert_eq!(t[1].reason, "oom");
    assert!(t[0].is_finished() && t[1].is_finished() && !t[2].is_finished());

    // Telemetry points round-trip, GPU index optional.
    let points = vec![
        TelemetryPoint {
            unix_ms: 10,
            host: "h1".into(),
            series: "hw.power".into(),
            gpu: Some(3),
            value: 412.5,
            run_id: run.run_id.clone(),
        },
        TelemetryPoint {
            unix_ms: 11,
            host: "h1".into(),
            series: "engine.running_requests".into(),
            gpu: None,
            value: 7.0,
            run_id: run.run_id.clone(),
        },
    ];
    store.put_telemetry(job, &points).await.unwrap();
    assert_eq!(store.telemetry(job).await.unwrap(), points);

    // Events keep their order and get increasing sequence numbers.
    let mut seqs = Vec::new();
    for i in 0..3 {
        let ev = JobEvent {
            unix_ms: i,
            job_id: job.into(),
            event: Some(job_event::Event::Message(format!("m{i}"))),
        };
        seqs.push(store.append_event(job, &ev).await.unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let evs = store.events(job).await.unwrap();
    assert_eq!(evs.iter().map(|(s, _)| *s).collect::<Vec<_>>(), seqs);
    assert!(matches!(&evs[2].1.event, Some(job_event::Event::Message(m)) if m == "m2"));

    // Registered agents are upserted by name.
    let mut a = RegisteredAgent {
        name: "gpu-1".into(),
        address: "10.0.0.1:7100".into(),
        labels: [("rack".to_string(), "a".to_string())].into(),
    };
    store.put_agent(&a).await.unwrap();
    a.address = "10.0.0.2:7100".into();
    store.put_agent(&a).await.unwrap();
    assert_eq!(store.agents().await.unwrap(), vec![a]);

    // Finishing; listing newest first.
    store
        .insert_job(&new_job("job3", 3000), &[], &[trial("job3", 0, 1)])
        .await
        .unwrap();
    store
        .finish_job(job, JobState::Succeeded, "", 9000)
        .await
        .unwrap();
    let list = store.list_jobs(0).await.unwrap();
    assert_eq!(
        list.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["job3", "job1"]
    );
    assert_eq!(list[1].finished_unix_ms, 9000);
    assert_eq!(
        store.unfinished_jobs().await.unwrap(),
        vec!["job3".to_string()]
    );
    assert_eq!(store.list_jobs(1).await.unwrap().len(), 1);
    store.close().await;

    // Reopening runs the migrations again without touching the data.
    let again = Store::open(url).await.expect("reopen");
    assert_eq!(again.levels(job).await.unwrap().len(), 3);
    again.close().await;
}

#[tokio::test]
async fn store_suite_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("sub/dir/store.db").display());
    suite(&url).await;
}

#[tokio::test]
async fn store_suite_postgres() {
    let db = common::TestDatabase::create("store").await;
    suite(&db.url).await;
    db.remove().await;
}

#[tokio::test]
async fn bad_urls_are_refused_by_name() {
    let err = Store::open("mysql://x/y").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
    assert!(err.to_string().contains("mysql://x/y"));
    let err = Store::open("postgres://nobody@127.0.0.1:1/none")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}
