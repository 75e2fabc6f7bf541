//! Store additions for tuning and regression runs, on both backends: jobs listed by kind.
//! SQLite is a temp file; PostgreSQL is `FLEETBENCH_TEST_POSTGRES_URL` (set by
//! scripts/test.sh; required, never skipped), a fresh database per run.

use std::future::Future;

use fleetbench_controller::store::{NewJob, Store};
use fleetbench_proto::controllerpb::JobKind;

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

async fn on_sqlite<F: Future<Output = ()>>(check: impl FnOnce(Store) -> F) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    check(Store::open(&url).await.unwrap()).await;
}

async fn on_postgres<F: Future<Output = ()>>(what: &str, check: impl FnOnce(Store) -> F) {
    let base = std::env::var("FLEETBENCH_TEST_POSTGRES_URL").expect(
        "FLEETBENCH_TEST_POSTGRES_URL is not set: the store additions must also run against \
         PostgreSQL (scripts/test.sh starts one and sets it)",
    );
    let name = format!("fleetbench_{what}_{}", std::process::id());
    let admin = Store::open(&base).await.expect("the test PostgreSQL");
    admin
        .execute_raw(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .unwrap();
    admin
        .execute_raw(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (prefix, _) = base.rsplit_once('/').expect("url has a database");
    check(Store::open(&format!("{prefix}/{name}")).await.unwrap()).await;
    admin
        .execute_raw(&format!("DROP DATABASE {name}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn jobs_by_kind_sqlite() {
    on_sqlite(kinds).await;
}

#[tokio::test]
async fn jobs_by_kind_postgres() {
    on_postgres("kinds", kinds).await;
}
