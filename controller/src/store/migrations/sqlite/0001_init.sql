-- fleetbench controller store, version 1 (SQLite). Keep in step with postgres/0001_init.sql:
-- the two differ only in the blob type and the auto-increment column.
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind BIGINT NOT NULL,
    state BIGINT NOT NULL,
    spec_toml TEXT NOT NULL,
    file_name TEXT NOT NULL,
    tag TEXT NOT NULL,
    error TEXT NOT NULL,
    created_unix_ms BIGINT NOT NULL,
    started_unix_ms BIGINT NOT NULL,
    finished_unix_ms BIGINT NOT NULL
);

CREATE TABLE configs (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    position BIGINT NOT NULL,
    config_id TEXT NOT NULL,
    name TEXT NOT NULL,
    info BLOB NOT NULL,
    PRIMARY KEY (job_id, position)
);

CREATE TABLE trials (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    position BIGINT NOT NULL,
    config_index BIGINT NOT NULL,
    workload_index BIGINT NOT NULL,
    repeat_index BIGINT NOT NULL,
    config_id TEXT NOT NULL,
    config_name TEXT NOT NULL,
    workload TEXT NOT NULL,
    level_count BIGINT NOT NULL,
    state BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX trials_job ON trials(job_id, position);

-- One row per trial attempt (an engine run on one host); `run` is the encoded controller.v1.Run.
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    trial_id TEXT NOT NULL REFERENCES trials(id),
    attempt BIGINT NOT NULL,
    state BIGINT NOT NULL,
    run BLOB NOT NULL
);
CREATE INDEX runs_job ON runs(job_id);

-- Level results. The key is (job, trial, level index), not the attempt: a level of a trial is
-- measured once, whichever attempt or host measured it first; a replay or a retry inserts nothing.
CREATE TABLE levels (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    trial_id TEXT NOT NULL REFERENCES trials(id),
    level_index BIGINT NOT NULL,
    run_id TEXT NOT NULL,
    outcome BIGINT NOT NULL,
    stored_unix_ms BIGINT NOT NULL,
    level BLOB NOT NULL,
    PRIMARY KEY (job_id, trial_id, level_index)
);

CREATE TABLE telemetry (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    series TEXT NOT NULL,
    gpu BIGINT,
    unix_ms BIGINT NOT NULL,
    value DOUBLE PRECISION NOT NULL
);
CREATE INDEX telemetry_job ON telemetry(job_id, unix_ms);

CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    unix_ms BIGINT NOT NULL,
    event BLOB NOT NULL
);
CREATE INDEX events_job ON events(job_id, seq);

-- Agents that registered themselves, so a restarted controller knows them before they call again.
CREATE TABLE agents (
    name TEXT PRIMARY KEY,
    address TEXT NOT NULL,
    labels TEXT NOT NULL,
    registered_unix_ms BIGINT NOT NULL
);
