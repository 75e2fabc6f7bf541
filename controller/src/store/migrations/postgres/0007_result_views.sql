-- fleetbench controller store, version 7 (PostgreSQL): a level's figures as columns and its
-- latency distributions as rows, and the views Grafana's PostgreSQL data source reads
-- (dashboards/config-comparison.json, dashboards/regression-history.json). Keep the tables in
-- step with sqlite/0007_result_views.sql; the views exist on PostgreSQL only (Grafana has no
-- built-in SQLite data source). docs/observability.md documents every view column.
ALTER TABLE levels ADD COLUMN host TEXT;
ALTER TABLE levels ADD COLUMN concurrency BIGINT;
ALTER TABLE levels ADD COLUMN request_rate DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN output_tokens_per_s DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN total_tokens_per_s DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN requests_per_s DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN goodput_per_s DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN completed BIGINT;
ALTER TABLE levels ADD COLUMN failed BIGINT;
ALTER TABLE levels ADD COLUMN duration_s DOUBLE PRECISION;
-- oom, nan, python_exception, ... when the engine crashed during the level.
ALTER TABLE levels ADD COLUMN crash_class TEXT;
-- 0: the columns above are not filled yet (a level stored before version 7; the controller
-- fills them from the level blob when it opens the store); 1: filled.
ALTER TABLE levels ADD COLUMN figures BIGINT NOT NULL DEFAULT 0;

-- A level's latency distributions, one row per (metric, statistic): metric `ttft`, `tpot`,
-- `itl`, `itl_chunk`, `e2e`, `queue`; statistic `p50`, `p90`, `p99`, ... as the job asked,
-- `mean`, `min`, `max`; value in milliseconds.
CREATE TABLE level_latencies (
    job_id TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    level_index BIGINT NOT NULL,
    metric TEXT NOT NULL,
    stat TEXT NOT NULL,
    value_ms DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (job_id, trial_id, level_index, metric, stat)
);

-- One row per job.
CREATE VIEW fleetbench_jobs AS
SELECT
    j.id AS job_id,
    j.name AS job_name,
    CASE j.kind WHEN 1 THEN 'sweep' WHEN 2 THEN 'tune' WHEN 3 THEN 'regress' ELSE 'sweep' END AS kind,
    CASE j.state WHEN 1 THEN 'queued' WHEN 2 THEN 'running' WHEN 3 THEN 'succeeded'
        WHEN 4 THEN 'failed' WHEN 5 THEN 'cancelled' ELSE 'unknown' END AS state,
    j.tag,
    to_timestamp(j.created_unix_ms / 1000.0) AS created,
    CASE WHEN j.finished_unix_ms > 0 THEN to_timestamp(j.finished_unix_ms / 1000.0) END AS finished
FROM jobs j;

-- One row per stored level result: (job, trial, level index). A trial is one (config, workload,
-- repeat); a level is measured once whichever attempt measured it, so every row counts once.
-- Levels stored before version 7 appear once the controller has filled their columns (it does
-- so when it opens the store).
CREATE VIEW fleetbench_level_results AS
WITH lat AS (
    SELECT job_id, trial_id, level_index,
        MAX(value_ms) FILTER (WHERE metric = 'ttft' AND stat = 'p50') AS ttft_p50_ms,
        MAX(value_ms) FILTER (WHERE metric = 'ttft' AND stat = 'p90') AS ttft_p90_ms,
        MAX(value_ms) FILTER (WHERE metric = 'ttft' AND stat = 'p99') AS ttft_p99_ms,
        MAX(value_ms) FILTER (WHERE metric = 'ttft' AND stat = 'mean') AS ttft_mean_ms,
        MAX(value_ms) FILTER (WHERE metric = 'tpot' AND stat = 'p50') AS tpot_p50_ms,
        MAX(value_ms) FILTER (WHERE metric = 'tpot' AND stat = 'p90') AS tpot_p90_ms,
        MAX(value_ms) FILTER (WHERE metric = 'tpot' AND stat = 'p99') AS tpot_p99_ms,
        MAX(value_ms) FILTER (WHERE metric = 'tpot' AND stat = 'mean') AS tpot_mean_ms,
        MAX(value_ms) FILTER (WHERE metric = 'itl' AND stat = 'p50') AS itl_p50_ms,
        MAX(value_ms) FILTER (WHERE metric = 'itl' AND stat = 'p90') AS itl_p90_ms,
        MAX(value_ms) FILTER (WHERE metric = 'itl' AND stat = 'p99') AS itl_p99_ms,
        MAX(value_ms) FILTER (WHERE metric = 'itl' AND stat = 'mean') AS itl_mean_ms,
        MAX(value_ms) FILTER (WHERE metric = 'e2e' AND stat = 'p50') AS e2e_p50_ms,
        MAX(value_ms) FILTER (WHERE metric = 'e2e' AND stat = 'p90') AS e2e_p90_ms,
        MAX(value_ms) FILTER (WHERE metric = 'e2e' AND stat = 'p99') AS e2e_p99_ms,
        MAX(value_ms) FILTER (WHERE metric = 'e2e' AND stat = 'mean') AS e2e_mean_ms
    FROM level_latencies
    GROUP BY job_id, trial_id, level_index
)
SELECT
    to_timestamp(l.stored_unix_ms / 1000.0) AS time,
    l.job_id,
    j.name AS job_name,
    j.tag AS job_tag,
    t.config_id,
    t.config_name,
    t.workload,
    t.repeat_index AS repeat,
    l.host,
    l.level_index,
    CASE WHEN l.request_rate IS NOT NULL THEN 'request_rate' ELSE 'concurrency' END AS load_kind,
    l.concurrency,
    l.request_rate,
    CASE
        WHEN l.request_rate IS NOT NULL AND l.concurrency IS NOT NULL
            THEN 'r=' || l.request_rate::text || '/s c<=' || l.concurrency::text
        WHEN l.request_rate IS NOT NULL THEN 'r=' || l.request_rate::text || '/s'
        ELSE 'c=' || l.concurrency::text
    END AS level_label,
    CASE l.outcome WHEN 1 THEN 'ok' WHEN 2 THEN 'failed' WHEN 3 THEN 'crashed' ELSE 'unknown' END
        AS outcome,
    l.output_tokens_per_s,
    l.total_tokens_per_s,
    l.requests_per_s,
    l.goodput_per_s,
    l.completed,
    l.failed,
    l.error_rate,
    l.duration_s,
    l.crash_class,
    l.gpu_power_w,
    l.prefix_cache_hit_rate,
    l.burst <> 0 AS burst,
    lat.ttft_p50_ms, lat.ttft_p90_ms, lat.ttft_p99_ms, lat.ttft_mean_ms,
    lat.tpot_p50_ms, lat.tpot_p90_ms, lat.tpot_p99_ms, lat.tpot_mean_ms,
    lat.itl_p50_ms, lat.itl_p90_ms, lat.itl_p99_ms, lat.itl_mean_ms,
    lat.e2e_p50_ms, lat.e2e_p90_ms, lat.e2e_p99_ms, lat.e2e_mean_ms
FROM levels l
JOIN jobs j ON j.id = l.job_id
JOIN trials t ON t.id = l.trial_id
LEFT JOIN lat ON lat.job_id = l.job_id AND lat.trial_id = l.trial_id
    AND lat.level_index = l.level_index
WHERE l.figures = 1;

-- One row per (job, config, workload, load level), over the repeats: the figures
-- `fleetbench compare` prints. Throughput, rates, latencies and power are means over the
-- repeats that ran to the end (outcome ok); a percentile is the mean of the repeats'
-- percentiles; the spread is the sample standard deviation (0 for one repeat); errors and the
-- error rate (failed / (failed + completed)) count every repeat. A latency a config never
-- measured at a level (no ok repeat) is NULL where `compare --json` prints 0.
CREATE VIEW fleetbench_compare_levels AS
SELECT
    MIN(time) AS time,
    job_id,
    MIN(job_name) AS job_name,
    config_id,
    MIN(config_name) AS config_name,
    workload,
    load_kind,
    concurrency,
    request_rate,
    MIN(level_label) AS level_label,
    COUNT(*) AS repeats,
    COUNT(*) FILTER (WHERE outcome = 'ok') AS repeats_ok,
    AVG(output_tokens_per_s) FILTER (WHERE outcome = 'ok') AS output_tokens_per_s,
    COALESCE(STDDEV_SAMP(output_tokens_per_s) FILTER (WHERE outcome = 'ok'), 0)
        AS output_tokens_per_s_spread,
    AVG(total_tokens_per_s) FILTER (WHERE outcome = 'ok') AS total_tokens_per_s,
    AVG(requests_per_s) FILTER (WHERE outcome = 'ok') AS requests_per_s,
    AVG(goodput_per_s) FILTER (WHERE outcome = 'ok') AS goodput_per_s,
    AVG(ttft_p50_ms) FILTER (WHERE outcome = 'ok') AS ttft_p50_ms,
    AVG(ttft_p90_ms) FILTER (WHERE outcome = 'ok') AS ttft_p90_ms,
    AVG(ttft_p99_ms) FILTER (WHERE outcome = 'ok') AS ttft_p99_ms,
    AVG(tpot_p50_ms) FILTER (WHERE outcome = 'ok') AS tpot_p50_ms,
    AVG(tpot_p90_ms) FILTER (WHERE outcome = 'ok') AS tpot_p90_ms,
    AVG(tpot_p99_ms) FILTER (WHERE outcome = 'ok') AS tpot_p99_ms,
    AVG(itl_p50_ms) FILTER (WHERE outcome = 'ok') AS itl_p50_ms,
    AVG(itl_p90_ms) FILTER (WHERE outcome = 'ok') AS itl_p90_ms,
    AVG(itl_p99_ms) FILTER (WHERE outcome = 'ok') AS itl_p99_ms,
    AVG(e2e_p50_ms) FILTER (WHERE outcome = 'ok') AS e2e_p50_ms,
    AVG(e2e_p90_ms) FILTER (WHERE outcome = 'ok') AS e2e_p90_ms,
    AVG(e2e_p99_ms) FILTER (WHERE outcome = 'ok') AS e2e_p99_ms,
    SUM(failed)::bigint AS errors,
    CASE WHEN SUM(failed + completed) > 0
        THEN SUM(failed)::double precision / SUM(failed + completed)::double precision
        ELSE 0 END AS error_rate,
    BOOL_OR(outcome = 'crashed') AS crashed,
    COUNT(*) FILTER (WHERE outcome <> 'ok') AS repeats_not_ok,
    AVG(gpu_power_w) FILTER (WHERE outcome = 'ok') AS gpu_power_w,
    AVG(prefix_cache_hit_rate) FILTER (WHERE outcome = 'ok') AS prefix_cache_hit_rate
FROM fleetbench_level_results
GROUP BY job_id, config_id, workload, load_kind, concurrency, request_rate;

-- One row per regression suite run: its verdict as the controller recorded it.
CREATE VIEW fleetbench_suite_runs AS
SELECT
    to_timestamp(s.created_unix_ms / 1000.0) AS time,
    s.suite,
    s.tag,
    s.job_id,
    s.baseline_job_id,
    s.passed <> 0 AS passed,
    s.regressions,
    s.verdicts
FROM suite_runs s;

-- One row per regression suite run and compared figure: the run's figures per (workload,
-- level) beside the baseline job's at the same level (NULL where the baseline had no such
-- level, or the run had no baseline).
CREATE VIEW fleetbench_regression_runs AS
SELECT
    to_timestamp(s.created_unix_ms / 1000.0) AS time,
    s.suite,
    s.tag,
    s.job_id,
    s.baseline_job_id,
    s.passed <> 0 AS passed,
    s.regressions,
    cur.config_name,
    cur.workload,
    cur.load_kind,
    cur.concurrency,
    cur.request_rate,
    cur.level_label,
    cur.output_tokens_per_s,
    base.output_tokens_per_s AS baseline_output_tokens_per_s,
    cur.ttft_p99_ms,
    base.ttft_p99_ms AS baseline_ttft_p99_ms,
    cur.itl_p99_ms,
    base.itl_p99_ms AS baseline_itl_p99_ms,
    cur.tpot_p99_ms,
    base.tpot_p99_ms AS baseline_tpot_p99_ms,
    cur.error_rate,
    base.error_rate AS baseline_error_rate,
    cur.crashed
FROM suite_runs s
JOIN fleetbench_compare_levels cur ON cur.job_id = s.job_id
LEFT JOIN fleetbench_compare_levels base ON base.job_id = s.baseline_job_id
    AND base.config_name = cur.config_name AND base.workload = cur.workload
    AND base.load_kind = cur.load_kind
    AND base.concurrency IS NOT DISTINCT FROM cur.concurrency
    AND base.request_rate IS NOT DISTINCT FROM cur.request_rate;

-- Grafana's login (deploy/compose creates it; docs/observability.md shows how elsewhere) reads
-- these views and nothing else: a view reads its tables with its owner's rights.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fleetbench_grafana') THEN
        GRANT SELECT ON fleetbench_jobs, fleetbench_level_results, fleetbench_compare_levels,
            fleetbench_suite_runs, fleetbench_regression_runs TO fleetbench_grafana;
    END IF;
END
$$;
