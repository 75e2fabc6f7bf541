-- fleetbench controller store, version 7 (SQLite): a level's figures as columns and its latency
-- distributions as rows; in step with postgres/0007_result_views.sql, whose Grafana views are
-- not created here (Grafana reads the store through its PostgreSQL data source only).
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
