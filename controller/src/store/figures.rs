//! A level's figures as columns (`levels.concurrency`, `output_tokens_per_s`, …) and its latency
//! distributions as rows (`level_latencies`), beside the blob that holds the whole result.
//!
//! Why: Grafana's PostgreSQL data source reads results through SQL views (migration 7), and SQL
//! cannot decode a protobuf blob. The columns are written with the level, in the same
//! transaction ([`Store::put_level`]); levels stored before version 7 get theirs when the store
//! is opened ([`Store::fill_level_figures`]), so every past job shows in the dashboards.

use fleetbench_proto::Word;
use fleetbench_proto::agentpb::{Distribution, LevelResult};
use fleetbench_proto::controllerpb::StoredLevel;
use sqlx::{Any, Row, Transaction};

use super::{Store, StoreError, decode, q};

/// Levels filled per transaction when back-filling.
const FILL_BATCH: i64 = 200;

/// `(metric, statistic, ms)` rows of a level's latency distributions.
pub(crate) fn latency_rows(r: &LevelResult) -> Vec<(&'static str, String, f64)> {
    let dists: [(&'static str, Option<&Distribution>); 6] = [
        ("ttft", r.ttft_ms.as_ref()),
        ("tpot", r.tpot_ms.as_ref()),
        ("itl", r.itl_ms.as_ref()),
        ("itl_chunk", r.itl_chunk_ms.as_ref()),
        ("e2e", r.e2e_ms.as_ref()),
        ("queue", r.queue_ms.as_ref()),
    ];
    let mut out = Vec::new();
    for (metric, d) in dists {
        let Some(d) = d.filter(|d| d.count > 0) else {
            continue;
        };
        let mut stats: Vec<(String, f64)> =
            d.percentiles.iter().map(|(k, v)| (k.clone(), *v)).collect();
        stats.push(("mean".into(), d.mean));
        stats.push(("min".into(), d.min));
        stats.push(("max".into(), d.max));
        out.extend(
            stats
                .into_iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(k, v)| (metric, k, v)),
        );
    }
    out
}

/// The key of a `levels` row: (job id, trial id, level index).
pub(crate) type LevelKey<'a> = (&'a str, &'a str, i64);

/// Writes the figure columns and latency rows of the stored level `key` (its row exists).
pub(crate) async fn write_figures(
    tx: &mut Transaction<'static, Any>,
    key: LevelKey<'_>,
    level: &StoredLevel,
) -> Result<(), StoreError> {
    let (job_id, trial_id, level_index) = key;
    let r = level.result.clone().unwrap_or_default();
    let load = r.level.unwrap_or_default();
    let finite = |v: f64| v.is_finite().then_some(v);
    sqlx::query(
        "UPDATE levels SET host = $1, concurrency = $2, request_rate = $3, \
         output_tokens_per_s = $4, total_tokens_per_s = $5, requests_per_s = $6, \
         goodput_per_s = $7, completed = $8, failed = $9, duration_s = $10, crash_class = $11, \
         figures = 1 WHERE job_id = $12 AND trial_id = $13 AND level_index = $14",
    )
    .bind(&level.host)
    .bind(load.concurrency.map(i64::from))
    .bind(load.request_rate.and_then(finite))
    .bind(finite(r.output_tokens_per_s))
    .bind(finite(r.total_tokens_per_s))
    .bind(finite(r.requests_per_s))
    .bind(finite(r.goodput_requests_per_s))
    .bind(r.completed as i64)
    .bind(r.failed as i64)
    .bind(finite(r.duration_s))
    .bind(r.crash.as_ref().map(|c| c.class().word()))
    .bind(job_id)
    .bind(trial_id)
    .bind(level_index)
    // Not a cached prepared statement: sqlx's Any driver declares a NULL f64 as float4 on
    // PostgreSQL, and a statement prepared with one refuses the next level's f64 ("incorrect
    // binary data format"). Each execution is parsed with its own parameter types.
    .persistent(false)
    .execute(&mut **tx)
    .await
    .map_err(q("write level figures"))?;
    for (metric, stat, ms) in latency_rows(&r) {
        sqlx::query(
            "INSERT INTO level_latencies (job_id, trial_id, level_index, metric, stat, value_ms) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (job_id, trial_id, level_index, metric, stat) DO NOTHING",
        )
        .bind(job_id)
        .bind(trial_id)
        .bind(level_index)
        .bind(metric)
        .bind(stat)
        .bind(ms)
        .execute(&mut **tx)
        .await
        .map_err(q("write level latencies"))?;
    }
    Ok(())
}

impl Store {
    /// Fills the figure columns of levels stored before schema version 7 from their blobs.
    /// Returns how many levels were filled. Runs when the store is opened; a level whose blob
    /// no longer decodes stops it with an error naming the level.
    pub async fn fill_level_figures(&self) -> Result<u64, StoreError> {
        let mut filled = 0u64;
        loop {
            let rows = sqlx::query(
                "SELECT job_id, trial_id, level_index, level FROM levels WHERE figures = 0 \
                 ORDER BY job_id, trial_id, level_index LIMIT $1",
            )
            .bind(FILL_BATCH)
            .fetch_all(&self.pool)
            .await
            .map_err(q("list levels without figures"))?;
            if rows.is_empty() {
                return Ok(filled);
            }
            let mut tx = self.pool.begin().await.map_err(q("begin fill figures"))?;
            for row in &rows {
                let job_id: String = row.try_get("job_id").map_err(q("read level key"))?;
                let trial_id: String = row.try_get("trial_id").map_err(q("read level key"))?;
                let index: i64 = row.try_get("level_index").map_err(q("read level key"))?;
                let b: Vec<u8> = row.try_get("level").map_err(q("read level"))?;
                let level: StoredLevel = decode("level", &b)?;
                write_figures(&mut tx, (&job_id, &trial_id, index), &level).await?;
            }
            tx.commit().await.map_err(q("commit fill figures"))?;
            filled += rows.len() as u64;
        }
    }
}
