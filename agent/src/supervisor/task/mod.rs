//! The supervisor task: the only owner of the engine's child process.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fleetbench_engines::crash::{ExitInfo, classify};
use fleetbench_gpu::Gpus;
use fleetbench_proto::agentpb::{
    self, EngineEvent, EngineState, LogFact, Spawned, Stopped, Stopping, engine_event::Event,
};
use fleetbench_proto::now_unix_ms;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::group::{GroupTracker, stop_sequence};
use super::logs::LogHub;
use super::release::{GpuBaseline, wait_gpu_free, wait_port_free};
use super::spawn::{SpawnError, Started, spawn};
use super::{Command, Snapshot, SupervisorConfig};
use crate::http::HttpClient;
use crate::profile::LaunchPlan;

mod end;
mod events;
mod readiness;

use events::send;

use readiness::probe_after;

/// How often readiness is probed while starting (bounds the delay between an engine's
/// readiness and the agent reporting it).
const START_PROBE_EVERY: Duration = Duration::from_millis(200);
/// How often a ready engine's health is checked.
const HEALTH_PROBE_EVERY: Duration = Duration::from_secs(2);
const START_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Consecutive failed health checks before a ready engine counts as unhealthy.
const UNHEALTHY_AFTER: u32 = 3;
/// Interval of "still waiting" events while starting.
const WAITING_EVERY: Duration = Duration::from_secs(5);
/// Lines of log given with a crash.
const CRASH_TAIL: usize = 60;
/// After SIGKILL, how long the group may take to disappear.
const KILL_WAIT: Duration = Duration::from_secs(10);

type ProbeFuture = Pin<Box<dyn Future<Output = Result<u16, String>> + Send>>;

enum Phase {
    Starting {
        next_waiting: Instant,
        last_error: String,
    },
    Ready {
        failures: u32,
    },
}

struct Engine {
    child: tokio::process::Child,
    tracker: GroupTracker,
    /// NVML's processes just before the spawn: what the release check leaves out.
    gpu_before: GpuBaseline,
    plan: Arc<LaunchPlan>,
    run_id: String,
    pid: u32,
    spawned_at: Instant,
    phase: Phase,
    facts: Vec<LogFact>,
    facts_rx: mpsc::UnboundedReceiver<LogFact>,
    facts_open: bool,
    output_done: tokio::task::JoinHandle<()>,
    probe: ProbeFuture,
    span: tracing::Span,
    /// Members that left the group, as last written to the leftover note.
    noted_strays: Vec<(i32, u64)>,
    /// The kernel's OOM kills in our memory cgroup at the spawn, if countable: a SIGKILL with
    /// the count risen since is the kernel's, otherwise someone else's.
    oom_kills_at_spawn: Option<u64>,
}

pub(super) struct Task {
    cfg: SupervisorConfig,
    rx: mpsc::Receiver<Command>,
    state: watch::Sender<Snapshot>,
    logs: LogHub,
    gpus: Gpus,
    http: HttpClient,
    engine: Option<Engine>,
    /// Events of the apply in flight (until ready or failed).
    apply_events: Option<mpsc::Sender<EngineEvent>>,
    /// A command taken off the channel early (a newer apply that superseded one in flight).
    pending: Option<Command>,
    generation: u64,
    /// The live lease's epoch (0: none).
    lease: watch::Receiver<u64>,
}

impl Task {
    pub(super) fn new(
        cfg: SupervisorConfig,
        rx: mpsc::Receiver<Command>,
        state: watch::Sender<Snapshot>,
        logs: LogHub,
        gpus: Gpus,
        http: HttpClient,
        lease: watch::Receiver<u64>,
    ) -> Task {
        Task {
            cfg,
            rx,
            state,
            logs,
            gpus,
            http,
            engine: None,
            apply_events: None,
            pending: None,
            generation: 0,
            lease,
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            let cmd = if let Some(c) = self.pending.take() {
                c
            } else {
                #[allow(clippy::large_enum_variant)]
                enum Wake {
                    Cmd(Option<Command>),
                    Exited(std::io::Result<std::process::ExitStatus>),
                    Fact(Option<LogFact>),
                    Probe(Result<u16, String>),
                }
                let wake = match &mut self.engine {
                    None => Wake::Cmd(self.rx.recv().await),
                    Some(e) => tokio::select! {
                        c = self.rx.recv() => Wake::Cmd(c),
                        s = e.child.wait() => Wake::Exited(s),
                        f = e.facts_rx.recv(), if e.facts_open => Wake::Fact(f),
                        p = &mut e.probe => Wake::Probe(p),
                    },
                };
                match wake {
                    Wake::Cmd(Some(c)) => c,
                    Wake::Cmd(None) => {
                        // Every handle dropped: stop the engine, leave nothing behind.
                        self.stop_engine("agent shutting down").await;
                        return;
                    }
                    Wake::Exited(status) => {
                        self.on_exit(status).await;
                        continue;
                    }
                    Wake::Fact(Some(f)) => {
                        self.on_fact(f).await;
                        continue;
                    }
                    Wake::Fact(None) => {
                        if let Some(e) = &mut self.engine {
                            e.facts_open = false;
                        }
                        continue;
                    }
                    Wake::Probe(r) => {
                        self.on_probe(r).await;
                        continue;
                    }
                }
            };
            match cmd {
                Command::Apply {
                    plan,
                    run_id,
                    epoch,
                    events,
                    span,
                } => self.apply(*plan, run_id, epoch, events, span).await,
                Command::Stop { reason, reply } => {
                    if self.stop_engine(&reason).await.is_none()
                        && self.state.borrow().state == EngineState::Failed
                    {
                        // Nothing runs after a crash; the crash stays readable in last_crash.
                        self.publish(|s| {
                            s.state = EngineState::Idle;
                            s.since_unix_ms = now_unix_ms();
                        });
                    }
                    let _ = reply.send(self.state.borrow().to_status());
                }
                Command::Shutdown { reply } => {
                    self.stop_engine("agent shutting down").await;
                    let _ = reply.send(());
                    return;
                }
            }
        }
    }

    fn publish(&self, f: impl FnOnce(&mut Snapshot)) {
        self.state.send_modify(f);
    }

    /// Whether an apply checked under `epoch` lost its lease since (then it starts nothing and
    /// its stream ends with a Stopping event that says so).
    fn fenced(&self, epoch: u64, events: &Option<mpsc::Sender<EngineEvent>>) -> bool {
        let live = *self.lease.borrow();
        if live == epoch {
            return false;
        }
        let reason = if epoch == 0 {
            format!("a lease (epoch {live}) was acquired before the engine started")
        } else {
            format!("fenced: lease epoch {epoch} ended before the engine started")
        };
        tracing::warn!(epoch, live, "{reason}");
        send(events, Event::Stopping(Stopping { pid: 0, reason }));
        true
    }

    async fn apply(
        &mut self,
        plan: LaunchPlan,
        run_id: String,
        epoch: u64,
        events: mpsc::Sender<EngineEvent>,
        parent: tracing::Span,
    ) {
        let events = Some(events);
        if self.fenced(epoch, &events) {
            return;
        }
        let span = tracing::info_span!(
            parent: &parent,
            "engine.apply",
            fleetbench.config.id = %plan.config_id,
            fleetbench.engine.kind = %plan.kind,
            gen_ai.request.model = %plan.spec.model,
            fleetbench.run.id = %run_id,
            fleetbench.engine.profile = %plan.profile,
        );
        if let Some(prev) = self.apply_events.take() {
            send(
                &Some(prev),
                Event::Stopping(Stopping {
                    pid: 0,
                    reason: "superseded by another ApplyEngine".into(),
                }),
            );
        }
        if let Some(e) = &self.engine {
            let pid = e.pid;
            send(
                &events,
                Event::Stopping(Stopping {
                    pid,
                    reason: "replaced by ApplyEngine".into(),
                }),
            );
            let stopped = self
                .stop_engine("replaced by ApplyEngine")
                .instrument(span.clone())
                .await;
            if let Some(s) = stopped {
                send(&events, Event::Stopped(s));
            }
        }
        // A newer command that arrived while the old engine was stopping wins over this one.
        if let Ok(next) = self.rx.try_recv() {
            let reason = match &next {
                Command::Apply { .. } => "superseded by another ApplyEngine",
                Command::Stop { .. } => "cancelled by StopEngine",
                Command::Shutdown { .. } => "agent shutting down",
            };
            send(
                &events,
                Event::Stopping(Stopping {
                    pid: 0,
                    reason: reason.into(),
                }),
            );
            self.pending = Some(next);
            return;
        }

        let plan = Arc::new(plan);
        if let Err(msg) = wait_port_free(&plan.host, plan.port, self.cfg.release_timeout).await {
            let crash = self.classify_now(
                &plan,
                &run_id,
                ExitInfo {
                    port_in_use_before_start: true,
                    ..Default::default()
                },
                msg,
            );
            self.fail_before_spawn(plan, run_id, crash, &events, &span)
                .await;
            return;
        }
        let gpu_before = GpuBaseline::measure(&self.gpus).await;
        if self.fenced(epoch, &events) {
            return;
        }
        let started = match spawn(&plan, &run_id, &self.cfg.data_dir, &self.logs) {
            Ok(s) => s,
            Err(e) => {
                let crash = match &e {
                    SpawnError::RunLog { .. } | SpawnError::Scratch { .. } => agentpb::Crash {
                        class: agentpb::CrashClass::HostFault as i32,
                        message: e.to_string(),
                        summary: format!(
                            "host fault: {e} (the agent's data directory is read-only or \
                             full); the engine was not started"
                        ),
                        ..Default::default()
                    },
                    SpawnError::Exec { .. } => agentpb::Crash {
                        class: agentpb::CrashClass::ExitCode as i32,
                        message: e.to_string(),
                        summary: e.to_string(),
                        ..Default::default()
                    },
                };
                self.fail_before_spawn(plan, run_id, crash, &events, &span)
                    .await;
                return;
            }
        };
        let Started {
            child,
            pid,
            facts,
            output_done,
            log_path,
        } = started;
        span.in_scope(|| tracing::info!(pid, argv = ?plan.argv, "spawned"));
        super::leftover::record(&self.cfg.data_dir, pid);
        self.generation += 1;
        let generation = self.generation;
        let log_path_s = log_path.to_string_lossy().into_owned();
        self.publish(|s| {
            *s = Snapshot {
                state: EngineState::Starting,
                generation,
                plan: Some(plan.clone()),
                run_id: run_id.clone(),
                pid: Some(pid),
                since_unix_ms: now_unix_ms(),
                facts: Vec::new(),
                last_crash: None,
                log_path: log_path_s.clone(),
            }
        });
        send(
            &events,
            Event::Spawned(Spawned {
                pid,
                argv: plan.argv.clone(),
                run_id: run_id.clone(),
                config_id: plan.config_id.clone(),
                log_path: log_path_s,
            }),
        );
        let now = Instant::now();
        self.engine = Some(Engine {
            child,
            tracker: GroupTracker::new(pid as i32),
            gpu_before,
            probe: probe_after(
                &self.http,
                &plan.health_url,
                Duration::ZERO,
                START_PROBE_TIMEOUT,
            ),
            plan,
            run_id,
            pid,
            spawned_at: now,
            phase: Phase::Starting {
                next_waiting: now + WAITING_EVERY,
                last_error: "not probed yet".into(),
            },
            facts: Vec::new(),
            facts_rx: facts,
            facts_open: true,
            output_done,
            span,
            noted_strays: Vec::new(),
            oom_kills_at_spawn: super::oom::kills(),
        });
        self.apply_events = events;
    }

    async fn fail_before_spawn(
        &mut self,
        plan: Arc<LaunchPlan>,
        run_id: String,
        crash: agentpb::Crash,
        events: &Option<mpsc::Sender<EngineEvent>>,
        span: &tracing::Span,
    ) {
        span.in_scope(
            || tracing::warn!(class = crash.class, summary = %crash.summary, "apply failed"),
        );
        self.publish(|s| {
            s.state = EngineState::Failed;
            s.plan = Some(plan);
            s.run_id = run_id;
            s.pid = None;
            s.since_unix_ms = now_unix_ms();
            s.last_crash = Some(crash.clone());
        });
        send(events, Event::Failed(crash));
    }

    async fn on_fact(&mut self, fact: LogFact) {
        let Some(e) = &mut self.engine else { return };
        e.span
            .in_scope(|| tracing::debug!(key = %fact.key, value = %fact.value, "log fact"));
        match e.facts.iter_mut().find(|f| f.key == fact.key) {
            Some(f) => f.value = fact.value.clone(),
            None => e.facts.push(fact.clone()),
        }
        let facts = e.facts.clone();
        self.publish(|s| s.facts = facts);
        send(&self.apply_events, Event::Fact(fact));
    }
}
