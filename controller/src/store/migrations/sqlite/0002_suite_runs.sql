-- fleetbench controller store, version 2: the history of regression suite runs (identical on
-- PostgreSQL). One row per suite run; the job holds its results.
CREATE TABLE suite_runs (
    job_id TEXT PRIMARY KEY,
    suite TEXT NOT NULL,
    tag TEXT NOT NULL,
    passed BIGINT NOT NULL,
    regressions BIGINT NOT NULL,
    baseline_job_id TEXT NOT NULL,
    created_unix_ms BIGINT NOT NULL,
    verdicts TEXT NOT NULL
);
CREATE INDEX suite_runs_suite ON suite_runs(suite, created_unix_ms);
