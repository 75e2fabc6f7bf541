//! One stand-in agent: the `fleetbench.agent.v1.Agent` service with an engine that exists only
//! as state and timing. `ApplyEngine` takes the configured start-up time (or the spec's
//! `--startup-delay-s`), `RunBenchmark` reports each level after the time the sim's model
//! predicts for it, `StreamMetrics` sends samples at the requested interval, `WatchEngine` (the
//! controller's heartbeat) pushes the state on every change and a keep-alive in between. Nothing
//! is started, so a thousand of these fit in one process.
//!
//! Kept in one file so that changes to `agent.v1` (new RPCs or fields) land in one place.

use fleetbench_proto::Word;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbench_proto::agentpb::{self, agent_server::Agent, engine_event};
use fleetbench_proto::now_unix_ms;
use fleetbench_sim::ModelParams;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::model::{self, Load};

mod levels;

type RpcStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The only engine profile a stand-in offers.
pub const PROFILE: &str = "sim";
const MIN_INTERVAL_MS: u32 = 100;
/// A starting engine's `WaitingReady` events come this often, as the agent's do.
const WAITING_EVERY: Duration = Duration::from_secs(5);

/// Timing of a stand-in's engine.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long `ApplyEngine` takes from spawn to ready (unless the spec sets
    /// `--startup-delay-s`).
    pub apply: Duration,
    /// How long stopping an engine takes.
    pub stop: Duration,
}

#[derive(Debug, Default)]
struct Engine {
    state: agentpb::EngineState,
    spec: Option<agentpb::EngineSpec>,
    params: Option<ModelParams>,
    config_id: String,
    run_id: String,
    since_unix_ms: i64,
    /// Bumped by every apply and stop: a benchmark or apply of an older engine ends.
    generation: u64,
    /// Concurrency of the level running now (telemetry shows it).
    running: u32,
    crash: Option<agentpb::Crash>,
}

/// One stand-in agent.
#[derive(Debug, Clone)]
pub struct StandIn {
    name: Arc<str>,
    labels: Arc<Vec<(String, String)>>,
    timing: Timing,
    /// Spreads hosts' figures by a few percent, fixed per host.
    jitter: f64,
    engine: Arc<Mutex<Engine>>,
    leases: Arc<crate::lease::Leases>,
    /// Marked on every change of the engine or the lease: wakes `WatchEngine` streams.
    changes: Arc<watch::Sender<()>>,
    /// False: `WatchEngine` is UNIMPLEMENTED, as on an agent older than it.
    watch_engine: bool,
}

fn jitter_of(name: &str) -> f64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    0.97 + 0.06 * ((h >> 11) as f64 / (1u64 << 53) as f64)
}

impl StandIn {
    pub fn new(name: &str, labels: Vec<(String, String)>, timing: Timing) -> Self {
        StandIn {
            name: name.into(),
            labels: Arc::new(labels),
            timing,
            jitter: jitter_of(name),
            leases: Arc::default(),
            changes: Arc::new(watch::channel(()).0),
            watch_engine: true,
            engine: Arc::new(Mutex::new(Engine {
                state: agentpb::EngineState::Idle,
                ..Default::default()
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Engine> {
        self.engine.lock().expect("stand-in engine lock")
    }

    /// A stand-in of an agent older than `WatchEngine`.
    pub fn without_watch_engine(mut self) -> Self {
        self.watch_engine = false;
        self
    }

    /// Tells `WatchEngine` streams that the engine or the lease changed.
    fn changed(&self) {
        self.changes.send_replace(());
    }

    fn status(&self) -> agentpb::EngineStatus {
        let e = self.lock();
        agentpb::EngineStatus {
            lease: self.leases.held(),
            state: e.state as i32,
            spec: e.spec.clone(),
            config_id: e.config_id.clone(),
            run_id: e.run_id.clone(),
            since_unix_ms: e.since_unix_ms,
            last_crash: e.crash.clone(),
            ..Default::default()
        }
    }

    fn facts(&self) -> agentpb::HostFacts {
        let gpus = (0..model::GPUS)
            .map(|i| agentpb::GpuFacts {
                index: i,
                name: "NVIDIA H200".into(),
                uuid: format!("GPU-standin-{}-{i}", self.name),
                memory_total_bytes: 143_771_000_000,
                pcie_link_gen: 5,
                pcie_link_width: 16,
                pcie_max_link_gen: 5,
                pcie_max_link_width: 16,
                nvlink_active_count: 18,
                numa_node: Some((i / 4) as i32),
                power_limit_w: Some(700.0),
                ..Default::default()
            })
            .collect();
        agentpb::HostFacts {
            hostname: self.name.to_string(),
            agent_version: format!("{} (fleetbench-swarm stand-in)", env!("CARGO_PKG_VERSION")),
            os: "stand-in".into(),
            kernel: String::new(),
            cpu_count: 64,
            memory_total_bytes: 2 << 40,
            gpus,
            driver_version: "stand-in".into(),
            profiles: vec![agentpb::EngineProfileInfo {
                name: PROFILE.into(),
                kind: agentpb::EngineKind::Sim as i32,
                program: "none: fleetbench-swarm stand-in (no process)".into(),
                flags: Vec::new(),
                allows_any_model: true,
                // A stand-in runs no engine, so no rank of one spanning hosts either.
                rendezvous_port: 0,
            }],
            labels: self.labels.iter().cloned().collect(),
            ..Default::default()
        }
    }
}

fn event(e: engine_event::Event) -> agentpb::EngineEvent {
    agentpb::EngineEvent {
        unix_ms: now_unix_ms(),
        event: Some(e),
    }
}

fn fact(key: &str, value: impl ToString) -> agentpb::LogFact {
    agentpb::LogFact {
        key: key.into(),
        value: value.to_string(),
    }
}

/// The sim's model for a spec's flags; an error names the flag, as the sim would at start-up.
fn plan(spec: &agentpb::EngineSpec) -> Result<(ModelParams, f64, String), Status> {
    if spec.profile != PROFILE {
        return Err(Status::invalid_argument(format!(
            "spec.profile: {:?} is not offered here; profiles: {PROFILE}",
            spec.profile
        )));
    }
    let mut args = Vec::new();
    let mut flags = Vec::new();
    for f in &spec.flags {
        args.push(f.name.clone());
        args.extend(f.value.clone());
        flags.push((f.name.clone(), f.value.clone()));
    }
    let sim = fleetbench_sim::parse_args(&args)
        .map_err(|e| Status::invalid_argument(format!("spec.flags: {e}")))?;
    let params = ModelParams::from_args(&sim)
        .map_err(|e| Status::invalid_argument(format!("spec.flags: {e}")))?;
    let env = spec.env.clone().into_iter().collect();
    let id = fleetbench_engines::config_id(
        fleetbench_engines::EngineKind::Sim,
        &spec.model,
        &flags,
        &env,
    );
    Ok((params, sim.startup_delay_s, id))
}

#[tonic::async_trait]
impl Agent for StandIn {
    async fn get_host(
        &self,
        _: Request<agentpb::GetHostRequest>,
    ) -> Result<Response<agentpb::HostFacts>, Status> {
        Ok(Response::new(self.facts()))
    }

    type ApplyEngineStream = RpcStream<agentpb::EngineEvent>;

    async fn apply_engine(
        &self,
        request: Request<agentpb::ApplyEngineRequest>,
    ) -> Result<Response<Self::ApplyEngineStream>, Status> {
        let req = request.into_inner();
        let spec = req
            .spec
            .ok_or_else(|| Status::invalid_argument("spec: missing"))?;
        let (params, delay_s, config_id) = plan(&spec)?;
        let start = if delay_s > 0.0 {
            Duration::from_secs_f64(delay_s)
        } else {
            self.timing.apply
        };
        let (was_running, generation) = {
            let mut e = self.lock();
            let was = matches!(
                e.state,
                agentpb::EngineState::Ready | agentpb::EngineState::Starting
            );
            e.generation += 1;
            e.state = agentpb::EngineState::Starting;
            e.spec = Some(spec);
            e.params = Some(params.clone());
            e.config_id = config_id.clone();
            e.run_id = req.run_id.clone();
            e.since_unix_ms = now_unix_ms();
            e.running = 0;
            e.crash = None;
            (was, e.generation)
        };
        self.changed();
        let (tx, rx) = mpsc::channel(16);
        let me = self.clone();
        let stop = self.timing.stop;
        tokio::spawn(async move {
            let pid = 100_000 + generation as u32;
            let mut events = Vec::new();
            if was_running {
                events.push(event(engine_event::Event::Stopping(agentpb::Stopping {
                    pid: pid - 1,
                    reason: "ApplyEngine".into(),
                })));
            }
            for ev in events {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            if was_running {
                tokio::time::sleep(stop).await;
                let _ = tx
                    .send(Ok(event(engine_event::Event::Stopped(agentpb::Stopped {
                        pid: pid - 1,
                        took_s: stop.as_secs_f64(),
                        killed: false,
                    }))))
                    .await;
            }
            let spawned = engine_event::Event::Spawned(agentpb::Spawned {
                pid,
                argv: vec!["fleetbench-swarm-standin".into()],
                run_id: req.run_id.clone(),
                config_id: config_id.clone(),
                log_path: String::new(),
            });
            let _ = tx.send(Ok(event(spawned))).await;
            let started = tokio::time::Instant::now();
            let mut tick = tokio::time::interval_at(started + WAITING_EVERY, WAITING_EVERY);
            let ready_at = started + start;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(ready_at) => break,
                    _ = tick.tick() => {
                        let w = engine_event::Event::Waiting(agentpb::WaitingReady {
                            elapsed_s: started.elapsed().as_secs_f64(),
                            message: "stand-in engine starting".into(),
                        });
                        if tx.send(Ok(event(w))).await.is_err() {
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            }
            let facts = vec![
                fact("max_total_num_tokens", params.max_total_num_tokens),
                fact("max_running_requests", params.max_running_requests),
            ];
            {
                let mut e = me.lock();
                if e.generation != generation {
                    // A newer apply or a stop took over: this one ends without `ready`.
                    return;
                }
                e.state = agentpb::EngineState::Ready;
                e.since_unix_ms = now_unix_ms();
            }
            me.changed();
            let ready = engine_event::Event::Ready(agentpb::Ready {
                elapsed_s: started.elapsed().as_secs_f64(),
                base_url: "stand-in://no-engine".into(),
                facts,
            });
            let _ = tx.send(Ok(event(ready))).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn stop_engine(
        &self,
        _: Request<agentpb::StopEngineRequest>,
    ) -> Result<Response<agentpb::EngineStatus>, Status> {
        let was = {
            let mut e = self.lock();
            e.generation += 1;
            e.running = 0;
            let was = e.state != agentpb::EngineState::Idle;
            e.state = agentpb::EngineState::Idle;
            e.since_unix_ms = now_unix_ms();
            was
        };
        self.changed();
        if was {
            tokio::time::sleep(self.timing.stop).await;
        }
        Ok(Response::new(self.status()))
    }

    async fn get_engine(
        &self,
        _: Request<agentpb::GetEngineRequest>,
    ) -> Result<Response<agentpb::EngineStatus>, Status> {
        Ok(Response::new(self.status()))
    }

    type WatchEngineStream = RpcStream<agentpb::EngineWatchEvent>;

    async fn watch_engine(
        &self,
        request: Request<agentpb::WatchEngineRequest>,
    ) -> Result<Response<Self::WatchEngineStream>, Status> {
        use agentpb::engine_watch_event::Event;
        if !self.watch_engine {
            return Err(Status::unimplemented(
                "WatchEngine: this stand-in models an agent without it",
            ));
        }
        let ms = match request.into_inner().keepalive_ms {
            0 => fleetbench_proto::limits::DEFAULT_KEEPALIVE_MS,
            ms => ms,
        };
        fleetbench_proto::limits::check_u32(ms, fleetbench_proto::limits::KEEPALIVE_MS)
            .map_err(|m| Status::invalid_argument(format!("keepalive_ms: {m}")))?;
        let keepalive = Duration::from_millis(u64::from(ms));
        let (tx, rx) = mpsc::channel(4);
        let (me, mut changes) = (self.clone(), self.changes.subscribe());
        let msg = |e: Event| {
            Ok(agentpb::EngineWatchEvent {
                unix_ms: now_unix_ms(),
                event: Some(e),
            })
        };
        // As the agent's: the status now and after every change, a keep-alive in between.
        tokio::spawn(async move {
            loop {
                changes.borrow_and_update();
                if tx.send(msg(Event::Status(me.status()))).await.is_err() {
                    return;
                }
                loop {
                    tokio::select! {
                        _ = changes.changed() => break,
                        _ = tokio::time::sleep(keepalive) => {
                            if tx.send(msg(Event::Keepalive(agentpb::KeepAlive {}))).await.is_err() {
                                return;
                            }
                        }
                        _ = tx.closed() => return,
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn acquire_lease(
        &self,
        request: Request<agentpb::AcquireLeaseRequest>,
    ) -> Result<Response<agentpb::Lease>, Status> {
        let lease = self.leases.acquire(request.into_inner())?;
        self.changed();
        Ok(Response::new(lease))
    }

    async fn renew_lease(
        &self,
        request: Request<agentpb::RenewLeaseRequest>,
    ) -> Result<Response<agentpb::Lease>, Status> {
        self.leases.renew(request.into_inner()).map(Response::new)
    }

    async fn release_lease(
        &self,
        request: Request<agentpb::ReleaseLeaseRequest>,
    ) -> Result<Response<agentpb::ReleaseLeaseResponse>, Status> {
        let req = request.into_inner();
        self.leases.release(&req)?;
        self.changed();
        Ok(Response::new(agentpb::ReleaseLeaseResponse {
            engine: Some(self.status()),
        }))
    }

    type StreamLogsStream = RpcStream<agentpb::LogLine>;

    async fn stream_logs(
        &self,
        request: Request<agentpb::StreamLogsRequest>,
    ) -> Result<Response<Self::StreamLogsStream>, Status> {
        let req = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let line = agentpb::LogLine {
            unix_ms: now_unix_ms(),
            stream: agentpb::LogStream::Stderr as i32,
            line: format!("stand-in agent {}: no engine process, no log", self.name),
            run_id: self.lock().run_id.clone(),
        };
        tokio::spawn(async move {
            if req.tail > 0 && tx.send(Ok(line)).await.is_err() {
                return;
            }
            if req.follow {
                tx.closed().await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type StreamMetricsStream = RpcStream<agentpb::MetricsSample>;

    async fn stream_metrics(
        &self,
        request: Request<agentpb::StreamMetricsRequest>,
    ) -> Result<Response<Self::StreamMetricsStream>, Status> {
        let req = request.into_inner();
        let interval_ms = if req.interval_ms == 0 {
            1000
        } else {
            req.interval_ms
        };
        if interval_ms < MIN_INTERVAL_MS {
            return Err(Status::invalid_argument(format!(
                "interval_ms: {interval_ms} is below the minimum of {MIN_INTERVAL_MS} ms"
            )));
        }
        let period = Duration::from_millis(u64::from(interval_ms));
        let (tx, rx) = mpsc::channel(4);
        let me = self.clone();
        tokio::spawn(async move {
            let mut energy = vec![0u64; model::GPUS as usize];
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = tx.closed() => return,
                }
                let (load, config_id) = {
                    let e = me.lock();
                    let load = Load {
                        ready: e.state == agentpb::EngineState::Ready,
                        running: e.running,
                    };
                    (load, e.config_id.clone())
                };
                let mut s = model::sample(
                    now_unix_ms(),
                    load,
                    &config_id,
                    &mut energy,
                    period.as_secs_f64(),
                );
                s.hostname = me.name.to_string();
                if tx.send(Ok(s)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type RunBenchmarkStream = RpcStream<agentpb::BenchmarkEvent>;

    async fn run_benchmark(
        &self,
        request: Request<agentpb::RunBenchmarkRequest>,
    ) -> Result<Response<Self::RunBenchmarkStream>, Status> {
        let req = request.into_inner();
        let (params, generation) = {
            let e = self.lock();
            match (&e.params, e.state) {
                (Some(p), agentpb::EngineState::Ready) => (p.clone(), e.generation),
                _ => {
                    return Err(Status::failed_precondition(format!(
                        "no engine is ready (state {}); ApplyEngine first",
                        e.state.word()
                    )));
                }
            }
        };
        let (tx, rx) = mpsc::channel(16);
        let me = self.clone();
        tokio::spawn(async move { me.bench(req, params, generation, tx).await });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn probe_p2p(
        &self,
        _: Request<agentpb::ProbeP2pRequest>,
    ) -> Result<Response<agentpb::P2pReport>, Status> {
        Ok(Response::new(agentpb::P2pReport {
            unavailable_reason: "stand-in agent: no GPUs to probe".into(),
            ..Default::default()
        }))
    }
}
