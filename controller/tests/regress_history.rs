//! The suite history table (store migration 2) on both backends: records round-trip, a
//! record can be replaced, and runs come back newest first per suite.

mod common;

use fleetbench_controller::store::Store;
use fleetbench_rounds::regress::SuiteRun;

fn run(job: &str, suite: &str, passed: bool, at: i64) -> SuiteRun {
    SuiteRun {
        job_id: job.into(),
        suite: suite.into(),
        tag: if at == 1 { "v1".into() } else { String::new() },
        passed,
        regressions: u32::from(!passed),
        baseline_job_id: String::new(),
        created_unix_ms: at,
        verdicts: format!("verdicts of {job}"),
    }
}

async fn history(url: &str) {
    let store = Store::open(url).await.unwrap();
    store.put_suite_run(&run("j1", "s", true, 1)).await.unwrap();
    store
        .put_suite_run(&run("j2", "s", false, 2))
        .await
        .unwrap();
    store
        .put_suite_run(&run("k1", "other", true, 3))
        .await
        .unwrap();
    let got = store.suite_runs("s").await.unwrap();
    assert_eq!(got, [run("j2", "s", false, 2), run("j1", "s", true, 1)]);
    // Recording a run again replaces it.
    let mut again = run("j2", "s", true, 2);
    again.baseline_job_id = "j1".into();
    store.put_suite_run(&again).await.unwrap();
    assert_eq!(store.suite_runs("s").await.unwrap()[0], again);
    assert!(store.suite_runs("none").await.unwrap().is_empty());
    store.close().await;
}

#[tokio::test]
async fn suite_history_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    history(&format!("sqlite://{}", dir.path().join("h.db").display())).await;
}

#[tokio::test]
async fn suite_history_postgres() {
    let db = common::TestDatabase::create("history").await;
    history(&db.url).await;
    db.remove().await;
}
