//! The SQLite store under concurrent writers and readers: its pool (WAL, busy_timeout) serves
//! many jobs at once without "database is locked".
//!
//! - The store alone, with retries turned off so that any SQLITE_BUSY would surface: 12 tasks
//!   each write a job, its runs, levels, telemetry and events while reading them back.
//! - A controller with three sim agents running three jobs at once, retries off too, while a
//!   reader polls every result: every job succeeds (one store error would have failed it).

mod common;

use std::time::Duration;

use common::*;
use fleetbench_controller::store::{NewJob, RetryPolicy, Store, TrialRow};
use fleetbench_proto::agentpb::LevelResult;
use fleetbench_proto::controllerpb::{
    GetResultsRequest, JobEvent, JobKind, JobState, ListJobsRequest, Run, StoredLevel,
    SubmitJobRequest, TelemetryPoint, TrialState, job_event,
};

fn trial(job: &str, pos: u32) -> TrialRow {
    TrialRow {
        id: format!("{job}-t{pos:03}"),
        job_id: job.into(),
        position: pos,
        config_index: 0,
        workload_index: 0,
        repeat: pos,
        config_id: "cfg".into(),
        config_name: "A".into(),
        workload: "w".into(),
        level_count: 20,
        state: TrialState::Pending,
        attempts: 0,
        reason: String::new(),
    }
}

async fn one_writer(store: Store, w: u32) {
    let job = format!("job{w}");
    store
        .insert_job(
            &NewJob {
                id: job.clone(),
                name: job.clone(),
                kind: JobKind::Sweep,
                spec_toml: String::new(),
                file_name: "x.toml".into(),
                tag: String::new(),
                created_unix_ms: i64::from(w),
            },
            &[],
            &[trial(&job, 0)],
        )
        .await
        .unwrap();
    let t = trial(&job, 0);
    for i in 0..20u32 {
        let attempt = store.next_attempt(&t.id).await.unwrap();
        let run = Run {
            run_id: format!("{}-a{attempt}", t.id),
            job_id: job.clone(),
            trial_id: t.id.clone(),
            attempt,
            ..Run::default()
        };
        store.put_run(&run).await.unwrap();
        let level = StoredLevel {
            job_id: job.clone(),
            run_id: run.run_id.clone(),
            trial_id: t.id.clone(),
            result: Some(LevelResult {
                level_index: i,
                ..Default::default()
            }),
            ..StoredLevel::default()
        };
        assert!(store.put_level(&level).await.unwrap());
        let points: Vec<TelemetryPoint> = (0..10)
            .map(|k| TelemetryPoint {
                unix_ms: i64::from(i * 10 + k),
                host: "h".into(),
                series: "hw.power".into(),
                value: 1.0,
                run_id: run.run_id.clone(),
                gpu: Some(0),
            })
            .collect();
        store.put_telemetry(&job, &points).await.unwrap();
        store
            .append_event(
                &job,
                &JobEvent {
                    unix_ms: 1,
                    job_id: job.clone(),
                    event: Some(job_event::Event::Message(format!("level {i}"))),
                },
            )
            .await
            .unwrap();
        store
            .set_trial_state(&t.id, TrialState::Running, "")
            .await
            .unwrap();
        // Readers beside the writers.
        assert_eq!(store.levels(&job).await.unwrap().len(), i as usize + 1);
        store.get_job(&job).await.unwrap().unwrap();
        store.list_jobs(10).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_and_readers_never_see_a_locked_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("c.db").display());
    // No retry: a single SQLITE_BUSY would fail the test.
    let store = Store::open(&url)
        .await
        .unwrap()
        .with_retry(RetryPolicy::none());
    let mut set = tokio::task::JoinSet::new();
    for w in 0..12 {
        set.spawn(one_writer(store.clone(), w));
    }
    while let Some(r) = set.join_next().await {
        r.expect("a writer failed (see its panic)");
    }
    for w in 0..12 {
        let job = format!("job{w}");
        assert_eq!(store.levels(&job).await.unwrap().len(), 20);
        assert_eq!(store.telemetry(&job).await.unwrap().len(), 200);
        assert_eq!(store.events(&job).await.unwrap().len(), 20);
    }
    store.close().await;
}

fn spec(name: &str, host: &str) -> String {
    format!(
        r#"name = "{name}"
repeats = 2
[hosts]
names = ["{host}"]
[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = {{ "--ttft-ms" = 5, "--itl-ms" = 5 }}
[[workloads]]
name = "w"
dataset = "random"
input_len = 8
output_len = 8
[load]
concurrency = [1, 2, 4]
requests = 8
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_jobs_at_once_on_a_sqlite_controller() {
    let dir = tempfile::tempdir().unwrap();
    let agents = spawn_agents(dir.path(), &["q1", "q2", "q3"]);
    let mut cfg = local_config(dir.path(), &agents.iter().collect::<Vec<_>>());
    // No retry either: the pool alone must carry the load.
    cfg.store_retry = RetryPolicy::none();
    let ctl = start_local(cfg).await;
    let mut c = client(ctl.addr).await;
    let mut ids = Vec::new();
    for a in &agents {
        let id = c
            .submit_job(SubmitJobRequest {
                spec_toml: spec(&format!("pool-{}", a.name), &a.name),
                file_name: "pool.toml".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .job_id;
        ids.push(id);
    }
    // A reader polling everything while the three jobs write.
    let mut reader = c.clone();
    let ids2 = ids.clone();
    let polling = tokio::spawn(async move {
        let mut reads = 0u32;
        loop {
            reader
                .get_results(GetResultsRequest {
                    job_ids: ids2.clone(),
                    include_telemetry: true,
                })
                .await
                .expect("reads succeed while jobs write");
            reader
                .list_jobs(ListJobsRequest { limit: 10, kind: 0 })
                .await
                .unwrap();
            reads += 1;
            let jobs = reader
                .list_jobs(ListJobsRequest { limit: 10, kind: 0 })
                .await
                .unwrap()
                .into_inner()
                .jobs;
            let ended = JobState::is_final_value;
            if jobs.iter().all(|j| ended(j.state)) {
                return reads;
            }
        }
    });
    for id in &ids {
        let job = wait_job(&mut c, id, Duration::from_secs(120)).await;
        assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
        assert_eq!(job.levels_done, 6);
    }
    let reads = polling.await.unwrap();
    assert!(reads > 1, "the reader ran beside the jobs");
    ctl.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_job_tasks_before_the_store_closes() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "w1", fleetbench_testkit::free_port());
    let db = format!("sqlite://{}", dir.path().join("controller.db").display());
    let ctl = start_local(local_config(dir.path(), &[&agent])).await;
    let mut c = client(ctl.addr).await;
    let id = c
        .submit_job(SubmitJobRequest {
            spec_toml: sim_spec("shutdown", 1, &["w1"]),
            file_name: "shutdown.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job_id;
    let store = ctl.store.clone();
    while store.levels(&id).await.unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = std::time::Instant::now();
    ctl.shutdown().await;
    println!("shutdown with a job running took {:.2?}", t.elapsed());
    // The trial's last write (its run's end) landed before the store closed: nothing is left
    // `running` but the job itself, which the next start resumes.
    let store = Store::open(&db).await.unwrap();
    let runs = store.runs(&id).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(
        runs[0].state,
        fleetbench_proto::controllerpb::RunState::Cancelled as i32,
        "{runs:#?}"
    );
    assert!(runs[0].finished_unix_ms > 0);
    let job = store.get_job(&id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Running as i32);
    drop(agent);
}
