//! The `fleetbench.agent.v1.Agent` gRPC service.

use fleetbench_proto::Word;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fleetbench_gpu::Gpus;
use fleetbench_proto::agentpb::{self, agent_server::Agent};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::config::AgentConfig;
use crate::http::HttpClient;
use crate::lease::Leases;
use crate::metrics::MetricsStream;
use crate::profile::RequestError;
use crate::status::RpcError;
use crate::supervisor::Supervisor;

type RpcStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Shortest metrics interval a caller may ask for.
const MIN_INTERVAL_MS: u32 = 100;
const DEFAULT_INTERVAL_MS: u32 = 1000;

/// The service state shared by every call.
#[derive(Debug, Clone)]
pub struct AgentService {
    cfg: Arc<AgentConfig>,
    sup: Supervisor,
    gpus: Gpus,
    http: HttpClient,
    leases: Leases,
}

impl AgentService {
    pub fn new(
        cfg: Arc<AgentConfig>,
        sup: Supervisor,
        gpus: Gpus,
        http: HttpClient,
        leases: Leases,
    ) -> Self {
        AgentService {
            cfg,
            sup,
            gpus,
            http,
            leases,
        }
    }

    /// The engine's status with the lease it is held under.
    fn engine_status(&self, mut status: agentpb::EngineStatus) -> agentpb::EngineStatus {
        (status.lease, status.lease_note) = self.leases.view();
        status
    }
}

/// The caller's mTLS identity (the client certificate's name); `None` on plaintext.
fn identity<T>(request: &Request<T>) -> Option<String> {
    request.peer_certs().and_then(|c| {
        c.first()
            .and_then(|d| fleetbench_support::tls::peer_identity(d.as_ref()))
            .map(|id| id.name)
    })
}

fn stream_of<T: Send + 'static>(rx: mpsc::Receiver<Result<T, Status>>) -> RpcStream<T> {
    Box::pin(ReceiverStream::new(rx))
}

/// A caller's run id names a log file: keep it to a safe alphabet.
fn run_id(given: &str, config_id: &str) -> Result<String, RpcError> {
    if given.is_empty() {
        let short: String = uuid::Uuid::now_v7()
            .simple()
            .to_string()
            .chars()
            .skip(20)
            .collect();
        return Ok(format!(
            "{}-{config_id}-{short}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S")
        ));
    }
    let ok = given.len() <= 128
        && !given.starts_with('.')
        && given
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(given.to_string())
    } else {
        Err(RpcError::Field {
            field: "run_id".into(),
            message: format!("{given:?}: use at most 128 letters, digits, '-', '_' or '.'"),
        })
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn get_host(
        &self,
        _: Request<agentpb::GetHostRequest>,
    ) -> Result<Response<agentpb::HostFacts>, Status> {
        let (gpus, cfg) = (self.gpus.clone(), self.cfg.clone());
        let facts = tokio::task::spawn_blocking(move || {
            crate::host::host_facts(&gpus, &cfg.profiles, &cfg.labels)
        })
        .await
        .map_err(|e| Status::internal(format!("host facts: {e}")))?;
        let mut facts = facts;
        (facts.lease, facts.lease_note) = self.leases.view();
        Ok(Response::new(facts))
    }

    async fn get_clock(
        &self,
        _: Request<agentpb::GetClockRequest>,
    ) -> Result<Response<agentpb::ClockReading>, Status> {
        Ok(Response::new(agentpb::ClockReading {
            unix_ms: unix_ms_f64(),
        }))
    }

    type ApplyEngineStream = RpcStream<agentpb::EngineEvent>;

    async fn apply_engine(
        &self,
        request: Request<agentpb::ApplyEngineRequest>,
    ) -> Result<Response<Self::ApplyEngineStream>, Status> {
        let who = identity(&request);
        let req = request.into_inner();
        self.leases
            .check(req.lease_epoch, who.as_deref())
            .map_err(RpcError::from)?;
        let spec = req
            .spec
            .ok_or_else(|| Status::invalid_argument("spec: missing"))?;
        crate::bounds::check_apply(&spec, &req.run_id)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let profile = self.cfg.profiles.get(&spec.profile).ok_or_else(|| {
            RpcError::from(RequestError::UnknownProfile {
                profile: spec.profile.clone(),
                available: self
                    .cfg
                    .profiles
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        })?;
        // Who the engine runs as, before anything runs: the engine's own `--help` is read as
        // that user too (as root it would run whatever the engine user could plant).
        let run_as = match &self.cfg.engine_user {
            Some(users) => {
                crate::engine_user::for_profile(users, profile.run_as_root, &profile.name)
                    .map_err(|e| Status::failed_precondition(e.to_string()))?
            }
            None => None,
        };
        let plan = profile
            .plan_checked(&spec, run_as.as_ref(), self.cfg.external.secret_env_names())
            .await
            .map_err(RpcError::from)?;
        let run_id = run_id(&req.run_id, &plan.config_id)?;
        let rx = self
            .sup
            .apply(plan, run_id, req.lease_epoch)
            .await
            .map_err(RpcError::from)?;
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(
            ReceiverStream::new(rx),
            Ok,
        ))))
    }

    async fn stop_engine(
        &self,
        request: Request<agentpb::StopEngineRequest>,
    ) -> Result<Response<agentpb::EngineStatus>, Status> {
        let who = identity(&request);
        self.leases
            .check(request.get_ref().lease_epoch, who.as_deref())
            .map_err(RpcError::from)?;
        let status = self.sup.stop("StopEngine").await.map_err(RpcError::from)?;
        Ok(Response::new(self.engine_status(status)))
    }

    async fn get_engine(
        &self,
        _: Request<agentpb::GetEngineRequest>,
    ) -> Result<Response<agentpb::EngineStatus>, Status> {
        Ok(Response::new(
            self.engine_status(self.sup.snapshot().to_status()),
        ))
    }

    type WatchEngineStream = RpcStream<agentpb::EngineWatchEvent>;

    async fn watch_engine(
        &self,
        request: Request<agentpb::WatchEngineRequest>,
    ) -> Result<Response<Self::WatchEngineStream>, Status> {
        let keepalive = crate::watch::keepalive_of(request.get_ref())?;
        let me = self.clone();
        let rx = crate::watch::spawn(
            self.sup.watch(),
            self.leases.watch(),
            keepalive,
            move || me.engine_status(me.sup.snapshot().to_status()),
        );
        Ok(Response::new(stream_of(rx)))
    }

    async fn acquire_lease(
        &self,
        request: Request<agentpb::AcquireLeaseRequest>,
    ) -> Result<Response<agentpb::Lease>, Status> {
        let who = identity(&request);
        let req = request.into_inner();
        crate::bounds::check_lease(&req).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let lease = self
            .leases
            .acquire(&req, who)
            .await
            .map_err(RpcError::from)?;
        Ok(Response::new(lease))
    }

    async fn renew_lease(
        &self,
        request: Request<agentpb::RenewLeaseRequest>,
    ) -> Result<Response<agentpb::Lease>, Status> {
        let who = identity(&request);
        let req = request.into_inner();
        let lease = self
            .leases
            .renew(req.epoch, req.ttl_ms, who.as_deref())
            .map_err(RpcError::from)?;
        Ok(Response::new(lease))
    }

    async fn release_lease(
        &self,
        request: Request<agentpb::ReleaseLeaseRequest>,
    ) -> Result<Response<agentpb::ReleaseLeaseResponse>, Status> {
        let who = identity(&request);
        let req = request.into_inner();
        let status = self
            .leases
            .release(req.epoch, req.keep_engine, who.as_deref(), &self.sup)
            .await
            .map_err(RpcError::from)?;
        Ok(Response::new(agentpb::ReleaseLeaseResponse {
            engine: Some(self.engine_status(status)),
        }))
    }

    type StreamLogsStream = RpcStream<agentpb::LogLine>;

    async fn stream_logs(
        &self,
        request: Request<agentpb::StreamLogsRequest>,
    ) -> Result<Response<Self::StreamLogsStream>, Status> {
        let req = request.into_inner();
        let (tail, follow) = self.sup.logs.tail(req.tail as usize, req.follow);
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(async move {
            for line in tail {
                if tx.send(Ok(line)).await.is_err() {
                    return;
                }
            }
            let Some(mut follow) = follow else { return };
            loop {
                tokio::select! {
                    r = follow.recv() => match r {
                        Ok(line) => {
                            if tx.send(Ok(line)).await.is_err() {
                                return;
                            }
                        }
                        // A slow reader misses lines rather than slowing the engine down.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(stream_of(rx)))
    }

    type StreamMetricsStream = RpcStream<agentpb::MetricsSample>;

    async fn stream_metrics(
        &self,
        request: Request<agentpb::StreamMetricsRequest>,
    ) -> Result<Response<Self::StreamMetricsStream>, Status> {
        let mut req = request.into_inner();
        if req.interval_ms == 0 {
            req.interval_ms = DEFAULT_INTERVAL_MS;
        }
        if req.interval_ms < MIN_INTERVAL_MS {
            return Err(RpcError::Field {
                field: "interval_ms".into(),
                message: format!(
                    "{} is below the minimum of {MIN_INTERVAL_MS} ms",
                    req.interval_ms
                ),
            }
            .into());
        }
        if !(req.gpu || req.engine || req.process) {
            req.gpu = true;
            req.engine = true;
            req.process = true;
        }
        let period = Duration::from_millis(u64::from(req.interval_ms));
        let mut stream =
            MetricsStream::new(req, self.gpus.clone(), self.http.clone(), self.sup.clone())
                .with_gpu_source(&self.cfg.gpu_source);
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = tx.closed() => return,
                }
                let sample = stream.sample().await;
                if tx.send(Ok(sample)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(stream_of(rx)))
    }

    type RunBenchmarkStream = RpcStream<agentpb::BenchmarkEvent>;

    async fn run_benchmark(
        &self,
        request: Request<agentpb::RunBenchmarkRequest>,
    ) -> Result<Response<Self::RunBenchmarkStream>, Status> {
        let who = identity(&request);
        let req = request.into_inner();
        crate::bounds::check_benchmark(&req).map_err(RpcError::from)?;
        self.leases
            .check(req.lease_epoch, who.as_deref())
            .map_err(RpcError::from)?;
        if let Some(t) = &req.target {
            // An endpoint the agent does not own: no engine need run, and the agent's
            // [external] policy decides where load may go and which secrets it may send.
            let access = self.cfg.external.client_options(t).map_err(|e| {
                RpcError::from(crate::convert::bad(
                    &format!("target.{}", e.field),
                    e.message,
                ))
            })?;
            let mut cfg = crate::convert::bench_config(&req, &t.base_url, &self.cfg.dataset_roots)
                .map_err(RpcError::from)?;
            cfg.client = access;
            cfg.validate()
                .map_err(|e| RpcError::from(crate::convert::bad("target", e.to_string())))?;
            let runner = crate::convert::runner(&req, cfg)
                .await
                .map_err(RpcError::from)?;
            let source = crate::cache::CacheSource {
                kind: crate::external::metrics_kind(t),
                urls: t.metrics_urls.clone(),
                none: "the target names no metrics_urls".into(),
            };
            let (tx, rx) = mpsc::channel(64);
            tokio::spawn(tracing::Instrument::in_current_span(crate::bench::run(
                runner,
                req,
                crate::bench::Target::External(source),
                self.leases.clone(),
                tx,
            )));
            return Ok(Response::new(stream_of(rx)));
        }
        let snap = self.sup.snapshot();
        let plan = match (&snap.plan, snap.state) {
            (Some(p), agentpb::EngineState::Ready) => p.clone(),
            _ => {
                return Err(RpcError::NotReady(format!(
                    "no engine is ready (state {}); ApplyEngine first",
                    snap.state.word()
                ))
                .into());
            }
        };
        let mut cfg = crate::convert::bench_config(&req, &plan.base_url, &self.cfg.dataset_roots)
            .map_err(RpcError::from)?;
        // A router forwards no /tokenize: prompts are shaped by its first worker's.
        cfg.tokenize_url = plan.spec.workers.first().cloned();
        let runner = crate::convert::runner(&req, cfg)
            .await
            .map_err(RpcError::from)?;
        let (tx, rx) = mpsc::channel(64);
        // In the request's span, so that the level spans join the caller's trace.
        tokio::spawn(tracing::Instrument::in_current_span(crate::bench::run(
            runner,
            req,
            crate::bench::Target::Engine {
                state: self.sup.watch(),
                generation: snap.generation,
            },
            self.leases.clone(),
            tx,
        )));
        Ok(Response::new(stream_of(rx)))
    }

    async fn probe_p2p(
        &self,
        request: Request<agentpb::ProbeP2pRequest>,
    ) -> Result<Response<agentpb::P2pReport>, Status> {
        use fleetbench_gpu::p2p::{ProbeError, ProbeOptions, probe};
        let req = request.into_inner();
        let mut opts = ProbeOptions::default();
        if req.buffer_bytes > 0 {
            opts.buffer_bytes = req.buffer_bytes;
        }
        if req.repeats > 0 {
            opts.repeats = req.repeats;
        }
        if !req.pairs.is_empty() {
            opts.pairs = Some(req.pairs.iter().map(|p| (p.src, p.dst)).collect());
        }
        let gpus = self.gpus.clone();
        let span = tracing::info_span!(
            "p2p.probe",
            fleetbench.p2p.buffer_bytes = opts.buffer_bytes as i64,
            fleetbench.p2p.repeats = i64::from(opts.repeats)
        );
        let result = tokio::task::spawn_blocking(move || span.in_scope(|| probe(&gpus, &opts)))
            .await
            .map_err(|e| Status::internal(format!("p2p probe: {e}")))?;
        match result {
            Ok(report) => Ok(Response::new(agentpb::P2pReport::from(&report))),
            Err(e @ (ProbeError::NoCudaDriver | ProbeError::NoGpus)) => {
                Ok(Response::new(agentpb::P2pReport {
                    unavailable_reason: e.to_string(),
                    ..Default::default()
                }))
            }
            Err(e) => Err(RpcError::from(e).into()),
        }
    }
}

/// Unix time in ms with its sub-millisecond digits.
fn unix_ms_f64() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}
