//! The supervisor: ONE task owns the engine's process group. Commands come in on an mpsc
//! channel; the engine's state goes out on a `watch` (read by `GetEngine`, `RunBenchmark`,
//! `StreamMetrics`); each apply gets its own stream of lifecycle events.

pub mod group;
pub mod leftover;
pub mod logs;
pub(crate) mod oom;
mod release;
pub(crate) mod spawn;
mod task;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fleetbench_gpu::Gpus;
use fleetbench_proto::agentpb::{self, EngineEvent, EngineState, EngineStatus, LogFact};
use tokio::sync::{mpsc, oneshot, watch};

pub use logs::LogHub;

use crate::http::HttpClient;
use crate::profile::LaunchPlan;

/// Events buffered for one ApplyEngine stream. The supervisor never waits on a reader: past
/// this many unread events, progress events are dropped (and counted), see `task::send`.
pub(crate) const EVENT_BUFFER: usize = 256;

/// The engine as last published by the supervisor.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub state: EngineState,
    /// Increases with every spawn: a reader can tell "the engine I benchmarked died" from "a
    /// different engine runs now".
    pub generation: u64,
    pub plan: Option<Arc<LaunchPlan>>,
    pub run_id: String,
    /// The engine's direct child (and process group id).
    pub pid: Option<u32>,
    pub since_unix_ms: i64,
    pub facts: Vec<LogFact>,
    pub last_crash: Option<agentpb::Crash>,
    pub log_path: String,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            state: EngineState::Idle,
            generation: 0,
            plan: None,
            run_id: String::new(),
            pid: None,
            since_unix_ms: fleetbench_proto::now_unix_ms(),
            facts: Vec::new(),
            last_crash: None,
            log_path: String::new(),
        }
    }
}

impl Snapshot {
    pub fn to_status(&self) -> EngineStatus {
        EngineStatus {
            // The lease is the service's to add (see `crate::lease`).
            lease: None,
            lease_note: String::new(),
            state: self.state as i32,
            spec: self.plan.as_ref().map(|p| p.spec.clone()),
            config_id: self
                .plan
                .as_ref()
                .map(|p| p.config_id.clone())
                .unwrap_or_default(),
            run_id: self.run_id.clone(),
            pid: self.pid.unwrap_or(0),
            base_url: self
                .plan
                .as_ref()
                .map(|p| p.base_url.clone())
                .unwrap_or_default(),
            since_unix_ms: self.since_unix_ms,
            facts: self.facts.clone(),
            last_crash: self.last_crash.clone(),
            log_path: self.log_path.clone(),
            argv: self
                .plan
                .as_ref()
                .map(|p| p.argv.clone())
                .unwrap_or_default(),
        }
    }
}

pub(crate) enum Command {
    Apply {
        plan: Box<LaunchPlan>,
        run_id: String,
        /// The lease epoch the apply was checked under (0: none): the engine starts only if it
        /// still holds when the supervisor gets to it.
        epoch: u64,
        events: mpsc::Sender<EngineEvent>,
        /// The request's span: the supervisor's `engine.apply` span is its child, so it sits
        /// in the caller's trace.
        span: tracing::Span,
    },
    Stop {
        reason: String,
        reply: oneshot::Sender<EngineStatus>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// What the supervisor task needs besides its channels.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    pub data_dir: PathBuf,
    pub release_timeout: Duration,
    pub log_ring_lines: usize,
}

/// Handle to the supervisor task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Supervisor {
    tx: mpsc::Sender<Command>,
    state: watch::Receiver<Snapshot>,
    pub logs: LogHub,
}

/// The supervisor task has ended (the agent is shutting down).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the engine supervisor has shut down")]
pub struct SupervisorGone;

impl Supervisor {
    /// Starts the supervisor task.
    /// `lease` is the live lease's epoch (0: none), see [`crate::lease`].
    pub fn start(
        cfg: SupervisorConfig,
        gpus: Gpus,
        http: HttpClient,
        lease: watch::Receiver<u64>,
    ) -> Supervisor {
        let (tx, rx) = mpsc::channel(16);
        let (state_tx, state) = watch::channel(Snapshot::default());
        let logs = LogHub::new(cfg.log_ring_lines);
        tokio::spawn(task::Task::new(cfg, rx, state_tx, logs.clone(), gpus, http, lease).run());
        Supervisor { tx, state, logs }
    }

    /// Stops what runs and starts `plan`; lifecycle events stream on the returned receiver,
    /// which closes when the engine is ready, has failed, or this apply was superseded.
    /// `epoch` is the caller's lease epoch (0: none), already checked: the engine starts only
    /// if it still holds when the supervisor gets to the command.
    pub async fn apply(
        &self,
        plan: LaunchPlan,
        run_id: String,
        epoch: u64,
    ) -> Result<mpsc::Receiver<EngineEvent>, SupervisorGone> {
        let (events, rx) = mpsc::channel(EVENT_BUFFER);
        self.tx
            .send(Command::Apply {
                plan: Box::new(plan),
                run_id,
                epoch,
                events,
                span: tracing::Span::current(),
            })
            .await
            .map_err(|_| SupervisorGone)?;
        Ok(rx)
    }

    /// Stops the engine and waits until its processes, port and GPU memory are released.
    pub async fn stop(&self, reason: &str) -> Result<EngineStatus, SupervisorGone> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Stop {
                reason: reason.into(),
                reply,
            })
            .await
            .map_err(|_| SupervisorGone)?;
        rx.await.map_err(|_| SupervisorGone)
    }

    /// Stops the engine and ends the task.
    pub async fn shutdown(&self) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Command::Shutdown { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        self.state.borrow().clone()
    }

    pub fn watch(&self) -> watch::Receiver<Snapshot> {
        self.state.clone()
    }
}
