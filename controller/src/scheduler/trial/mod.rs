//! One trial attempt on one host: take the agent's lease, start the engine (`ApplyEngine`,
//! events relayed), run the benchmark (`RunBenchmark`, each level stored the moment it arrives),
//! relay telemetry, re-apply the engine when a level crashed it and levels remain, and release
//! the lease (which stops the engine). Every call to the agent carries the lease's epoch; when
//! the lease ends (fenced off by another holder, or not renewed through a partition) the
//! attempt stops at once, the level in progress is not stored, and the trial runs again.

use fleetbench_proto::Word;
use std::collections::HashMap;

use fleetbench_proto::agentpb::{
    ApplyEngineRequest, BenchmarkEvent, Crash, EngineEvent, LevelOutcome, LevelResult,
    StopEngineRequest, benchmark_event, engine_event,
};
use fleetbench_proto::controllerpb::{
    HostEngineEvent, LevelProgress, Run, RunState, TrialEvent, TrialState, job_event,
};
use fleetbench_proto::now_unix_ms;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::lease::{AcquireError, AgentLease, LeaseEnd};
use super::{Ctx, telemetry};
use crate::agents::{AgentClient, Lease};
use crate::store::{StoreError, TrialRow};
use fleetbench_spec::JobSpec;

mod clients;
mod deployment;
mod gang;
mod levels;
mod members;
mod relays;

pub(crate) use clients::ClientHost;
/// The hosts `trial` holds at once for its engines: a gang's ranks or a deployment's router
/// and replicas (1: one host; a split level's client hosts are the load's, not counted here).
pub(crate) fn engine_hosts(spec: &JobSpec, trial: &TrialRow) -> usize {
    gang::nodes(spec, trial).max(deployment::hosts(spec, trial))
}

/// Whether `h` may join the hosts of `trial` after `taken`: a gang's rank 0 must offer a
/// rendezvous port, a deployment's router host the router's profile and its replicas' the
/// engine's.
pub(crate) fn group_fits(
    spec: &JobSpec,
    trial: &TrialRow,
    h: &crate::agents::HostSnapshot,
    taken: &[crate::agents::HostSnapshot],
) -> bool {
    if deployment::hosts(spec, trial) > 0 {
        return deployment::fits(spec, trial, h, taken);
    }
    gang::nodes(spec, trial) <= 1 || gang::fits(spec, trial, h, taken)
}

/// How a trial attempt ended.
#[derive(Debug)]
pub(crate) enum TrialOutcome {
    /// Every level is stored (crashed levels included: a crash is a result).
    Done,
    /// The engine could not start (classified); a result, not retried.
    EngineFailed(String),
    /// The host could not be used (unreachable before the attempt began, or its data
    /// directory read-only or full); the trial goes to another host as a new attempt.
    HostLost(String),
    /// The host was lost while this attempt ran on it (its agent died, or was cut off,
    /// mid-trial). The trial may be what killed it: it goes to one other host, and a trial
    /// that two hosts were lost running stops (see `job::settle`).
    DiedRunning(String),
    /// The agent's lease was fenced off (an operator took it) or held by another: the level in
    /// progress is not stored and the trial runs again, preferably on another host.
    Interrupted(String),
    Cancelled,
    Store(StoreError),
}

/// Why a step stopped early.
enum Stop {
    Lost(String),
    /// The host could not start the engine through no fault of the config (read-only or full
    /// data directory): not a result, and not the trial killing the host.
    HostFault(String),
    /// A call was refused under our lease epoch (ABORTED): another holder has the engine.
    Fenced(String),
    /// The engine was killed from outside fleetbench: the host answers and is not at fault,
    /// the config is not either; the level in progress is not stored and the trial runs again.
    Outside(String),
    Rejected(String),
    Cancelled,
    Store(StoreError),
}

impl Stop {
    /// The same stop, its message led by `who` (a gang's rank, a deployment's replica).
    fn prefixed(self, who: &str) -> Stop {
        match self {
            Stop::Lost(m) => Stop::Lost(format!("{who}: {m}")),
            Stop::HostFault(m) => Stop::HostFault(format!("{who}: {m}")),
            Stop::Fenced(m) => Stop::Fenced(format!("{who}: {m}")),
            Stop::Outside(m) => Stop::Outside(format!("{who}: {m}")),
            Stop::Rejected(m) => Stop::Rejected(format!("{who}: {m}")),
            s @ (Stop::Cancelled | Stop::Store(_)) => s,
        }
    }
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Store(e)
    }
}

/// A gRPC failure: the host is gone (retry elsewhere) or the agent refused the request
/// (retrying elsewhere would not help).
fn classify(what: &str, status: tonic::Status) -> Stop {
    use tonic::Code::*;
    let text = format!("{what}: {}: {}", status.code(), status.message());
    match status.code() {
        Aborted => Stop::Fenced(text),
        InvalidArgument | FailedPrecondition | NotFound | PermissionDenied | Unauthenticated
        | Unimplemented | OutOfRange | AlreadyExists => Stop::Rejected(text),
        _ => Stop::Lost(text),
    }
}

struct Attempt<'a> {
    ctx: &'a Ctx,
    spec: &'a JobSpec,
    trial: &'a TrialRow,
    host: String,
    client: AgentClient,
    run: Run,
    cancel: CancellationToken,
    /// The agent lease this attempt holds; every call carries its epoch.
    lease: &'a AgentLease,
    /// GPU power samples the telemetry relay keeps for this attempt's levels.
    power: telemetry::PowerLog,
    /// The same for each host of the attempt's group (`members`), in order; filled by
    /// `start_relays`.
    member_power: Vec<telemetry::PowerLog>,
    /// Hosts that drive a share of each level besides this one (`load.clients`); empty: this
    /// host drives it all.
    clients: &'a [ClientHost],
    /// The other ranks when this attempt is rank 0 of an engine spanning hosts (`gang`).
    gang: Option<&'a gang::Ranks>,
    /// The replicas when this attempt runs the router of a deployment (`deployment`).
    deployment: Option<&'a deployment::Replicas>,
}

/// Runs one attempt of `trial` on the hosts placed for it: one host, a gang's (rank order, see
/// `gang`), or one host and the client hosts of a split level (`load.clients`). Returns the
/// host to blame for the outcome with the outcome.
pub(crate) async fn run_placed(
    ctx: &Ctx,
    spec: &JobSpec,
    trial: &TrialRow,
    mut leases: Vec<Lease>,
    cancel: CancellationToken,
) -> (String, TrialOutcome) {
    if deployment::hosts(spec, trial) > 0 {
        return members::run_group(trial, leases, "deployment", async |l, id| {
            deployment::attempt(ctx, spec, trial, l, id, cancel).await
        })
        .await;
    }
    if gang::nodes(spec, trial) > 1 {
        return members::run_group(trial, leases, "gang", async |l, id| {
            gang::attempt(ctx, spec, trial, l, id, cancel).await
        })
        .await;
    }
    assert!(!leases.is_empty(), "a trial is placed on one host at least");
    let lease = leases.remove(0);
    let host = lease.host.clone();
    (
        host,
        run_trial(ctx, spec, trial, lease, leases, cancel).await,
    )
}

/// The run row of an attempt as it begins, on `host` under lease `epoch` (0: not held yet).
fn new_run(trial: &TrialRow, run_id: &str, host: &str, epoch: u64) -> Run {
    Run {
        run_id: run_id.to_string(),
        job_id: trial.job_id.clone(),
        trial_id: trial.id.clone(),
        host: host.to_string(),
        config_id: trial.config_id.clone(),
        config_name: trial.config_name.clone(),
        workload: trial.workload.clone(),
        repeat: trial.repeat,
        attempt: trial.attempts,
        state: RunState::Running as i32,
        started_unix_ms: now_unix_ms(),
        lease_epoch: epoch,
        ..Run::default()
    }
}

/// Runs one attempt of `trial` on the leased host; `extra`: the client hosts that drive a share
/// of each level with it (`load.clients`), held with it.
async fn run_trial(
    ctx: &Ctx,
    spec: &JobSpec,
    trial: &TrialRow,
    lease: Lease,
    extra: Vec<Lease>,
    cancel: CancellationToken,
) -> TrialOutcome {
    let run_id = format!("{}-a{}", trial.id, trial.attempts);
    let span = tracing::info_span!(
        "trial",
        fleetbench.host = %lease.host,
        fleetbench.config.id = %trial.config_id,
        fleetbench.config.name = %trial.config_name,
        fleetbench.workload = %trial.workload,
        fleetbench.repeat = i64::from(trial.repeat),
        fleetbench.attempt = i64::from(trial.attempts),
        fleetbench.run.id = %run_id,
    );
    let run = new_run(trial, &run_id, &lease.host, 0);
    let outcome = async {
        // A trial against an external endpoint waits until no other trial loads it.
        let _endpoint = match &spec.configs[trial.config_index as usize].target {
            Some(t) => match ctx.endpoints.hold(&t.origin(), &cancel).await {
                Some(hold) => Some(hold),
                None => return TrialOutcome::Cancelled,
            },
            None => None,
        };
        // A host leased by another holder (an operator) is waited for, every second, up to
        // host_wait: the trial keeps its place on the host and spends no attempt.
        let began = std::time::Instant::now();
        let agent_lease = loop {
            match AgentLease::acquire(&lease.client, &trial.job_id, &trial.id, ctx.lease_ttl).await
            {
                Ok(l) => break l,
                Err(AcquireError::Busy(e)) if began.elapsed() < ctx.host_wait => {
                    tracing::info!(host = %lease.host, "waiting for the host's lease: {e}");
                    tokio::select! {
                        _ = cancel.cancelled() => return TrialOutcome::Cancelled,
                        _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                    }
                }
                Err(AcquireError::Busy(e)) => {
                    return TrialOutcome::Interrupted(format!(
                        "host {} stayed leased by another holder for {}: {e}",
                        lease.host,
                        humantime::format_duration(ctx.host_wait)
                    ));
                }
                Err(AcquireError::Unreachable(e) | AcquireError::Refused(e)) => {
                    return TrialOutcome::HostLost(e);
                }
            }
        };
        let clients = match clients::lease_clients(ctx, trial, &extra).await {
            Ok(c) => c,
            Err(outcome) => {
                agent_lease.release().await;
                return outcome;
            }
        };
        let mut run = run;
        run.lease_epoch = agent_lease.epoch;
        // The run starts when its load can: after any wait for the endpoint or the lease.
        run.started_unix_ms = now_unix_ms();
        let mut a = Attempt {
            ctx,
            spec,
            trial,
            host: lease.host.clone(),
            client: lease.client.clone(),
            run,
            cancel,
            lease: &agent_lease,
            power: telemetry::PowerLog::with_interval(ctx.telemetry_interval),
            member_power: Vec::new(),
            clients: &clients,
            gang: None,
            deployment: None,
        };
        let outcome = a.attempt(&run_id).await;
        agent_lease.release().await;
        for c in clients {
            c.lease.release().await;
        }
        drop(extra);
        outcome
    }
    .instrument(span)
    .await;
    if let TrialOutcome::HostLost(reason) | TrialOutcome::DiedRunning(reason) = &outcome {
        lease.lost(reason);
    }
    outcome
}

impl Attempt<'_> {
    /// The attempt under its lease: runs the trial until done, or until the lease ends.
    async fn attempt(&mut self, run_id: &str) -> TrialOutcome {
        let (ctx, trial) = (self.ctx, self.trial);
        let a = self;
        if let Err(e) = ctx.store.put_run(&a.run).await {
            return TrialOutcome::Store(e);
        }
        let relays = a.start_relays(run_id);
        let lease = a.lease;
        let epoch = lease.epoch;
        // When the lease ends, the body (and its streams) is dropped where it stands: nothing
        // the host still reports under that epoch is read.
        let body = tokio::select! {
            r = a.body() => r,
            end = lease.ended() => Err(match end {
                LeaseEnd::Fenced(m) => Stop::Fenced(format!("lease epoch {epoch} fenced off: {m}")),
                LeaseEnd::Lost(m) => Stop::Lost(m),
            }),
        };
        let outcome = match body {
            Ok(()) => TrialOutcome::Done,
            Err(Stop::Lost(e)) => TrialOutcome::DiedRunning(e),
            Err(Stop::HostFault(e)) => TrialOutcome::HostLost(e),
            Err(Stop::Fenced(e) | Stop::Outside(e)) => TrialOutcome::Interrupted(e),
            Err(Stop::Rejected(e)) => TrialOutcome::EngineFailed(e),
            Err(Stop::Cancelled) => {
                // A deposed leader leaves the engine to the new one (which applies its own).
                if !ctx.is_deposed() && !a.external() {
                    a.stop_engine().await;
                }
                TrialOutcome::Cancelled
            }
            Err(Stop::Store(e)) => TrialOutcome::Store(e),
        };
        relays.stop(ctx).await;
        let (run_state, trial_state, reason) = match &outcome {
            TrialOutcome::Done => (RunState::Done, TrialState::Done, String::new()),
            TrialOutcome::EngineFailed(r) => {
                (RunState::EngineFailed, TrialState::EngineFailed, r.clone())
            }
            TrialOutcome::HostLost(r) | TrialOutcome::DiedRunning(r) => {
                (RunState::HostLost, TrialState::HostLost, r.clone())
            }
            TrialOutcome::Interrupted(r) => {
                (RunState::Interrupted, TrialState::Interrupted, r.clone())
            }
            TrialOutcome::Cancelled => (
                RunState::Cancelled,
                TrialState::Cancelled,
                "cancelled".into(),
            ),
            TrialOutcome::Store(e) => (RunState::HostLost, TrialState::HostLost, e.to_string()),
        };
        a.run.state = run_state as i32;
        a.run.reason = reason.clone();
        a.run.finished_unix_ms = now_unix_ms();
        if let Err(e) = ctx.store.put_run(&a.run).await {
            return TrialOutcome::Store(e);
        }
        ctx.metrics
            .trial_finished(&a.host, &trial.config_name, trial_state);
        if let Err(e) = a.trial_event(trial_state, &reason).await {
            return TrialOutcome::Store(e);
        }
        outcome
    }

    /// The config is an external target: no engine to start, stop or restart.
    fn external(&self) -> bool {
        self.spec.configs[self.trial.config_index as usize]
            .target
            .is_some()
    }
    async fn trial_event(&self, state: TrialState, reason: &str) -> Result<(), StoreError> {
        let t = self.trial;
        let ev = TrialEvent {
            trial_id: t.id.clone(),
            run_id: self.run.run_id.clone(),
            host: self.host.clone(),
            config_id: t.config_id.clone(),
            config_name: t.config_name.clone(),
            workload: t.workload.clone(),
            repeat: t.repeat,
            attempt: t.attempts,
            state: state as i32,
            reason: reason.to_string(),
            level_count: t.level_count,
        };
        self.ctx
            .hub
            .emit(&t.job_id, job_event::Event::Trial(ev))
            .await
    }

    async fn body(&mut self) -> Result<(), Stop> {
        if let Some(g) = self.gang {
            return g.body(self).await;
        }
        if let Some(d) = self.deployment {
            return d.body(self).await;
        }
        let mut rounds = 0;
        loop {
            let Some(stored) = self.next_round(&mut rounds, "the agent").await? else {
                return Ok(());
            };
            if !self.external() {
                self.enter(TrialState::StartingEngine).await?;
                self.apply().await?;
            }
            self.enter(TrialState::Running).await?;
            let before = stored.len();
            if self.clients.is_empty() {
                self.bench(stored).await?;
            } else {
                self.bench_split(stored).await?;
            }
            // Levels remain after the stream ended: the engine died in a level (a crashed
            // level is stored as a result); start it again for the remaining levels.
            if self.round_ended(before, "the agent").await? {
                return Ok(());
            }
        }
    }

    /// The levels stored so far before a round of starting the engine and benchmarking, or
    /// `None` when every level is stored; gives up after one round more than there are levels
    /// (`who` kept ending the benchmark early).
    pub(super) async fn next_round(
        &self,
        rounds: &mut usize,
        who: &str,
    ) -> Result<Option<Vec<u32>>, Stop> {
        let total = self.trial.level_count as usize;
        let stored = self.ctx.store.stored_level_indices(&self.trial.id).await?;
        if stored.len() >= total {
            return Ok(None);
        }
        *rounds += 1;
        if *rounds > total + 1 {
            return Err(Stop::Lost(format!(
                "{who} kept ending the benchmark early; levels stored: {stored:?}"
            )));
        }
        Ok(Some(stored))
    }

    /// After a round that began with `before` levels stored: whether every level is stored now;
    /// an error when the round stored none (`who` ended the benchmark without a result).
    pub(super) async fn round_ended(&self, before: usize, who: &str) -> Result<bool, Stop> {
        let after = self.ctx.store.stored_level_indices(&self.trial.id).await?;
        if after.len() >= self.trial.level_count as usize {
            return Ok(true);
        }
        if after.len() == before {
            return Err(Stop::Lost(format!(
                "{who} ended the benchmark without a result"
            )));
        }
        Ok(false)
    }

    /// The trial's state, stored and sent to whoever watches the job.
    pub(super) async fn enter(&self, state: TrialState) -> Result<(), StoreError> {
        self.ctx
            .store
            .set_trial_state(&self.trial.id, state, "")
            .await?;
        self.trial_event(state, "").await
    }

    async fn emit_engine(&self, event: EngineEvent) -> Result<(), StoreError> {
        let ev = HostEngineEvent {
            host: self.host.clone(),
            run_id: self.run.run_id.clone(),
            event: Some(event),
        };
        self.ctx
            .hub
            .emit(&self.trial.job_id, job_event::Event::Engine(ev))
            .await
    }

    async fn apply(&mut self) -> Result<(), Stop> {
        let span = tracing::info_span!(
            "engine.apply",
            fleetbench.host = %self.host,
            fleetbench.run.id = %self.run.run_id,
            fleetbench.config.id = %self.trial.config_id,
            fleetbench.engine.start_s = tracing::field::Empty,
            fleetbench.crash.class = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        async {
            let config = self.trial.config_index as usize;
            let mut spec = match self.deployment {
                Some(d) => d.router_spec(self.spec, config),
                None => self.spec.engine_spec(config),
            };
            spec.gang = self.gang.map(|g| g.pb(0));
            let req = ApplyEngineRequest {
                spec: Some(spec),
                run_id: self.run.run_id.clone(),
                lease_epoch: self.lease.epoch,
            };
            let mut client = self.client.clone();
            let cancel = self.cancel.clone();
            let mut stream = tokio::select! {
                r = client.apply_engine(req) => r.map_err(|s| classify("ApplyEngine", s))?.into_inner(),
                _ = cancel.cancelled() => return Err(Stop::Cancelled),
            };
            loop {
                let msg = tokio::select! {
                    m = stream.message() => m.map_err(|s| classify("ApplyEngine stream", s))?,
                    _ = cancel.cancelled() => return Err(Stop::Cancelled),
                };
                let Some(ev) = msg else {
                    return Err(Stop::Lost("ApplyEngine ended before the engine was ready".into()));
                };
                self.emit_engine(ev.clone()).await?;
                match ev.event {
                    Some(engine_event::Event::Spawned(s)) => {
                        tracing::info!(pid = s.pid, "engine spawned");
                        self.run.argv = s.argv;
                        self.ctx.store.put_run(&self.run).await?;
                    }
                    Some(engine_event::Event::Fact(f)) => {
                        self.run.facts.retain(|x| x.key != f.key);
                        self.run.facts.push(f);
                    }
                    Some(engine_event::Event::Ready(r)) => {
                        tracing::info!(elapsed_s = r.elapsed_s, "engine ready");
                        tracing::Span::current().record("fleetbench.engine.start_s", r.elapsed_s);
                        for f in r.facts {
                            self.run.facts.retain(|x| x.key != f.key);
                            self.run.facts.push(f);
                        }
                        self.run.engine_start_s = r.elapsed_s;
                        self.ctx.store.put_run(&self.run).await?;
                        return Ok(());
                    }
                    Some(engine_event::Event::Failed(crash)) => {
                        return Err(self.engine_failed(crash).await);
                    }
                    _ => {}
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn engine_failed(&mut self, crash: Crash) -> Stop {
        let class = crash.class();
        // The host could not start it (a read-only or full data directory): the host's fault,
        // not the config's; no result is stored and the trial goes to another host. Killed from
        // outside while starting: nobody's fault here; the trial runs again.
        if class == fleetbench_proto::agentpb::CrashClass::HostFault {
            tracing::warn!(summary = %crash.summary, "the host could not start the engine");
            return Stop::HostFault(format!("host {}: {}", self.host, crash.summary));
        }
        if class.not_the_configs() {
            tracing::warn!(summary = %crash.summary, "the engine was killed from outside");
            return Stop::Outside(format!("host {}: {}", self.host, crash.summary));
        }
        tracing::warn!(class = ?class, summary = %crash.summary, "engine failed to start");
        let span = tracing::Span::current();
        span.record("fleetbench.crash.class", class.word().as_str());
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", crash.summary.as_str());
        self.ctx
            .metrics
            .crash(&self.host, &self.trial.config_name, class);
        let summary = if crash.summary.is_empty() {
            format!("{class:?}")
        } else {
            crash.summary.clone()
        };
        self.run.crash = Some(crash);
        if let Err(e) = self.ctx.store.put_run(&self.run).await {
            return Stop::Store(e);
        }
        Stop::Rejected(summary)
    }

    async fn stop_engine(&self) {
        let mut client = self.client.clone();
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            client.stop_engine(StopEngineRequest {
                lease_epoch: self.lease.epoch,
            }),
        )
        .await;
        if !matches!(r, Ok(Ok(_))) {
            tracing::warn!(host = %self.host, "could not confirm the engine stopped");
        }
    }
}
