//! Runs (trial attempts), level results and telemetry points.

use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::{Run, StoredLevel, TelemetryPoint};
use prost::Message;
use sqlx::Row;

use super::{Store, StoreError, decode, q};

impl Store {
    /// Inserts or replaces a run (a run is rewritten as it progresses: argv, facts, crash, end).
    pub async fn put_run(&self, run: &Run) -> Result<(), StoreError> {
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
        .bind(run.encode_to_vec())
        .execute(&self.pool)
        .await
        .map_err(q("put run"))?;
        Ok(())
    }

    /// The runs of a job, by trial and attempt.
    pub async fn runs(&self, job_id: &str) -> Result<Vec<Run>, StoreError> {
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
        let result = level.result.clone().unwrap_or_default();
        let done = sqlx::query(
            "INSERT INTO levels (job_id, trial_id, level_index, run_id, outcome, stored_unix_ms, \
             level, gpu_power_w, error_rate, prefix_cache_hit_rate, burst) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (job_id, trial_id, level_index) DO NOTHING",
        )
        .bind(&level.job_id)
        .bind(&level.trial_id)
        .bind(result.level_index as i64)
        .bind(&level.run_id)
        .bind(result.outcome as i64)
        .bind(fleetbench_proto::now_unix_ms())
        .bind(level.encode_to_vec())
        .bind(level.gpu_power_w)
        .bind(result.error_rate)
        .bind(result.prefix_cache.as_ref().and_then(|c| c.hit_rate))
        .bind(i64::from(result.burst))
        .execute(&self.pool)
        .await
        .map_err(q("put level"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Every level result of a job, by trial and level index, with its GPU power.
    pub async fn levels(&self, job_id: &str) -> Result<Vec<StoredLevel>, StoreError> {
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

    /// Appends telemetry points of a job.
    pub async fn put_telemetry(
        &self,
        job_id: &str,
        points: &[TelemetryPoint],
    ) -> Result<(), StoreError> {
        if points.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(q("begin telemetry"))?;
        for p in points {
            sqlx::query(
                "INSERT INTO telemetry (job_id, run_id, host, series, gpu, unix_ms, value) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(job_id)
            .bind(&p.run_id)
            .bind(&p.host)
            .bind(&p.series)
            .bind(p.gpu.map(|g| g as i64))
            .bind(p.unix_ms)
            .bind(p.value)
            .execute(&mut *tx)
            .await
            .map_err(q("put telemetry"))?;
        }
        tx.commit().await.map_err(q("commit telemetry"))?;
        Ok(())
    }

    /// The telemetry points of a job, oldest first.
    pub async fn telemetry(&self, job_id: &str) -> Result<Vec<TelemetryPoint>, StoreError> {
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
