//! Jobs, their configs and their trials.

use fleetbench_proto::controllerpb::{self, ConfigInfo, Job, JobState, TrialState};
use prost::Message;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, StoreError, decode, q};

/// A job as submitted, before it has any state of its own.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: String,
    pub name: String,
    pub kind: controllerpb::JobKind,
    pub spec_toml: String,
    pub file_name: String,
    pub tag: String,
    pub created_unix_ms: i64,
}

/// One trial: a config × workload × repeat; the host is chosen when it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRow {
    pub id: String,
    pub job_id: String,
    /// Order of the trial in the job (the spec's order: blocked and shuffled by default).
    pub position: u32,
    pub config_index: u32,
    pub workload_index: u32,
    pub repeat: u32,
    pub config_id: String,
    pub config_name: String,
    pub workload: String,
    pub level_count: u32,
    pub state: TrialState,
    /// Attempts started so far (the next attempt is `attempts + 1`).
    pub attempts: u32,
    pub reason: String,
}

impl TrialRow {
    /// A trial that has reached a state no scheduler will change.
    pub fn is_finished(&self) -> bool {
        matches!(
            self.state,
            TrialState::Done | TrialState::EngineFailed | TrialState::Cancelled
        )
    }

    /// One level's result of this trial's attempt `attempt` (run `run_id` on `host`), as the
    /// store keeps it.
    pub fn stored_level(
        &self,
        run_id: String,
        host: &str,
        attempt: u32,
        result: fleetbench_proto::agentpb::LevelResult,
        gpu_power_w: Option<f64>,
    ) -> controllerpb::StoredLevel {
        controllerpb::StoredLevel {
            lease_epoch: result.lease_epoch,
            job_id: self.job_id.clone(),
            run_id,
            trial_id: self.id.clone(),
            host: host.to_string(),
            config_id: self.config_id.clone(),
            config_name: self.config_name.clone(),
            workload: self.workload.clone(),
            repeat: self.repeat,
            attempt,
            result: Some(result),
            gpu_power_w,
        }
    }
}

fn trial_from_row(r: &AnyRow) -> Result<TrialRow, sqlx::Error> {
    Ok(TrialRow {
        id: r.try_get("id")?,
        job_id: r.try_get("job_id")?,
        position: r.try_get::<i64, _>("position")? as u32,
        config_index: r.try_get::<i64, _>("config_index")? as u32,
        workload_index: r.try_get::<i64, _>("workload_index")? as u32,
        repeat: r.try_get::<i64, _>("repeat_index")? as u32,
        config_id: r.try_get("config_id")?,
        config_name: r.try_get("config_name")?,
        workload: r.try_get("workload")?,
        level_count: r.try_get::<i64, _>("level_count")? as u32,
        state: TrialState::try_from(r.try_get::<i64, _>("state")? as i32)
            .unwrap_or(TrialState::Unspecified),
        attempts: r.try_get::<i64, _>("attempts")? as u32,
        reason: r.try_get("reason")?,
    })
}

const JOB_COLUMNS: &str = "id, name, kind, state, spec_toml, file_name, tag, error, \
     created_unix_ms, started_unix_ms, finished_unix_ms";

fn job_from_row(r: &AnyRow) -> Result<Job, sqlx::Error> {
    Ok(Job {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        kind: r.try_get::<i64, _>("kind")? as i32,
        state: r.try_get::<i64, _>("state")? as i32,
        spec_toml: r.try_get("spec_toml")?,
        file_name: r.try_get("file_name")?,
        tag: r.try_get("tag")?,
        error: r.try_get("error")?,
        created_unix_ms: r.try_get("created_unix_ms")?,
        started_unix_ms: r.try_get("started_unix_ms")?,
        finished_unix_ms: r.try_get("finished_unix_ms")?,
        ..Job::default()
    })
}

impl Store {
    /// Stores a new job with its configs and trials, all or nothing.
    pub async fn insert_job(
        &self,
        job: &NewJob,
        configs: &[ConfigInfo],
        trials: &[TrialRow],
    ) -> Result<(), StoreError> {
        self.retry
            .run("insert job", move || {
                self.insert_job_once(job, configs, trials)
            })
            .await
    }

    async fn insert_job_once(
        &self,
        job: &NewJob,
        configs: &[ConfigInfo],
        trials: &[TrialRow],
    ) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO jobs (id, name, kind, state, spec_toml, file_name, tag, error, \
             created_unix_ms, started_unix_ms, finished_unix_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, '', $8, 0, 0)",
        )
        .bind(&job.id)
        .bind(&job.name)
        .bind(job.kind as i32 as i64)
        .bind(JobState::Queued as i32 as i64)
        .bind(&job.spec_toml)
        .bind(&job.file_name)
        .bind(&job.tag)
        .bind(job.created_unix_ms)
        .execute(&mut *tx)
        .await
        .map_err(q("insert job"))?;
        for (i, c) in configs.iter().enumerate() {
            sqlx::query(
                "INSERT INTO configs (job_id, position, config_id, name, info) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&job.id)
            .bind(i as i64)
            .bind(&c.config_id)
            .bind(&c.name)
            .bind(c.encode_to_vec())
            .execute(&mut *tx)
            .await
            .map_err(q("insert config"))?;
        }
        for t in trials {
            sqlx::query(
                "INSERT INTO trials (id, job_id, position, config_index, workload_index, \
                 repeat_index, config_id, config_name, workload, level_count, state, attempts, \
                 reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            )
            .bind(&t.id)
            .bind(&job.id)
            .bind(t.position as i64)
            .bind(t.config_index as i64)
            .bind(t.workload_index as i64)
            .bind(t.repeat as i64)
            .bind(&t.config_id)
            .bind(&t.config_name)
            .bind(&t.workload)
            .bind(t.level_count as i64)
            .bind(t.state as i32 as i64)
            .bind(t.attempts as i64)
            .bind(&t.reason)
            .execute(&mut *tx)
            .await
            .map_err(q("insert trial"))?;
        }
        tx.commit().await.map_err(q("commit insert job"))?;
        Ok(())
    }

    /// One job with its progress counts, or `None` when no such job exists.
    pub async fn get_job(&self, id: &str) -> Result<Option<Job>, StoreError> {
        self.retry
            .run("get job", move || self.get_job_once(id))
            .await
    }

    async fn get_job_once(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("get job"))?;
        let Some(row) = row else { return Ok(None) };
        let mut job = job_from_row(&row).map_err(q("read job"))?;
        self.fill_counts(&mut job).await?;
        Ok(Some(job))
    }

    async fn fill_counts(&self, job: &mut Job) -> Result<(), StoreError> {
        let t = sqlx::query(
            "SELECT COUNT(*) AS total, \
             CAST(COALESCE(SUM(CASE WHEN state IN ($2, $3, $4) THEN 1 ELSE 0 END), 0) AS BIGINT) AS done, \
             CAST(COALESCE(SUM(level_count), 0) AS BIGINT) AS levels \
             FROM trials WHERE job_id = $1",
        )
        .bind(&job.id)
        .bind(TrialState::Done as i32 as i64)
        .bind(TrialState::EngineFailed as i32 as i64)
        .bind(TrialState::Cancelled as i32 as i64)
        .fetch_one(&self.pool)
        .await
        .map_err(q("count trials"))?;
        let l = sqlx::query(
            "SELECT COUNT(*) AS done, \
             CAST(COALESCE(SUM(CASE WHEN outcome = $2 THEN 1 ELSE 0 END), 0) AS BIGINT) AS crashed \
             FROM levels WHERE job_id = $1",
        )
        .bind(&job.id)
        .bind(fleetbench_proto::agentpb::LevelOutcome::Crashed as i32 as i64)
        .fetch_one(&self.pool)
        .await
        .map_err(q("count levels"))?;
        let failed_runs: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM runs WHERE job_id = $1 AND state = $2")
                .bind(&job.id)
                .bind(controllerpb::RunState::EngineFailed as i32 as i64)
                .fetch_one(&self.pool)
                .await
                .and_then(|r| r.try_get("n"))
                .map_err(q("count failed runs"))?;
        let get = |r: &AnyRow, c: &str| r.try_get::<i64, _>(c).unwrap_or(0) as u32;
        job.trials_total = get(&t, "total");
        job.trials_done = get(&t, "done");
        job.levels_total = get(&t, "levels");
        job.levels_done = get(&l, "done");
        job.crashes = get(&l, "crashed") + failed_runs as u32;
        Ok(())
    }

    /// The newest jobs first; `limit` 0 means 50.
    pub async fn list_jobs(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        self.list_jobs_of_kind(limit, None).await
    }

    /// The newest jobs of one kind (every kind: `None`) first; `limit` 0 means 50.
    pub async fn list_jobs_of_kind(
        &self,
        limit: u32,
        kind: Option<controllerpb::JobKind>,
    ) -> Result<Vec<Job>, StoreError> {
        self.retry
            .run("list jobs", move || self.list_jobs_once(limit, kind))
            .await
    }

    async fn list_jobs_once(
        &self,
        limit: u32,
        kind: Option<controllerpb::JobKind>,
    ) -> Result<Vec<Job>, StoreError> {
        let limit = if limit == 0 { 50 } else { limit };
        // -1 matches no kind column value, and stands for "any kind".
        let kind = kind.map_or(-1, |k| k as i32 as i64);
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE ($2 = -1 OR kind = $2) \
             ORDER BY created_unix_ms DESC, id DESC LIMIT $1"
        ))
        .bind(limit as i64)
        .bind(kind)
        .fetch_all(&self.pool)
        .await
        .map_err(q("list jobs"))?;
        let mut jobs = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut job = job_from_row(r).map_err(q("read job"))?;
            self.fill_counts(&mut job).await?;
            jobs.push(job);
        }
        Ok(jobs)
    }

    /// Ids of jobs that are queued or running (to resume after a restart), oldest first.
    pub async fn unfinished_jobs(&self) -> Result<Vec<String>, StoreError> {
        self.retry
            .run("unfinished jobs", move || self.unfinished_jobs_once())
            .await
    }

    async fn unfinished_jobs_once(&self) -> Result<Vec<String>, StoreError> {
        let rows =
            sqlx::query("SELECT id FROM jobs WHERE state IN ($1, $2) ORDER BY created_unix_ms, id")
                .bind(JobState::Queued as i32 as i64)
                .bind(JobState::Running as i32 as i64)
                .fetch_all(&self.pool)
                .await
                .map_err(q("unfinished jobs"))?;
        rows.iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()
            .map_err(q("read job id"))
    }

    /// Marks a job running (keeping the first start time).
    pub async fn mark_job_running(&self, id: &str, now_ms: i64) -> Result<(), StoreError> {
        self.retry
            .run("mark job running", move || {
                self.mark_job_running_once(id, now_ms)
            })
            .await
    }

    async fn mark_job_running_once(&self, id: &str, now_ms: i64) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "UPDATE jobs SET state = $2, \
             started_unix_ms = CASE WHEN started_unix_ms = 0 THEN $3 ELSE started_unix_ms END \
             WHERE id = $1",
        )
        .bind(id)
        .bind(JobState::Running as i32 as i64)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(q("mark job running"))?;
        tx.commit().await.map_err(q("commit mark job running"))
    }

    /// Ends a job in a final state with an error text (empty when none).
    pub async fn finish_job(
        &self,
        id: &str,
        state: JobState,
        error: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.retry
            .run("finish job", move || async move {
                let mut tx = self.write_tx().await?;
                sqlx::query(
                    "UPDATE jobs SET state = $2, error = $3, finished_unix_ms = $4 WHERE id = $1",
                )
                .bind(id)
                .bind(state as i32 as i64)
                .bind(error)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(q("finish job"))?;
                tx.commit().await.map_err(q("commit finish job"))
            })
            .await
    }

    /// The configs of a job, in spec order.
    pub async fn configs(&self, job_id: &str) -> Result<Vec<ConfigInfo>, StoreError> {
        self.retry
            .run("list configs", move || self.configs_once(job_id))
            .await
    }

    async fn configs_once(&self, job_id: &str) -> Result<Vec<ConfigInfo>, StoreError> {
        let rows = sqlx::query("SELECT info FROM configs WHERE job_id = $1 ORDER BY position")
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .map_err(q("list configs"))?;
        rows.iter()
            .map(|r| {
                let b: Vec<u8> = r.try_get("info").map_err(q("read config"))?;
                decode("config", &b)
            })
            .collect()
    }

    /// The trials of a job, in order.
    pub async fn trials(&self, job_id: &str) -> Result<Vec<TrialRow>, StoreError> {
        self.retry
            .run("list trials", move || self.trials_once(job_id))
            .await
    }

    async fn trials_once(&self, job_id: &str) -> Result<Vec<TrialRow>, StoreError> {
        let rows = sqlx::query("SELECT * FROM trials WHERE job_id = $1 ORDER BY position")
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .map_err(q("list trials"))?;
        rows.iter()
            .map(trial_from_row)
            .collect::<Result<_, _>>()
            .map_err(q("read trial"))
    }

    /// Sets a trial's state and reason.
    pub async fn set_trial_state(
        &self,
        trial_id: &str,
        state: TrialState,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.retry
            .run("set trial state", move || async move {
                let mut tx = self.write_tx().await?;
                sqlx::query("UPDATE trials SET state = $2, reason = $3 WHERE id = $1")
                    .bind(trial_id)
                    .bind(state as i32 as i64)
                    .bind(reason)
                    .execute(&mut *tx)
                    .await
                    .map_err(q("set trial state"))?;
                tx.commit().await.map_err(q("commit trial state"))
            })
            .await
    }

    /// Counts a new attempt of a trial and returns its number (1 for the first).
    pub async fn next_attempt(&self, trial_id: &str) -> Result<u32, StoreError> {
        self.retry
            .run("next attempt", move || self.next_attempt_once(trial_id))
            .await
    }

    async fn next_attempt_once(&self, trial_id: &str) -> Result<u32, StoreError> {
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE trials SET attempts = attempts + 1 WHERE id = $1")
            .bind(trial_id)
            .execute(&mut *tx)
            .await
            .map_err(q("count attempt"))?;
        let n: i64 = sqlx::query("SELECT attempts FROM trials WHERE id = $1")
            .bind(trial_id)
            .fetch_one(&mut *tx)
            .await
            .and_then(|r| r.try_get("attempts"))
            .map_err(q("read attempts"))?;
        tx.commit().await.map_err(q("commit next attempt"))?;
        Ok(n as u32)
    }
}
