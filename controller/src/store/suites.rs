//! The history of regression suite runs: which job ran a suite, whether it passed, against
//! which baseline, and its tag (a baseline later runs can name). The record itself is
//! `fleetbench_rounds::regress::SuiteRun`, what the suite runner writes.

use sqlx::Row;

use super::{Store, StoreError, q};
use fleetbench_rounds::regress::SuiteRun;

impl Store {
    /// Records a suite run (again: replaces the earlier record of the same job).
    pub async fn put_suite_run(&self, r: &SuiteRun) -> Result<(), StoreError> {
        self.retry
            .run("put suite run", move || async move {
                let mut tx = self.write_tx().await?;
                Self::put_suite_run_in(&mut tx, r).await?;
                tx.commit().await.map_err(q("commit suite run"))
            })
            .await
    }

    async fn put_suite_run_in(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        r: &SuiteRun,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO suite_runs (job_id, suite, tag, passed, regressions, baseline_job_id, \
             created_unix_ms, verdicts) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (job_id) DO UPDATE SET suite = excluded.suite, tag = excluded.tag, \
             passed = excluded.passed, regressions = excluded.regressions, \
             baseline_job_id = excluded.baseline_job_id, verdicts = excluded.verdicts",
        )
        .bind(&r.job_id)
        .bind(&r.suite)
        .bind(&r.tag)
        .bind(i64::from(r.passed))
        .bind(i64::from(r.regressions))
        .bind(&r.baseline_job_id)
        .bind(r.created_unix_ms)
        .bind(&r.verdicts)
        .execute(&mut **tx)
        .await
        .map_err(q("put suite run"))?;
        Ok(())
    }

    /// The runs of a suite, newest first.
    pub async fn suite_runs(&self, suite: &str) -> Result<Vec<SuiteRun>, StoreError> {
        self.retry
            .run("list suite runs", move || self.suite_runs_once(suite))
            .await
    }

    async fn suite_runs_once(&self, suite: &str) -> Result<Vec<SuiteRun>, StoreError> {
        let rows = sqlx::query(
            "SELECT job_id, suite, tag, passed, regressions, baseline_job_id, created_unix_ms, \
             verdicts FROM suite_runs WHERE suite = $1 ORDER BY created_unix_ms DESC, job_id DESC",
        )
        .bind(suite)
        .fetch_all(&self.pool)
        .await
        .map_err(q("list suite runs"))?;
        rows.iter()
            .map(|r| {
                let get_s = |c: &str| r.try_get::<String, _>(c);
                let get_i = |c: &str| r.try_get::<i64, _>(c);
                Ok(SuiteRun {
                    job_id: get_s("job_id")?,
                    suite: get_s("suite")?,
                    tag: get_s("tag")?,
                    passed: get_i("passed")? != 0,
                    regressions: get_i("regressions")? as u32,
                    baseline_job_id: get_s("baseline_job_id")?,
                    created_unix_ms: get_i("created_unix_ms")?,
                    verdicts: get_s("verdicts")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(q("read suite run"))
    }
}
