//! One trial attempt on one host: start the engine (`ApplyEngine`, events relayed), run the
//! benchmark (`RunBenchmark`, each level stored the moment it arrives), relay telemetry, and
//! re-apply the engine when a level crashed it and levels remain.

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

use super::{Ctx, telemetry};
use crate::agents::{AgentClient, Lease};
use crate::spec::JobSpec;
use crate::store::{StoreError, TrialRow};

/// How a trial attempt ended.
#[derive(Debug)]
pub(crate) enum TrialOutcome {
    /// Every level is stored (crashed levels included: a crash is a result).
    Done,
    /// The engine could not start (classified); a result, not retried.
    EngineFailed(String),
    /// The host stopped answering; the trial goes to another host as a new attempt.
    HostLost(String),
    Cancelled,
    Store(StoreError),
}

/// Why a step stopped early.
enum Stop {
    Lost(String),
    Rejected(String),
    Cancelled,
    Store(StoreError),
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
    /// GPU power samples the telemetry relay keeps for this attempt's levels.
    power: telemetry::PowerLog,
}

/// Runs one attempt of `trial` on the leased host.
pub(crate) async fn run_trial(
    ctx: &Ctx,
    spec: &JobSpec,
    trial: &TrialRow,
    lease: Lease,
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
    let run = Run {
        run_id: run_id.clone(),
        job_id: trial.job_id.clone(),
        trial_id: trial.id.clone(),
        host: lease.host.clone(),
        config_id: trial.config_id.clone(),
        config_name: trial.config_name.clone(),
        workload: trial.workload.clone(),
        repeat: trial.repeat,
        attempt: trial.attempts,
        state: RunState::Running as i32,
        started_unix_ms: now_unix_ms(),
        ..Run::default()
    };
    let mut a = Attempt {
        ctx,
        spec,
        trial,
        host: lease.host.clone(),
        client: lease.client,
        run,
        cancel,
        power: telemetry::PowerLog::default(),
    };
    async move {
        if let Err(e) = ctx.store.put_run(&a.run).await {
            return TrialOutcome::Store(e);
        }
        ctx.inventory.set_current_config(&a.host, &trial.config_id);
        let tel_cancel = a.cancel.child_token();
        let tel = tokio::spawn(
            telemetry::relay(
                telemetry::Relay {
                    store: ctx.store.clone(),
                    power: a.power.clone(),
                    metrics: ctx.metrics.clone(),
                    client: a.client.clone(),
                    job_id: trial.job_id.clone(),
                    run_id: run_id.clone(),
                    host: a.host.clone(),
                    config_id: trial.config_id.clone(),
                },
                tel_cancel.clone(),
            )
            .in_current_span(),
        );
        let outcome = match a.body().await {
            Ok(()) => TrialOutcome::Done,
            Err(Stop::Lost(e)) => TrialOutcome::HostLost(e),
            Err(Stop::Rejected(e)) => TrialOutcome::EngineFailed(e),
            Err(Stop::Cancelled) => {
                a.stop_engine().await;
                TrialOutcome::Cancelled
            }
            Err(Stop::Store(e)) => TrialOutcome::Store(e),
        };
        tel_cancel.cancel();
        let _ = tel.await;
        let (run_state, trial_state, reason) = match &outcome {
            TrialOutcome::Done => (RunState::Done, TrialState::Done, String::new()),
            TrialOutcome::EngineFailed(r) => {
                (RunState::EngineFailed, TrialState::EngineFailed, r.clone())
            }
            TrialOutcome::HostLost(r) => (RunState::HostLost, TrialState::HostLost, r.clone()),
            TrialOutcome::Cancelled => (
                RunState::Cancelled,
                TrialState::Cancelled,
                "cancelled".into(),
            ),
            TrialOutcome::Store(e) => (RunState::HostLost, TrialState::HostLost, e.to_string()),
        };
        a.run.state = run_state as i32;
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
    .instrument(span)
    .await
}

impl Attempt<'_> {
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
        let total = self.trial.level_count as usize;
        let mut rounds = 0;
        loop {
            let stored = self.ctx.store.stored_level_indices(&self.trial.id).await?;
            if stored.len() >= total {
                return Ok(());
            }
            rounds += 1;
            if rounds > total + 1 {
                return Err(Stop::Lost(format!(
                    "the agent kept ending the benchmark early; levels stored: {stored:?}"
                )));
            }
            self.ctx
                .store
                .set_trial_state(&self.trial.id, TrialState::StartingEngine, "")
                .await?;
            self.trial_event(TrialState::StartingEngine, "").await?;
            self.apply().await?;
            self.ctx
                .store
                .set_trial_state(&self.trial.id, TrialState::Running, "")
                .await?;
            self.trial_event(TrialState::Running, "").await?;
            let before = stored.len();
            self.bench(stored).await?;
            let after = self.ctx.store.stored_level_indices(&self.trial.id).await?;
            if after.len() >= total {
                return Ok(());
            }
            if after.len() == before {
                return Err(Stop::Lost(
                    "the agent ended the benchmark without a result".into(),
                ));
            }
            // Levels remain after the stream ended: the engine died in a level (a crashed
            // level is stored as a result); start it again for the remaining levels.
        }
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
            let req = ApplyEngineRequest {
                spec: Some(self.spec.engine_spec(self.trial.config_index as usize)),
                run_id: self.run.run_id.clone(),
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
        tracing::warn!(class = ?class, summary = %crash.summary, "engine failed to start");
        let span = tracing::Span::current();
        span.record(
            "fleetbench.crash.class",
            crate::metrics::crash_class_word(class).as_str(),
        );
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

    async fn bench(&mut self, skip: Vec<u32>) -> Result<(), Stop> {
        let mut req = self
            .spec
            .benchmark_request(self.trial.workload_index as usize);
        req.run_id = self.run.run_id.clone();
        req.skip_levels = skip;
        let mut client = self.client.clone();
        let cancel = self.cancel.clone();
        let mut stream = tokio::select! {
            r = client.run_benchmark(req) => r.map_err(|s| classify("RunBenchmark", s))?.into_inner(),
            _ = cancel.cancelled() => return Err(Stop::Cancelled),
        };
        let mut spans: HashMap<u32, tracing::Span> = HashMap::new();
        loop {
            let msg = tokio::select! {
                m = stream.message() => m.map_err(|s| classify("RunBenchmark stream", s))?,
                _ = cancel.cancelled() => return Err(Stop::Cancelled),
            };
            let Some(BenchmarkEvent { event, .. }) = msg else {
                return Ok(());
            };
            match event {
                Some(benchmark_event::Event::Progress(p)) => {
                    spans
                        .entry(p.level_index)
                        .or_insert_with(|| self.level_span(p.level_index));
                    let ev = LevelProgress {
                        host: self.host.clone(),
                        run_id: self.run.run_id.clone(),
                        config_name: self.trial.config_name.clone(),
                        level_count: self.trial.level_count,
                        progress: Some(p),
                    };
                    self.ctx
                        .hub
                        .emit(&self.trial.job_id, job_event::Event::Progress(ev))
                        .await?;
                }
                Some(benchmark_event::Event::Level(result)) => {
                    let span = spans
                        .remove(&result.level_index)
                        .unwrap_or_else(|| self.level_span(result.level_index));
                    record_level(&span, &result);
                    self.store_level(result).instrument(span).await?;
                }
                None => {}
            }
        }
    }

    fn level_span(&self, index: u32) -> tracing::Span {
        let c = &self.spec.configs[self.trial.config_index as usize];
        let level = self
            .spec
            .benchmark_request(self.trial.workload_index as usize)
            .levels
            .get(index as usize)
            .cloned()
            .unwrap_or_default();
        tracing::info_span!(
            "bench.level",
            fleetbench.config.id = %c.config_id,
            fleetbench.config.name = %c.name,
            fleetbench.engine.kind = c.kind.as_str(),
            gen_ai.request.model = %c.model,
            fleetbench.host = %self.host,
            fleetbench.workload = %self.trial.workload,
            fleetbench.level.index = i64::from(index),
            fleetbench.concurrency = level.concurrency.map(|c| c as i64),
            fleetbench.request_rate = level.request_rate,
            fleetbench.level.output_tokens_per_s = tracing::field::Empty,
            fleetbench.level.requests_per_s = tracing::field::Empty,
            fleetbench.level.ttft_p50_ms = tracing::field::Empty,
            fleetbench.level.ttft_p99_ms = tracing::field::Empty,
            fleetbench.level.itl_p50_ms = tracing::field::Empty,
            fleetbench.level.itl_p99_ms = tracing::field::Empty,
            fleetbench.level.e2e_p50_ms = tracing::field::Empty,
            fleetbench.level.e2e_p99_ms = tracing::field::Empty,
            fleetbench.level.errors = tracing::field::Empty,
            fleetbench.level.crashed = tracing::field::Empty,
            fleetbench.crash.class = tracing::field::Empty,
        )
    }

    async fn store_level(&mut self, result: LevelResult) -> Result<(), Stop> {
        let crashed = result.outcome == LevelOutcome::Crashed as i32;
        let crash_class = result.crash.as_ref().map(|c| c.class());
        // Two sample intervals: the sample that covers the level's end is on its way.
        let gpu_power_w = self
            .power
            .level_mean(
                result.started_unix_ms,
                result.finished_unix_ms,
                telemetry::POWER_WAIT,
            )
            .await;
        let stored = self.trial.stored_level(
            self.run.run_id.clone(),
            &self.host,
            self.trial.attempts,
            result,
            gpu_power_w,
        );
        if !self.ctx.store.put_level(&stored).await? {
            tracing::warn!(
                level = stored.result.as_ref().map(|r| r.level_index),
                "level already stored; the repeated result is ignored"
            );
            return Ok(());
        }
        let c = &self.spec.configs[self.trial.config_index as usize];
        let api = self
            .spec
            .benchmark_request(self.trial.workload_index as usize)
            .workload
            .map(|w| w.api())
            .unwrap_or_default();
        self.ctx
            .metrics
            .level_stored_as(&stored, c.kind.as_str(), &c.model, api);
        if crashed {
            if let Some(class) = crash_class {
                self.ctx
                    .metrics
                    .crash(&self.host, &self.trial.config_name, class);
            }
            if let Some(crash) = stored.result.as_ref().and_then(|r| r.crash.clone()) {
                self.run.crash = Some(crash);
                self.ctx.store.put_run(&self.run).await?;
            }
        }
        self.ctx
            .hub
            .emit(&self.trial.job_id, job_event::Event::Level(stored))
            .await?;
        Ok(())
    }

    async fn stop_engine(&self) {
        let mut client = self.client.clone();
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            client.stop_engine(StopEngineRequest {}),
        )
        .await;
        if !matches!(r, Ok(Ok(_))) {
            tracing::warn!(host = %self.host, "could not confirm the engine stopped");
        }
    }
}

fn pct(d: &Option<fleetbench_proto::agentpb::Distribution>, key: &str) -> f64 {
    d.as_ref()
        .and_then(|d| d.percentiles.get(key).copied())
        .unwrap_or(f64::NAN)
}

fn record_level(span: &tracing::Span, r: &LevelResult) {
    span.record(
        "fleetbench.level.output_tokens_per_s",
        r.output_tokens_per_s,
    );
    span.record("fleetbench.level.requests_per_s", r.requests_per_s);
    span.record("fleetbench.level.ttft_p50_ms", pct(&r.ttft_ms, "p50"));
    span.record("fleetbench.level.ttft_p99_ms", pct(&r.ttft_ms, "p99"));
    span.record("fleetbench.level.itl_p50_ms", pct(&r.itl_ms, "p50"));
    span.record("fleetbench.level.itl_p99_ms", pct(&r.itl_ms, "p99"));
    span.record("fleetbench.level.e2e_p50_ms", pct(&r.e2e_ms, "p50"));
    span.record("fleetbench.level.e2e_p99_ms", pct(&r.e2e_ms, "p99"));
    span.record("fleetbench.level.errors", r.failed as i64);
    let crashed = r.outcome == LevelOutcome::Crashed as i32;
    span.record("fleetbench.level.crashed", crashed);
    if let Some(c) = r.crash.as_ref().filter(|_| crashed) {
        span.record(
            "fleetbench.crash.class",
            crate::metrics::crash_class_word(c.class()).as_str(),
        );
    }
}
