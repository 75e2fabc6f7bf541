//! The scheduler: turns a submitted spec into stored trials, runs each job's trials on every
//! matching host in parallel (one engine per host at a time), and picks unfinished jobs up
//! again after a restart.
//!
//! - [`job`]: one job's loop (hand out trials to free hosts, retry lost ones, cancel, finish).
//! - [`trial`]: one trial attempt on one host (apply engine, benchmark, store each level).
//! - [`telemetry`]: the agent's metrics stream during a trial, downsampled into the store.

mod job;
mod telemetry;
mod trial;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbench_proto::controllerpb::{
    self, ConfigInfo, JobKind, SpecError as PbSpecError, SubmitJobResponse, TrialState,
};
use fleetbench_proto::now_unix_ms;
use tokio_util::sync::CancellationToken;

use crate::agents::Inventory;
use crate::events::EventHub;
use crate::metrics::Metrics;
use crate::spec;
use crate::store::{NewJob, Store, StoreError, TrialRow};

/// Everything a running job needs.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub store: Store,
    pub inventory: Arc<Inventory>,
    pub hub: EventHub,
    pub metrics: Arc<Metrics>,
    pub trial_attempts: u32,
    pub host_wait: Duration,
}

/// Errors of the scheduler's operations.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No job has this id.
    #[error("no job {0:?}")]
    NoSuchJob(String),
}

/// Submits, runs, cancels and resumes jobs.
#[derive(Debug, Clone)]
pub struct Scheduler {
    ctx: Arc<Ctx>,
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    /// Parent of every job's token: cancelled when the controller shuts down (jobs stay
    /// `running` in the store and are resumed by the next start).
    shutdown: CancellationToken,
}

impl Scheduler {
    pub fn new(
        store: Store,
        inventory: Arc<Inventory>,
        metrics: Arc<Metrics>,
        trial_attempts: u32,
        host_wait: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let hub = EventHub::new(store.clone());
        Scheduler {
            ctx: Arc::new(Ctx {
                store,
                inventory,
                hub,
                metrics,
                trial_attempts,
                host_wait,
            }),
            running: Arc::new(Mutex::new(HashMap::new())),
            shutdown,
        }
    }

    pub fn store(&self) -> &Store {
        &self.ctx.store
    }

    pub fn hub(&self) -> &EventHub {
        &self.ctx.hub
    }

    /// The controller's metrics (suite verdicts recorded through the API are exported here).
    pub fn metrics(&self) -> &Metrics {
        &self.ctx.metrics
    }

    /// Validates a spec and, unless `dry_run` or invalid, stores and starts the job.
    /// `kind` says what submitted it; [`JobKind::Unspecified`] (an older client) is a sweep.
    pub async fn submit(
        &self,
        spec_toml: &str,
        file_name: &str,
        dry_run: bool,
        tag: &str,
        kind: JobKind,
    ) -> Result<SubmitJobResponse, SchedulerError> {
        let kind = match kind {
            JobKind::Unspecified => JobKind::Sweep,
            k => k,
        };
        let file_name = if file_name.is_empty() {
            "job.toml"
        } else {
            file_name
        };
        let parsed = match spec::parse(file_name, spec_toml) {
            Ok(s) => s,
            Err(errors) => {
                return Ok(SubmitJobResponse {
                    errors: errors
                        .into_iter()
                        .map(|e| PbSpecError {
                            file: e.file,
                            line: e.line,
                            field: e.field,
                            message: e.message,
                        })
                        .collect(),
                    ..Default::default()
                });
            }
        };
        let id = uuid::Uuid::now_v7().simple().to_string();
        let (configs, trials) = plan(&id, &parsed);
        let trial_count = trials.len() as u32;
        if dry_run {
            return Ok(SubmitJobResponse {
                job_id: String::new(),
                errors: Vec::new(),
                trial_count,
            });
        }
        let job = NewJob {
            id: id.clone(),
            name: parsed.name.clone(),
            kind,
            spec_toml: spec_toml.to_string(),
            file_name: file_name.to_string(),
            tag: tag.to_string(),
            created_unix_ms: now_unix_ms(),
        };
        self.ctx.store.insert_job(&job, &configs, &trials).await?;
        self.ctx.metrics.job_submitted(kind_name(kind));
        tracing::info!(job = %id, name = %parsed.name, trials = trial_count, "job submitted");
        self.start(&id);
        Ok(SubmitJobResponse {
            job_id: id,
            errors: Vec::new(),
            trial_count,
        })
    }

    fn start(&self, job_id: &str) {
        let token = self.shutdown.child_token();
        self.running
            .lock()
            .expect("running jobs lock")
            .insert(job_id.to_string(), token.clone());
        let ctx = self.ctx.clone();
        let running = self.running.clone();
        let job_id = job_id.to_string();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            job::run_job(ctx, &job_id, token, shutdown).await;
            running.lock().expect("running jobs lock").remove(&job_id);
        });
    }

    /// Starts every job the store says is queued or running (after a restart).
    pub async fn resume_all(&self) -> Result<usize, SchedulerError> {
        let ids = self.ctx.store.unfinished_jobs().await?;
        for id in &ids {
            tracing::info!(job = %id, "resuming job after restart");
            self.start(id);
        }
        Ok(ids.len())
    }

    /// Ends every unfinished job in the store as failed (a controller that does not resume).
    pub async fn abandon_all(&self) -> Result<usize, SchedulerError> {
        let ids = self.ctx.store.unfinished_jobs().await?;
        for id in &ids {
            self.ctx
                .store
                .finish_job(
                    id,
                    controllerpb::JobState::Failed,
                    "interrupted: its controller exited before the job ended",
                    now_unix_ms(),
                )
                .await?;
        }
        Ok(0)
    }

    /// Cancels a job: its trials stop, their engines are stopped, the job ends `cancelled`.
    /// Returns once the job has ended.
    pub async fn cancel(&self, job_id: &str) -> Result<controllerpb::Job, SchedulerError> {
        let token = self
            .running
            .lock()
            .expect("running jobs lock")
            .get(job_id)
            .cloned();
        if let Some(token) = token {
            let mut rx = self.ctx.hub.subscribe(job_id);
            token.cancel();
            // Wait for the job loop to record the end (bounded: engines stop within their grace).
            let wait = async {
                while self
                    .running
                    .lock()
                    .expect("running jobs lock")
                    .contains_key(job_id)
                {
                    let _ = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(60), wait).await;
        }
        self.ctx
            .store
            .get_job(job_id)
            .await?
            .ok_or_else(|| SchedulerError::NoSuchJob(job_id.to_string()))
    }
}

/// A job kind as a word (`sweep`, `tune`, `regress`): metrics labels, CLI output, filters.
pub fn kind_name(kind: JobKind) -> &'static str {
    match kind {
        JobKind::Unspecified | JobKind::Sweep => "sweep",
        JobKind::Tune => "tune",
        JobKind::Regress => "regress",
    }
}

/// Configs and trials of a new job, from its validated spec.
fn plan(job_id: &str, s: &spec::JobSpec) -> (Vec<ConfigInfo>, Vec<TrialRow>) {
    let configs: Vec<ConfigInfo> = s
        .configs
        .iter()
        .enumerate()
        .map(|(i, c)| ConfigInfo {
            config_id: c.config_id.clone(),
            name: c.name.clone(),
            spec: Some(s.engine_spec(i)),
            kind: s.engine_kind_pb(i) as i32,
            job_id: job_id.to_string(),
        })
        .collect();
    let level_count = s.level_count() as u32;
    let trials = s
        .expand_trials_seeded(s.order_seed(job_id))
        .into_iter()
        .enumerate()
        .map(|(pos, t)| TrialRow {
            id: format!("{job_id}-t{pos:03}"),
            job_id: job_id.to_string(),
            position: pos as u32,
            config_index: t.config as u32,
            workload_index: t.workload as u32,
            repeat: t.repeat,
            config_id: s.configs[t.config].config_id.clone(),
            config_name: s.configs[t.config].name.clone(),
            workload: s.workloads[t.workload].name.clone(),
            level_count,
            state: TrialState::Pending,
            attempts: 0,
            reason: String::new(),
        })
        .collect();
    (configs, trials)
}
