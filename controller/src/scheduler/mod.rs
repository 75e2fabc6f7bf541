//! The scheduler: turns a submitted spec into stored trials, runs each job's trials on every
//! matching host in parallel (one engine per host at a time), and picks unfinished jobs up
//! again after a restart.
//!
//! - [`job`]: one job's loop (hand out trials to free hosts, retry lost ones, cancel, finish).
//! - [`trial`]: one trial attempt on one host (apply engine, benchmark, store each level).
//! - [`telemetry`]: the agent's metrics stream during a trial, downsampled into the store.

mod endpoint;
mod job;
mod lease;
mod telemetry;
mod telemetry_writer;
mod trial;

use fleetbench_proto::Word;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbench_proto::controllerpb::{
    self, ConfigInfo, JobKind, SpecError as PbSpecError, SubmitJobResponse, TrialState,
};
use fleetbench_proto::now_unix_ms;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents::Inventory;
use crate::events::EventHub;
use crate::metrics::Metrics;
use crate::store::{NewJob, Store, StoreError, TrialRow};
use fleetbench_spec as spec;
use telemetry_writer::TelemetryWriter;

/// The agent lease TTL unless configured (`lease_ttl`).
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// Everything a running job needs.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub store: Store,
    pub inventory: Arc<Inventory>,
    pub hub: EventHub,
    pub metrics: Arc<Metrics>,
    pub trial_attempts: u32,
    pub host_wait: Duration,
    pub telemetry_interval: Duration,
    pub(crate) telemetry: TelemetryWriter,
    /// TTL of the agent lease each trial attempt holds on its host.
    pub lease_ttl: Duration,
    /// The external endpoints trials are loading: one trial at a time each.
    pub(crate) endpoints: endpoint::Endpoints,
    /// Set when this controller lost its leadership: its trials stop without touching the
    /// agents (their engines are the new leader's now).
    deposed: AtomicBool,
}

impl Ctx {
    pub(crate) fn is_deposed(&self) -> bool {
        self.deposed.load(Ordering::SeqCst)
    }

    /// A fenced write proved another controller leads: from now on no trial of this one
    /// calls an agent on its way out.
    pub(crate) fn mark_deposed(&self) {
        self.deposed.store(true, Ordering::SeqCst);
    }
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
    /// This controller does not lead (a standby, or between two terms).
    #[error("this controller does not lead: it runs no jobs")]
    NotLeading,
}

/// How long stopping (shutdown or a lost leadership) waits for job tasks to end. Trials stop
/// their engines when cancelled (60 s bound per agent call); a job still running then is
/// abandoned to the next start, which resumes it.
pub const STOP_WAIT: Duration = Duration::from_secs(75);

/// Submits, runs, cancels and resumes jobs.
#[derive(Debug, Clone)]
pub struct Scheduler {
    ctx: Arc<Ctx>,
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    /// The current leadership term's token (a child of the shutdown token), parent of every job's
    /// token; `None` while this controller does not lead. Jobs of an ended term stay
    /// `running` in the store and are resumed by the next leader.
    term: Arc<Mutex<Option<CancellationToken>>>,
    /// Every job task, awaited (with a bound) when a term ends, so the store never closes
    /// under a writer.
    tasks: TaskTracker,
}

impl Scheduler {
    pub fn new(
        store: Store,
        inventory: Arc<Inventory>,
        metrics: Arc<Metrics>,
        trial_attempts: u32,
        host_wait: Duration,
        telemetry_interval: Duration,
        shutdown: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let hub = EventHub::new(store.clone());
        let (telemetry, writer) =
            TelemetryWriter::start(store.clone(), metrics.clone(), shutdown.clone());
        let scheduler = Scheduler {
            ctx: Arc::new(Ctx {
                store,
                inventory,
                hub,
                metrics,
                trial_attempts,
                host_wait,
                deposed: AtomicBool::new(false),
                lease_ttl: DEFAULT_LEASE_TTL,
                endpoints: Default::default(),
                telemetry_interval,
                telemetry,
            }),
            running: Arc::new(Mutex::new(HashMap::new())),
            term: Arc::new(Mutex::new(None)),
            tasks: TaskTracker::new(),
        };
        (scheduler, writer)
    }

    /// Starts leading under `token` (a child of the shutdown token, cancelled when the term
    /// ends): jobs may run from now on (the caller resumes the unfinished ones).
    pub fn begin_term(&self, token: CancellationToken) {
        self.ctx.deposed.store(false, Ordering::SeqCst);
        self.tasks.reopen();
        *self.term.lock().expect("term lock") = Some(token);
    }

    /// Stops leading: every job stops (`deposed`: without a word to the agents, whose engines
    /// another leader runs now) and is awaited up to `wait`. Jobs stay `running` in the store.
    /// Returns whether every job task ended in time.
    pub async fn end_term(&self, deposed: bool, wait: Duration) -> bool {
        if deposed {
            self.ctx.deposed.store(true, Ordering::SeqCst);
        }
        if let Some(t) = self.term.lock().expect("term lock").take() {
            t.cancel();
        }
        self.tasks.close();
        let ended = tokio::time::timeout(wait, self.tasks.wait()).await.is_ok();
        if !ended {
            tracing::warn!(
                jobs = self.tasks.len(),
                ?wait,
                "job tasks still running after the stop bound; leaving them"
            );
        }
        ended
    }

    /// Whether this controller leads now.
    pub fn leading(&self) -> bool {
        self.term.lock().expect("term lock").is_some()
    }

    /// Sets the agent lease TTL (before any job runs; the default is 15 s).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.lease_ttl = ttl,
            None => tracing::warn!("lease TTL set after jobs started: ignored"),
        }
        self
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
        if !self.leading() {
            return Err(SchedulerError::NotLeading);
        }
        self.ctx.store.insert_job(&job, &configs, &trials).await?;
        self.ctx.metrics.job_submitted(&kind.word());
        tracing::info!(job = %id, name = %parsed.name, trials = trial_count, "job submitted");
        self.start(&id)?;
        Ok(SubmitJobResponse {
            job_id: id,
            errors: Vec::new(),
            trial_count,
        })
    }

    fn start(&self, job_id: &str) -> Result<(), SchedulerError> {
        let term = self
            .term
            .lock()
            .expect("term lock")
            .clone()
            .ok_or(SchedulerError::NotLeading)?;
        let token = term.child_token();
        self.running
            .lock()
            .expect("running jobs lock")
            .insert(job_id.to_string(), token.clone());
        let ctx = self.ctx.clone();
        let running = self.running.clone();
        let job_id = job_id.to_string();
        self.tasks.spawn(async move {
            job::run_job(ctx, &job_id, token, term).await;
            running.lock().expect("running jobs lock").remove(&job_id);
        });
        Ok(())
    }

    /// Starts every job the store says is queued or running (after a restart or a takeover).
    pub async fn resume_all(&self) -> Result<usize, SchedulerError> {
        let ids = self.ctx.store.unfinished_jobs().await?;
        for id in &ids {
            if self
                .running
                .lock()
                .expect("running jobs lock")
                .contains_key(id)
            {
                continue;
            }
            tracing::info!(job = %id, "resuming job");
            self.start(id)?;
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
