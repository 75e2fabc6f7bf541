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
use super::spawn::{Started, spawn};
use super::{Command, Snapshot, SupervisorConfig};
use crate::http::HttpClient;
use crate::profile::LaunchPlan;

mod readiness;

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
}

fn event(e: Event) -> EngineEvent {
    EngineEvent {
        unix_ms: now_unix_ms(),
        event: Some(e),
    }
}

async fn send(events: &Option<mpsc::Sender<EngineEvent>>, e: Event) {
    if let Some(tx) = events {
        // A caller that went away does not stop the engine.
        let _ = tx.send(event(e)).await;
    }
}

impl Task {
    pub(super) fn new(
        cfg: SupervisorConfig,
        rx: mpsc::Receiver<Command>,
        state: watch::Sender<Snapshot>,
        logs: LogHub,
        gpus: Gpus,
        http: HttpClient,
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
                    events,
                    span,
                } => self.apply(*plan, run_id, events, span).await,
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

    async fn apply(
        &mut self,
        plan: LaunchPlan,
        run_id: String,
        events: mpsc::Sender<EngineEvent>,
        parent: tracing::Span,
    ) {
        let events = Some(events);
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
            let _ = prev
                .send(event(Event::Stopping(Stopping {
                    pid: 0,
                    reason: "superseded by another ApplyEngine".into(),
                })))
                .await;
        }
        if let Some(e) = &self.engine {
            let pid = e.pid;
            send(
                &events,
                Event::Stopping(Stopping {
                    pid,
                    reason: "replaced by ApplyEngine".into(),
                }),
            )
            .await;
            let stopped = self
                .stop_engine("replaced by ApplyEngine")
                .instrument(span.clone())
                .await;
            if let Some(s) = stopped {
                send(&events, Event::Stopped(s)).await;
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
            )
            .await;
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
        let started = match spawn(&plan, &run_id, &self.cfg.data_dir, &self.logs) {
            Ok(s) => s,
            Err(e) => {
                let crash = agentpb::Crash {
                    class: agentpb::CrashClass::ExitCode as i32,
                    message: e.to_string(),
                    summary: format!("could not start {}: {e}", plan.argv[0]),
                    ..Default::default()
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
        )
        .await;
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
        send(events, Event::Failed(crash)).await;
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
        send(&self.apply_events, Event::Fact(fact)).await;
    }

    /// The engine's child exited on its own.
    async fn on_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        let Some(e) = &mut self.engine else { return };
        use std::os::unix::process::ExitStatusExt;
        let (code, signal) = match &status {
            Ok(s) => (s.code(), s.signal()),
            Err(_) => (None, None),
        };
        // Let the output readers catch up so the crash carries the last lines (workers may
        // keep the pipes open: bounded wait).
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut e.output_done).await;
        while let Ok(f) = e.facts_rx.try_recv() {
            match e.facts.iter_mut().find(|x| x.key == f.key) {
                Some(x) => x.value = f.value,
                None => e.facts.push(f),
            }
        }
        let msg = match (code, signal) {
            (Some(c), _) => format!("engine exited with code {c}"),
            (_, Some(s)) => format!("engine killed by signal {s}"),
            _ => "engine exited".to_string(),
        };
        self.fail_running(
            ExitInfo {
                code,
                signal,
                ..Default::default()
            },
            msg,
        )
        .await;
    }

    fn classify_now(
        &self,
        plan: &LaunchPlan,
        run_id: &str,
        info: ExitInfo,
        note: String,
    ) -> agentpb::Crash {
        let tail = self.logs.tail_text(run_id, CRASH_TAIL);
        let c = classify(plan.kind, &info, &tail);
        let mut crash = crate::convert::crash_to_proto(c, tail, info.code, info.signal);
        if crash.summary.is_empty() {
            crash.summary = note.clone();
        }
        if crash.message.is_empty() {
            crash.message = note;
        }
        crash
    }

    /// Publishes a classified failure of the running engine, then stops what is left of it.
    async fn fail_running(&mut self, info: ExitInfo, note: String) {
        let Some(e) = &self.engine else { return };
        let crash = self.classify_now(&e.plan, &e.run_id, info, note);
        let facts = e.facts.clone();
        e.span.in_scope(|| {
            tracing::warn!(class = crash.class().as_str_name(), exception_type = %crash.exception_type, summary = %crash.summary, "engine failed")
        });
        // Published before the cleanup so a running benchmark learns of it at once.
        self.publish(|s| {
            s.state = EngineState::Failed;
            s.since_unix_ms = now_unix_ms();
            s.facts = facts;
            s.last_crash = Some(crash.clone());
        });
        let events = self.apply_events.take();
        send(&events, Event::Failed(crash)).await;
        self.release().await;
    }

    /// Stops the engine, if any, and waits until it is released. Returns what happened.
    async fn stop_engine(&mut self, reason: &str) -> Option<Stopped> {
        let pid = self.engine.as_ref()?.pid;
        if let Some(ev) = self.apply_events.take() {
            let _ = ev
                .send(event(Event::Stopping(Stopping {
                    pid,
                    reason: reason.into(),
                })))
                .await;
        }
        self.publish(|s| {
            s.state = EngineState::Stopping;
            s.since_unix_ms = now_unix_ms();
        });
        let stopped = self.release().await;
        self.publish(|s| {
            s.state = EngineState::Idle;
            s.pid = None;
            s.since_unix_ms = now_unix_ms();
        });
        stopped
    }

    /// Signals the group (stop signal, grace, SIGKILL), reaps the child, and waits until no
    /// process of the run holds GPU memory. `Stopped.took_s` runs from the stop signal until
    /// that memory is free: the time the next engine has to wait, which is what a restart
    /// costs (on an H200 a CUDA server's memory can outlive its exit by a fraction of a second).
    async fn release(&mut self) -> Option<Stopped> {
        let mut e = self.engine.take()?;
        let span = tracing::info_span!(parent: &e.span, "engine.stop", pid = i64::from(e.pid), fleetbench.run.id = %e.run_id);
        let began = std::time::Instant::now();
        let outcome = async {
            let out = stop_sequence(
                &mut e.tracker,
                e.plan.stop_signal,
                e.plan.grace,
                KILL_WAIT,
                Duration::from_millis(50),
            )
            .await;
            let _ = tokio::time::timeout(Duration::from_secs(2), e.child.wait()).await;
            if out.gone {
                super::leftover::clear(&self.cfg.data_dir);
            }
            e.output_done.abort();
            let gpu_clear = wait_gpu_free(
                &self.gpus,
                &e.gpu_before,
                e.tracker.known_pids(),
                self.cfg.release_timeout,
            )
            .await;
            let took = began.elapsed();
            tracing::info!(
                killed = out.killed,
                gone = out.gone,
                gpu_clear,
                exit_s = out.took.as_secs_f64(),
                gpu_free_s = (took - out.took.min(took)).as_secs_f64(),
                took_s = took.as_secs_f64(),
                "stopped"
            );
            (out, took)
        }
        .instrument(span)
        .await;
        self.publish(|s| s.pid = None);
        let (outcome, took) = outcome;
        Some(Stopped {
            pid: e.pid,
            took_s: took.as_secs_f64(),
            killed: outcome.killed,
        })
    }
}
