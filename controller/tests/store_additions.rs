//! Store additions for tuning and regression runs, on both backends: jobs listed by kind,
//! each level's GPU power kept with it and scored by the per-watt objective, and a store of the
//! schema before power upgraded in place.
//! SQLite is a temp file; PostgreSQL is `FLEETBENCH_TEST_POSTGRES_URL` (set by
//! scripts/test.sh; required, never skipped), a fresh database per run.

mod common;

use std::future::Future;

use fleetbench_controller::store::{NewJob, Store, TrialRow};
use fleetbench_proto::agentpb::{Distribution, LevelOutcome, LevelResult, LoadLevel};
use fleetbench_proto::controllerpb::{
    ConfigInfo, GetResultsResponse, JobKind, StoredLevel, TrialState,
};
use fleetbench_rounds::tuning::score::{self, HostGpus};
use fleetbench_spec::Slo;
use fleetbench_spec::search::Objective;

fn job(id: &str, kind: JobKind, created: i64) -> NewJob {
    NewJob {
        id: id.into(),
        name: format!("job {id}"),
        kind,
        spec_toml: "name = \"x\"\n".into(),
        file_name: "x.toml".into(),
        tag: String::new(),
        created_unix_ms: created,
    }
}

async fn kinds(store: Store) {
    for (i, (id, kind)) in [
        ("s1", JobKind::Sweep),
        ("t1", JobKind::Tune),
        ("r1", JobKind::Regress),
        ("t2", JobKind::Tune),
    ]
    .into_iter()
    .enumerate()
    {
        store
            .insert_job(&job(id, kind, i as i64 + 1), &[], &[])
            .await
            .unwrap();
    }
    let ids = |jobs: Vec<fleetbench_proto::controllerpb::Job>| {
        jobs.into_iter().map(|j| (j.id, j.kind)).collect::<Vec<_>>()
    };
    let t = JobKind::Tune as i32;
    assert_eq!(
        ids(store
            .list_jobs_of_kind(0, Some(JobKind::Tune))
            .await
            .unwrap()),
        [("t2".to_string(), t), ("t1".to_string(), t)]
    );
    assert_eq!(
        ids(store
            .list_jobs_of_kind(1, Some(JobKind::Tune))
            .await
            .unwrap()),
        [("t2".to_string(), t)]
    );
    assert_eq!(
        ids(store
            .list_jobs_of_kind(0, Some(JobKind::Regress))
            .await
            .unwrap()),
        [("r1".to_string(), JobKind::Regress as i32)]
    );
    let all: Vec<String> = store
        .list_jobs(0)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(all, ["t2", "r1", "t1", "s1"]);
    store.close().await;
}

fn trial(job: &str, pos: u32, config: &str) -> TrialRow {
    TrialRow {
        id: format!("{job}-t{pos:03}"),
        job_id: job.into(),
        position: pos,
        config_index: pos,
        workload_index: 0,
        repeat: 0,
        config_id: format!("id-{config}"),
        config_name: config.into(),
        workload: "w".into(),
        level_count: 2,
        state: TrialState::Pending,
        attempts: 0,
        reason: String::new(),
    }
}

fn level(t: &TrialRow, host: &str, index: u32, tok_s: f64, watts: Option<f64>) -> StoredLevel {
    t.stored_level(
        format!("{}-a1", t.id),
        host,
        1,
        LevelResult {
            level_index: index,
            level: Some(LoadLevel {
                concurrency: Some(8 << (index * 3)),
                ..Default::default()
            }),
            outcome: LevelOutcome::Ok as i32,
            completed: 100,
            output_tokens_per_s: tok_s,
            itl_ms: Some(Distribution {
                count: 100,
                percentiles: [("p99".to_string(), 20.0)].into_iter().collect(),
                ..Default::default()
            }),
            ..Default::default()
        },
        watts,
    )
}

async fn power(store: Store) {
    let trials = [trial("p", 0, "fast"), trial("p", 1, "frugal")];
    let configs: Vec<ConfigInfo> = ["fast", "frugal"]
        .iter()
        .map(|n| ConfigInfo {
            config_id: format!("id-{n}"),
            name: n.to_string(),
            job_id: "p".into(),
            ..Default::default()
        })
        .collect();
    store
        .insert_job(&job("p", JobKind::Tune, 1), &configs, &trials)
        .await
        .unwrap();
    // "fast": 2,000 tok/s at 800 W and 4,000 at 1,600 W; "frugal": 1,500 at 500 W and 2,000
    // at 1,000 W. Per watt, frugal's first level (3 tok/s/W) is the best of all.
    for l in [
        level(&trials[0], "gpu-a", 0, 2000.0, Some(800.0)),
        level(&trials[0], "gpu-a", 1, 4000.0, Some(1600.0)),
        level(&trials[1], "gpu-b", 0, 1500.0, Some(500.0)),
        level(&trials[1], "gpu-b", 1, 2000.0, Some(1000.0)),
    ] {
        assert!(store.put_level(&l).await.unwrap());
    }
    let levels = store.levels("p").await.unwrap();
    let watts: Vec<Option<f64>> = levels.iter().map(|l| l.gpu_power_w).collect();
    assert_eq!(
        watts,
        [Some(800.0), Some(1600.0), Some(500.0), Some(1000.0)]
    );
    let results = GetResultsResponse {
        configs: store.configs("p").await.unwrap(),
        levels,
        ..Default::default()
    };
    let m = score::measure(
        &results,
        Objective::OutputTokensPerSPerWatt,
        &Slo::default(),
        &HostGpus::new(),
    )
    .unwrap();
    assert_eq!(m["fast"].score, 2.5);
    assert_eq!(m["frugal"].score, 3.0);
    assert_eq!(m["frugal"].score_power_w, Some(500.0));

    // A level stored without power (a host without GPUs) reads back without it, and the
    // per-watt objective refuses it by host.
    let t = trial("q", 0, "cpu");
    store
        .insert_job(&job("q", JobKind::Tune, 2), &[], std::slice::from_ref(&t))
        .await
        .unwrap();
    assert!(
        store
            .put_level(&level(&t, "cpu-host", 0, 900.0, None))
            .await
            .unwrap()
    );
    let levels = store.levels("q").await.unwrap();
    assert_eq!(levels[0].gpu_power_w, None);
    let results = GetResultsResponse {
        configs: vec![ConfigInfo {
            name: "cpu".into(),
            ..Default::default()
        }],
        levels,
        ..Default::default()
    };
    let err = score::measure(
        &results,
        Objective::OutputTokensPerSPerWatt,
        &Slo::default(),
        &HostGpus::new(),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "objective output_tokens_per_s_per_watt needs GPU power; host cpu-host reported none"
        ),
        "{err}"
    );
    store.close().await;
}

/// A store that a version-2 controller wrote (before levels had a power column) opens,
/// migrates to version 3 and keeps its levels; levels stored after carry their power.
async fn upgrade_from_v2(url: String) {
    let store = Store::open(&url).await.unwrap();
    let t = trial("u", 0, "old");
    store
        .insert_job(&job("u", JobKind::Sweep, 1), &[], std::slice::from_ref(&t))
        .await
        .unwrap();
    assert!(
        store
            .put_level(&level(&t, "h", 0, 1234.0, None))
            .await
            .unwrap()
    );
    // Back to what version 2 left: no power column, neither migration 3 nor 7 applied (7's
    // views read the column; its figure columns and latency rows go too).
    for view in [
        "fleetbench_regression_runs",
        "fleetbench_suite_runs",
        "fleetbench_compare_levels",
        "fleetbench_level_results",
        "fleetbench_jobs",
    ] {
        store
            .execute_raw(&format!("DROP VIEW IF EXISTS {view}"))
            .await
            .unwrap();
    }
    store
        .execute_raw("DROP TABLE level_latencies")
        .await
        .unwrap();
    for column in [
        "gpu_power_w",
        "host",
        "concurrency",
        "request_rate",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "requests_per_s",
        "goodput_per_s",
        "completed",
        "failed",
        "duration_s",
        "crash_class",
        "figures",
    ] {
        store
            .execute_raw(&format!("ALTER TABLE levels DROP COLUMN {column}"))
            .await
            .unwrap();
    }
    store
        .execute_raw("DELETE FROM _sqlx_migrations WHERE version IN (3, 7)")
        .await
        .unwrap();
    store.close().await;

    let store = Store::open(&url).await.expect("a version-2 store migrates");
    let levels = store.levels("u").await.unwrap();
    assert_eq!(levels.len(), 1);
    let r = levels[0].result.as_ref().unwrap();
    assert_eq!((r.output_tokens_per_s, r.completed), (1234.0, 100));
    assert_eq!(levels[0].gpu_power_w, None);
    assert!(
        store
            .put_level(&level(&t, "h", 1, 2000.0, Some(700.0)))
            .await
            .unwrap()
    );
    let watts: Vec<Option<f64>> = store
        .levels("u")
        .await
        .unwrap()
        .iter()
        .map(|l| l.gpu_power_w)
        .collect();
    assert_eq!(watts, [None, Some(700.0)]);
    store.close().await;
}

/// A level's error rate and cache figure are columns: the levels above an error rate are
/// listed from SQL, older rows (no figure) are not, and the blob keeps the figures whole.
async fn error_rates(store: Store) {
    let t = trial("e", 0, "flaky");
    store
        .insert_job(&job("e", JobKind::Sweep, 1), &[], std::slice::from_ref(&t))
        .await
        .unwrap();
    for (i, (failed, hit)) in [(0u64, Some(0.0)), (20, Some(0.5)), (3, None)]
        .into_iter()
        .enumerate()
    {
        let mut l = level(&t, "h", i as u32, 1000.0, None);
        let r = l.result.as_mut().unwrap();
        r.failed = failed;
        r.sent = 100;
        r.error_rate = failed as f64 / 100.0;
        r.failures_by_kind = [("http_500".to_string(), failed)].into_iter().collect();
        r.prefix_cache = Some(fleetbench_proto::agentpb::PrefixCache {
            hit_rate: hit,
            ..Default::default()
        });
        assert!(store.put_level(&l).await.unwrap());
    }
    let above = store.levels_with_errors("e", 0.01).await.unwrap();
    assert_eq!(
        above,
        [(t.id.clone(), 1, 0.2), (t.id.clone(), 2, 0.03)],
        "levels at or above 1% errors"
    );
    assert_eq!(store.levels_with_errors("e", 0.1).await.unwrap().len(), 1);
    let back = store.levels("e").await.unwrap();
    let r = back[1].result.as_ref().unwrap();
    assert_eq!((r.error_rate, r.failures_by_kind["http_500"]), (0.2, 20));
    // A row from before version 4 has no error rate and is not listed.
    store
        .execute_raw("UPDATE levels SET error_rate = NULL WHERE level_index = 1")
        .await
        .unwrap();
    assert_eq!(store.levels_with_errors("e", 0.01).await.unwrap().len(), 1);
    store.close().await;
}

#[tokio::test]
async fn level_error_rates_sqlite() {
    on_sqlite(error_rates).await;
}

#[tokio::test]
async fn level_error_rates_postgres() {
    on_postgres("errors", error_rates).await;
}

/// Runs `check` with the URL of a fresh SQLite store.
async fn sqlite_url<F: Future<Output = ()>>(check: impl FnOnce(String) -> F) {
    let dir = tempfile::tempdir().unwrap();
    check(format!(
        "sqlite://{}",
        dir.path().join("store.db").display()
    ))
    .await;
}

/// Runs `check` with the URL of a fresh PostgreSQL database, dropped afterwards.
async fn postgres_url<F: Future<Output = ()>>(what: &str, check: impl FnOnce(String) -> F) {
    let db = common::TestDatabase::create(what).await;
    check(db.url.clone()).await;
    db.remove().await;
}

async fn on_sqlite<F: Future<Output = ()>>(check: impl FnOnce(Store) -> F) {
    sqlite_url(|url| async move { check(Store::open(&url).await.unwrap()).await }).await;
}

async fn on_postgres<F: Future<Output = ()>>(what: &str, check: impl FnOnce(Store) -> F) {
    postgres_url(what, |url| async move {
        check(Store::open(&url).await.unwrap()).await
    })
    .await;
}

#[tokio::test]
async fn jobs_by_kind_sqlite() {
    on_sqlite(kinds).await;
}

#[tokio::test]
async fn jobs_by_kind_postgres() {
    on_postgres("kinds", kinds).await;
}

#[tokio::test]
async fn level_power_sqlite() {
    on_sqlite(power).await;
}

#[tokio::test]
async fn level_power_postgres() {
    on_postgres("power", power).await;
}

#[tokio::test]
async fn a_version_2_store_upgrades_sqlite() {
    sqlite_url(upgrade_from_v2).await;
}

#[tokio::test]
async fn a_version_2_store_upgrades_postgres() {
    postgres_url("upgrade", upgrade_from_v2).await;
}
