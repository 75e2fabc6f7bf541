//! Runs (trial attempts), level results and telemetry points.

use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::{Run, StoredLevel, TelemetryPoint};
use prost::Message;
use sqlx::Row;

use super::{Store, StoreError, decode, q};

/// Rows per telemetry INSERT: 7 parameters each, far below SQLite's 32,766 and PostgreSQL's
/// 65,535 parameters per statement.
const TELEMETRY_ROWS_PER_INSERT: usize = 256;

impl Store {
    /// Inserts or replaces a run (a run is rewritten as it progresses: argv, facts, crash, end).
    pub async fn put_run(&self, run: &Run) -> Result<(), StoreError> {
        let blob = &run.encode_to_vec();
        self.retry
            .run("put run", move || async move {
                let mut tx = self.write_tx().await?;
                self.put_run_in(&mut tx, run, blob).await?;
                tx.commit().await.map_err(q("commit put run"))
            })
            .await
    }

    async fn put_run_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        run: &Run,
        blob: &[u8],
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO runs (run_id, job_id, trial_id, attempt, state, run) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (run_id) DO UPDATE SET state = excluded.state, run = excluded.run",
        )
        .bind(&run.run_id)
        .bind(&run.job_id)
        .bind(&run.trial_id)
        .bind(run.attempt as i64)
        .bind(run.state as i64)
        .bind(blob)
        .execute(&mut **tx)
        .await
        .map_err(q("put run"))?;
        Ok(())
    }

    /// The runs of a job, by trial and attempt.
    pub async fn runs(&self, job_id: &str) -> Result<Vec<Run>, StoreError> {
        self.retry
            .run("list runs", move || self.runs_once(job_id))
            .await
    }

    async fn runs_once(&self, job_id: &str) -> Result<Vec<Run>, StoreError> {
        let rows = sqlx::query(
            "SELECT run FROM runs WHERE job_id = $1 ORDER BY trial_id, attempt, run_id",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("list runs"))?;
        rows.iter()
            .map(|r| {
                let b: Vec<u8> = r.try_get("run").map_err(q("read run"))?;
                decode("run", &b)
            })
            .collect()
    }

    /// One run by id.
    pub async fn get_run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.retry
            .run("get run", move || self.get_run_once(run_id))
            .await
    }

    async fn get_run_once(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let row = sqlx::query("SELECT run FROM runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("get run"))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let b: Vec<u8> = r.try_get("run").map_err(q("read run"))?;
                decode("run", &b).map(Some)
            }
        }
    }

    /// Stores a level result under `(job, trial, level index)`. Returns `false`, changing
    /// nothing, when that level was already stored (a replay, or a retry that ran it again).
    pub async fn put_level(&self, level: &StoredLevel) -> Result<bool, StoreError> {
        // Retried whole: a retry after a commit whose answer was lost finds the level stored
        // and says so, which is the truth.
        self.retry
            .run("put level", move || self.put_level_once(level))
            .await
    }

    async fn put_level_once(&self, level: &StoredLevel) -> Result<bool, StoreError> {
        let result = level.result.clone().unwrap_or_default();
        let index = i64::from(result.level_index);
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "INSERT INTO levels (job_id, trial_id, level_index, run_id, outcome, stored_unix_ms, \
             level, gpu_power_w, error_rate, prefix_cache_hit_rate, burst, lease_epoch) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (job_id, trial_id, level_index) DO NOTHING",
        )
        .bind(&level.job_id)
        .bind(&level.trial_id)
        .bind(index)
        .bind(&level.run_id)
        .bind(result.outcome as i64)
        .bind(fleetbench_proto::now_unix_ms())
        .bind(level.encode_to_vec())
        .bind(level.gpu_power_w)
        .bind(result.error_rate)
        .bind(result.prefix_cache.as_ref().and_then(|c| c.hit_rate))
        .bind(i64::from(result.burst))
        .bind(level.lease_epoch as i64)
        // Fresh parameter types per level (see figures::write_figures): gpu_power_w and the
        // prefix-cache hit rate are NULL for some levels and numbers for others.
        .persistent(false)
        .execute(&mut *tx)
        .await
        .map_err(q("put level"))?;
        let stored = done.rows_affected() == 1;
        if stored {
            // The columns the result views read, in the same transaction: a level is in the
            // views exactly when it is stored.
            super::figures::write_figures(&mut tx, (&level.job_id, &level.trial_id, index), level)
                .await?;
        }
        tx.commit().await.map_err(q("commit put level"))?;
        Ok(stored)
    }

    /// Every level result of a job, by trial and level index, with its GPU power.
    pub async fn levels(&self, job_id: &str) -> Result<Vec<StoredLevel>, StoreError> {
        self.retry
            .run("list levels", move || self.levels_once(job_id))
            .await
    }

    async fn levels_once(&self, job_id: &str) -> Result<Vec<StoredLevel>, StoreError> {
        let rows = sqlx::query(
            "SELECT level, gpu_power_w FROM levels WHERE job_id = $1 \
             ORDER BY trial_id, level_index",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("list levels"))?;
        rows.iter()
            .map(|r| {
                let b: Vec<u8> = r.try_get("level").map_err(q("read level"))?;
                let mut level: StoredLevel = decode("level", &b)?;
                // The column is the record (levels stored before it existed have none).
                level.gpu_power_w = r
                    .try_get::<Option<f64>, _>("gpu_power_w")
                    .map_err(q("read level power"))?;
                Ok(level)
            })
            .collect()
    }

    /// `(trial id, level index, error rate)` of a job's levels whose error rate is at least
    /// `min` (levels stored before error rates were kept have none and are not listed).
    pub async fn levels_with_errors(
        &self,
        job_id: &str,
        min: f64,
    ) -> Result<Vec<(String, u32, f64)>, StoreError> {
        self.retry
            .run("levels with errors", move || {
                self.levels_with_errors_once(job_id, min)
            })
            .await
    }

    async fn levels_with_errors_once(
        &self,
        job_id: &str,
        min: f64,
    ) -> Result<Vec<(String, u32, f64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT trial_id, level_index, error_rate FROM levels \
             WHERE job_id = $1 AND error_rate >= $2 ORDER BY trial_id, level_index",
        )
        .bind(job_id)
        .bind(min)
        .fetch_all(&self.pool)
        .await
        .map_err(q("levels with errors"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>("trial_id")?,
                    r.try_get::<i64, _>("level_index")? as u32,
                    r.try_get::<f64, _>("error_rate")?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(q("read levels with errors"))
    }

    /// Level indices of a trial already stored (what a re-run must skip).
    pub async fn stored_level_indices(&self, trial_id: &str) -> Result<Vec<u32>, StoreError> {
        self.retry
            .run("stored level indices", move || {
                self.stored_level_indices_once(trial_id)
            })
            .await
    }

    async fn stored_level_indices_once(&self, trial_id: &str) -> Result<Vec<u32>, StoreError> {
        let rows =
            sqlx::query("SELECT level_index FROM levels WHERE trial_id = $1 ORDER BY level_index")
                .bind(trial_id)
                .fetch_all(&self.pool)
                .await
                .map_err(q("stored level indices"))?;
        rows.iter()
            .map(|r| r.try_get::<i64, _>("level_index").map(|i| i as u32))
            .collect::<Result<_, _>>()
            .map_err(q("read level index"))
    }

    /// Whether the last stored level of a trial crashed (the engine may need a restart).
    pub async fn level_outcome(
        &self,
        trial_id: &str,
        level_index: u32,
    ) -> Result<Option<LevelOutcome>, StoreError> {
        self.retry
            .run("level outcome", move || {
                self.level_outcome_once(trial_id, level_index)
            })
            .await
    }

    async fn level_outcome_once(
        &self,
        trial_id: &str,
        level_index: u32,
    ) -> Result<Option<LevelOutcome>, StoreError> {
        let row =
            sqlx::query("SELECT outcome FROM levels WHERE trial_id = $1 AND level_index = $2")
                .bind(trial_id)
                .bind(level_index as i64)
                .fetch_optional(&self.pool)
                .await
                .map_err(q("level outcome"))?;
        Ok(row
            .and_then(|r| r.try_get::<i64, _>("outcome").ok())
            .and_then(|o| LevelOutcome::try_from(o as i32).ok()))
    }

    /// Appends telemetry points of a job (in one transaction).
    pub async fn put_telemetry(
        &self,
        job_id: &str,
        points: &[TelemetryPoint],
    ) -> Result<(), StoreError> {
        if points.is_empty() {
            return Ok(());
        }
        self.retry
            .run("put telemetry", move || {
                self.put_telemetry_once(job_id, points)
            })
            .await
    }

    async fn put_telemetry_once(
        &self,
        job_id: &str,
        points: &[TelemetryPoint],
    ) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        // SQLite gets anonymous `?` parameters: sqlx looks up every numbered parameter's name,
        // a walk over all of the statement's names, so a statement of n numbered parameters
        // cost n² (with 1,792 per statement, a fifth of the controller's CPU at 1,000 hosts).
        let anonymous = self.backend == super::Backend::Sqlite;
        // Many rows per statement: a relay batch of 1,000 hosts is tens of thousands of points,
        // and one statement per row cost more than the rest of the controller together.
        for chunk in points.chunks(TELEMETRY_ROWS_PER_INSERT) {
            let mut sql = String::from(
                "INSERT INTO telemetry (job_id, run_id, host, series, gpu, unix_ms, value) VALUES ",
            );
            for i in 0..chunk.len() {
                let b = i * 7;
                if i > 0 {
                    sql.push_str(", ");
                }
                if anonymous {
                    sql.push_str("(?, ?, ?, ?, ?, ?, ?)");
                    continue;
                }
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7
                ));
            }
            let mut query = sqlx::query(&sql);
            for p in chunk {
                query = query
                    .bind(job_id)
                    .bind(&p.run_id)
                    .bind(&p.host)
                    .bind(&p.series)
                    .bind(p.gpu.map(|g| g as i64))
                    .bind(p.unix_ms)
                    .bind(p.value);
            }
            query.execute(&mut *tx).await.map_err(q("put telemetry"))?;
        }
        tx.commit().await.map_err(q("commit telemetry"))?;
        Ok(())
    }

    /// The telemetry points of a job, oldest first.
    pub async fn telemetry(&self, job_id: &str) -> Result<Vec<TelemetryPoint>, StoreError> {
        self.retry
            .run("list telemetry", move || self.telemetry_once(job_id))
            .await
    }

    async fn telemetry_once(&self, job_id: &str) -> Result<Vec<TelemetryPoint>, StoreError> {
        let rows = sqlx::query(
            "SELECT run_id, host, series, gpu, unix_ms, value FROM telemetry \
             WHERE job_id = $1 ORDER BY unix_ms, host, series",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("list telemetry"))?;
        rows.iter()
            .map(|r| {
                Ok(TelemetryPoint {
                    unix_ms: r.try_get("unix_ms")?,
                    host: r.try_get("host")?,
                    series: r.try_get("series")?,
                    gpu: r.try_get::<Option<i64>, _>("gpu")?.map(|g| g as u32),
                    value: r.try_get("value")?,
                    run_id: r.try_get("run_id")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(q("read telemetry"))
    }
}
