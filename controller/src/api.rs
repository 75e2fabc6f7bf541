//! The gRPC API, `fleetbench.controller.v1.Controller`, and its authentication (a bearer token
//! checked by an interceptor; mTLS is the server's TLS config, see `server`).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fleetbench_proto::controllerpb::{
    AgentInfo, CancelJobRequest, CompareRequest, CompareResponse, GetJobRequest, GetResultsRequest,
    GetResultsResponse, GetRunRequest, Job, JobEvent, JobKind, JobState, ListAgentsRequest,
    ListAgentsResponse, ListJobsRequest, ListJobsResponse, ListSuiteRunsRequest,
    ListSuiteRunsResponse, RecordSuiteRunRequest, RegisterAgentRequest, RegisterAgentResponse, Run,
    SetAgentDrainingRequest, SubmitJobRequest, SubmitJobResponse, SuiteRun, WatchJobRequest,
    controller_server, job_event,
};
use fleetbench_proto::now_unix_ms;
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;
use tonic::{Request, Response, Status};

use crate::agents::Inventory;
use crate::scheduler::{Scheduler, SchedulerError};
use crate::store::{RegisteredAgent, Store, StoreError};

/// The service behind the API.
#[derive(Debug, Clone)]
pub struct ControllerService {
    pub(crate) scheduler: Scheduler,
    pub(crate) inventory: Arc<Inventory>,
    /// `[api] shared_agent_identities`: agent certificates that may register other names.
    pub(crate) shared_agent_identities: Arc<Vec<String>>,
    /// This controller's role: a watch ends when it stops leading.
    pub(crate) role: crate::leader::RoleRx,
}

/// Bounds on what callers name (bytes): stored and shown everywhere, never unbounded.
const MAX_TAG: usize = 128;
const MAX_FILE_NAME: usize = 255;
const MAX_NAME: usize = 128;
const MAX_ADDRESS: usize = 255;
const MAX_LABELS: usize = 32;
const MAX_LABEL_KEY: usize = 63;
const MAX_LABEL_VALUE: usize = 255;

/// INVALID_ARGUMENT naming `field` when `value` is longer than `max` bytes or holds a control
/// character.
fn bounded(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.len() > max {
        return Err(Status::invalid_argument(format!(
            "{field}: {} bytes, at most {max}",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!(
            "{field}: holds a control character"
        )));
    }
    Ok(())
}

/// An agent's labels: at most [`MAX_LABELS`], keys of letters, digits and `._/-`.
fn check_labels(labels: &std::collections::HashMap<String, String>) -> Result<(), Status> {
    if labels.len() > MAX_LABELS {
        return Err(Status::invalid_argument(format!(
            "labels: {} labels, at most {MAX_LABELS}",
            labels.len()
        )));
    }
    for (k, v) in labels {
        bounded("labels (key)", k, MAX_LABEL_KEY)?;
        bounded(&format!("labels.{k}"), v, MAX_LABEL_VALUE)?;
        if k.is_empty()
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        {
            return Err(Status::invalid_argument(format!(
                "labels: key {k:?} must be letters, digits and . _ / -"
            )));
        }
    }
    Ok(())
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

impl From<SchedulerError> for Status {
    fn from(e: SchedulerError) -> Self {
        match e {
            SchedulerError::NoSuchJob(id) => Status::not_found(format!("no job {id:?}")),
            SchedulerError::NotLeading => Status::unavailable(e.to_string()),
            SchedulerError::Store(e) => store_status(e),
        }
    }
}

/// A store error as the API reports it: UNAVAILABLE when it may pass (the client may retry),
/// INTERNAL otherwise.
fn store_status(e: StoreError) -> Status {
    let transient = e.class() == crate::store::ErrorClass::Transient
        || matches!(&e, StoreError::GaveUp { .. } | StoreError::Fenced { .. });
    if transient {
        Status::unavailable(e.to_string())
    } else {
        internal(e)
    }
}

impl ControllerService {
    fn store(&self) -> &Store {
        self.scheduler.store()
    }

    async fn job(&self, id: &str) -> Result<Job, Status> {
        self.store()
            .get_job(id)
            .await
            .map_err(store_status)?
            .ok_or_else(|| Status::not_found(format!("no job {id:?}")))
    }

    /// Everything stored for the given jobs (all must exist).
    pub async fn results(
        &self,
        job_ids: &[String],
        telemetry: bool,
    ) -> Result<GetResultsResponse, Status> {
        if job_ids.is_empty() {
            return Err(Status::invalid_argument(
                "job_ids: give at least one job id",
            ));
        }
        let mut out = GetResultsResponse::default();
        for id in job_ids {
            out.jobs.push(self.job(id).await?);
            let s = self.store();
            out.configs
                .extend(s.configs(id).await.map_err(store_status)?);
            out.runs.extend(s.runs(id).await.map_err(store_status)?);
            out.levels.extend(s.levels(id).await.map_err(store_status)?);
            if telemetry {
                out.telemetry
                    .extend(s.telemetry(id).await.map_err(store_status)?);
            }
        }
        Ok(out)
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<JobEvent, Status>> + Send>>;

#[tonic::async_trait]
impl controller_server::Controller for ControllerService {
    async fn submit_job(
        &self,
        request: Request<SubmitJobRequest>,
    ) -> Result<Response<SubmitJobResponse>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::OPERATE, "SubmitJob")?;
        let r = request.into_inner();
        bounded("tag", &r.tag, MAX_TAG)?;
        bounded("file_name", &r.file_name, MAX_FILE_NAME)?;
        let resp = self
            .scheduler
            .submit(&r.spec_toml, &r.file_name, r.dry_run, &r.tag, r.kind())
            .await?;
        Ok(Response::new(resp))
    }

    async fn get_job(&self, request: Request<GetJobRequest>) -> Result<Response<Job>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "GetJob")?;
        Ok(Response::new(self.job(&request.into_inner().job_id).await?))
    }

    async fn list_jobs(
        &self,
        request: Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsResponse>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "ListJobs")?;
        let r = request.into_inner();
        let kind = match JobKind::try_from(r.kind) {
            Ok(JobKind::Unspecified) => None,
            Ok(k) => Some(k),
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "kind: {} is not a job kind (sweep 1, tune 2, regress 3; 0 for every kind)",
                    r.kind
                )));
            }
        };
        let jobs = self
            .store()
            .list_jobs_of_kind(r.limit, kind)
            .await
            .map_err(store_status)?;
        Ok(Response::new(ListJobsResponse { jobs }))
    }

    async fn cancel_job(
        &self,
        request: Request<CancelJobRequest>,
    ) -> Result<Response<Job>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::OPERATE, "CancelJob")?;
        let id = request.into_inner().job_id;
        let job = self.job(&id).await?;
        if JobState::is_final_value(job.state) {
            return Ok(Response::new(job));
        }
        Ok(Response::new(self.scheduler.cancel(&id).await?))
    }

    type WatchJobStream = EventStream;

    async fn watch_job(
        &self,
        request: Request<WatchJobRequest>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "WatchJob")?;
        let id = request.into_inner().job_id;
        // Subscribe before reading the past, so no event falls between the two.
        let mut live = self.scheduler.hub().subscribe(&id);
        let job = match self.job(&id).await {
            Ok(j) => j,
            Err(e) => {
                self.scheduler.hub().forget(&id);
                return Err(e);
            }
        };
        if JobState::is_final_value(job.state) {
            // Nothing live will come: drop the channel this watch just made.
            self.scheduler.hub().forget(&id);
        }
        let past = self.store().events(&id).await.map_err(store_status)?;
        // Live events already replayed are skipped by their sequence number (a set, not a
        // high-water mark: with concurrent writers a lower number can commit later).
        let replayed: std::collections::HashSet<i64> = past.iter().map(|(s, _)| *s).collect();
        let store = self.store().clone();
        let mut role = self.role.clone();
        let stream = async_stream(move |tx| async move {
            for (_, ev) in past {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            let snapshot = |job: Job| JobEvent {
                unix_ms: now_unix_ms(),
                job_id: job.id.clone(),
                event: Some(job_event::Event::Job(job)),
            };
            let done = JobState::is_final_value(job.state);
            if tx.send(Ok(snapshot(job))).await.is_err() || done {
                return;
            }
            loop {
                // Deposed (or frozen and woken as a standby): this controller's events have
                // stopped for good. The watcher is told where the leader is and follows the
                // job there.
                let received = tokio::select! {
                    r = live.recv() => Ok(r),
                    now = stopped_leading(&mut role) => Err(now),
                };
                let received = match received {
                    Ok(r) => r,
                    Err(now) => {
                        let status = crate::authz::not_leading(&now).unwrap_or_else(|| {
                            Status::unavailable("this controller no longer leads")
                        });
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                match received {
                    Ok((seq, ev)) => {
                        if seq != 0 && replayed.contains(&seq) {
                            continue;
                        }
                        let end = matches!(&ev.event, Some(job_event::Event::Job(j)) if JobState::is_final_value(j.state));
                        if tx.send(Ok(ev)).await.is_err() || end {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!(job = %id, skipped = n, "a slow watcher missed events");
                    }
                    Err(RecvError::Closed) => {
                        // The job ended and its channel was dropped: send its final state.
                        if let Ok(Some(job)) = store.get_job(&id).await {
                            let _ = tx.send(Ok(snapshot(job))).await;
                        }
                        return;
                    }
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn list_agents(
        &self,
        _request: Request<ListAgentsRequest>,
    ) -> Result<Response<ListAgentsResponse>, Status> {
        let _caller = crate::authz::require(&_request, crate::authz::READ, "ListAgents")?;
        Ok(Response::new(ListAgentsResponse {
            agents: self.inventory.list(),
        }))
    }

    async fn register_agent(
        &self,
        request: Request<RegisterAgentRequest>,
    ) -> Result<Response<RegisterAgentResponse>, Status> {
        let caller = crate::authz::require(&request, crate::authz::REGISTER, "RegisterAgent")?;
        let r = request.into_inner();
        if r.name.trim().is_empty() {
            return Err(Status::invalid_argument("name: must not be empty"));
        }
        // Bounded before anything else reads (or echoes) them.
        bounded("name", &r.name, MAX_NAME)?;
        bounded("address", &r.address, MAX_ADDRESS)?;
        check_labels(&r.labels)?;
        // An agent registers only the name its certificate carries: one agent's key cannot
        // claim (and so redirect) another host.
        if caller.role == crate::authz::ApiRole::Agent
            && caller.name.as_deref() != Some(r.name.as_str())
            && !caller
                .name
                .as_ref()
                .is_some_and(|n| self.shared_agent_identities.contains(n))
        {
            return Err(Status::permission_denied(format!(
                "the certificate of agent {:?} may register only that name, not {:?}",
                caller.name.unwrap_or_default(),
                r.name
            )));
        }
        if !r
            .address
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(Status::invalid_argument(format!(
                "address: {:?} is not host:port",
                r.address
            )));
        }
        // An agent's certificate names the hosts it may listen on (`fleetbench certs issue
        // --agent NAME=ADDRESS`): it cannot register at another agent's address, where the
        // controller would then run this agent's jobs.
        if caller.role == crate::authz::ApiRole::Agent
            && let Some(name) = &caller.name
            && !self.shared_agent_identities.contains(name)
        {
            let host = r
                .address
                .rsplit_once(':')
                .map(|(h, _)| h.trim_matches(['[', ']']))
                .unwrap_or_default();
            if !caller.hosts.iter().any(|h| h == host) {
                return Err(Status::permission_denied(format!(
                    "address: host {host:?} is not among the names in agent {name:?}'s \
                     certificate ({}): an agent registers only where its certificate says it \
                     listens",
                    caller.hosts.join(", ")
                )));
            }
        }
        let labels: BTreeMap<String, String> = r.labels.into_iter().collect();
        // Agents repeat their registration; the controller heartbeats them on its own, so a
        // repeat only needs the reply (no store write, no new client).
        let interval = (self.inventory.heartbeat_interval() * 10).max(Duration::from_secs(10));
        let reply = RegisterAgentResponse {
            accepted: true,
            heartbeat_interval_s: interval.as_secs() as u32,
        };
        if self.inventory.is_known(&r.name, &r.address, &labels) {
            return Ok(Response::new(reply));
        }
        // A host from the config file is the operator's statement of where that host is: no
        // registration moves it.
        if self.inventory.is_configured(&r.name) {
            return Err(Status::permission_denied(format!(
                "host {:?} is configured in the controller's config; a registration cannot \
                 claim it (change the config instead)",
                r.name
            )));
        }
        self.inventory
            .add(&r.name, &r.address, labels.clone(), "registered")
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.store()
            .put_agent(&RegisteredAgent {
                name: r.name,
                address: r.address,
                labels,
            })
            .await
            .map_err(store_status)?;
        Ok(Response::new(reply))
    }

    async fn set_agent_draining(
        &self,
        request: Request<SetAgentDrainingRequest>,
    ) -> Result<Response<AgentInfo>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::OPERATE, "SetAgentDraining")?;
        let r = request.into_inner();
        self.inventory
            .set_draining(&r.name, r.draining)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no agent {:?}", r.name)))
    }

    async fn get_results(
        &self,
        request: Request<GetResultsRequest>,
    ) -> Result<Response<GetResultsResponse>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "GetResults")?;
        let r = request.into_inner();
        Ok(Response::new(
            self.results(&r.job_ids, r.include_telemetry).await?,
        ))
    }

    async fn compare(
        &self,
        request: Request<CompareRequest>,
    ) -> Result<Response<CompareResponse>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "Compare")?;
        let r = request.into_inner();
        if r.alpha != 0.0 && !(r.alpha > 0.0 && r.alpha < 1.0) {
            return Err(Status::invalid_argument(format!(
                "alpha: a significance level is between 0 and 1 (exclusive), got {}",
                r.alpha
            )));
        }
        if let Some(id) = r.history_job_ids.iter().find(|h| r.job_ids.contains(h)) {
            return Err(Status::invalid_argument(format!(
                "history_job_ids: job {id} is compared; a job is not its own history"
            )));
        }
        let results = self.results(&r.job_ids, false).await?;
        let mut history = Vec::with_capacity(r.history_job_ids.len());
        for id in &r.history_job_ids {
            let past = self.results(std::slice::from_ref(id), false).await;
            history.push(
                past.map_err(|e| {
                    Status::new(e.code(), format!("history_job_ids: {}", e.message()))
                })?,
            );
        }
        Ok(Response::new(
            fleetbench_verdicts::compare::compare_with_history(&results, &history, r.alpha),
        ))
    }

    async fn record_suite_run(
        &self,
        request: Request<RecordSuiteRunRequest>,
    ) -> Result<Response<SuiteRun>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::ADMIN, "RecordSuiteRun")?;
        let mut run = request
            .into_inner()
            .run
            .ok_or_else(|| Status::invalid_argument("run: missing"))?;
        if run.suite.trim().is_empty() {
            return Err(Status::invalid_argument("run.suite: must not be empty"));
        }
        let job = self
            .store()
            .get_job(&run.job_id)
            .await
            .map_err(store_status)?;
        let job = job.ok_or_else(|| {
            Status::not_found(format!(
                "run.job_id: no job {:?} on this controller",
                run.job_id
            ))
        })?;
        if job.name != run.suite {
            return Err(Status::invalid_argument(format!(
                "run.suite: job {} ran {:?}, not suite {:?}",
                job.id, job.name, run.suite
            )));
        }
        // The controller's clock orders the history, whichever client recorded a run.
        run.created_unix_ms = now_unix_ms();
        self.store()
            .put_suite_run(&(&run).into())
            .await
            .map_err(store_status)?;
        crate::regress::history::export_checks(self.scheduler.metrics(), &run);
        run.checks.clear();
        Ok(Response::new(run))
    }

    async fn list_suite_runs(
        &self,
        request: Request<ListSuiteRunsRequest>,
    ) -> Result<Response<ListSuiteRunsResponse>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "ListSuiteRuns")?;
        let r = request.into_inner();
        let mut runs: Vec<SuiteRun> = self
            .store()
            .suite_runs(&r.suite)
            .await
            .map_err(store_status)?
            .iter()
            .map(SuiteRun::from)
            .collect();
        if r.limit > 0 {
            runs.truncate(r.limit as usize);
        }
        Ok(Response::new(ListSuiteRunsResponse { runs }))
    }

    async fn get_run(&self, request: Request<GetRunRequest>) -> Result<Response<Run>, Status> {
        let _caller = crate::authz::require(&request, crate::authz::READ, "GetRun")?;
        let id = request.into_inner().run_id;
        self.store()
            .get_run(&id)
            .await
            .map_err(store_status)?
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no run {id:?}")))
    }
}

/// A stream fed by a task through a channel (the task ends when the client goes away).
/// Resolves with the role once this controller stops leading; never while it leads, nor where
/// the role cannot change any more (SQLite: the one controller leads for good, and the sender
/// is gone).
async fn stopped_leading(role: &mut crate::leader::RoleRx) -> crate::leader::Role {
    let changed = role
        .wait_for(|r| !matches!(r, crate::leader::Role::Leader { .. }))
        .await
        .map(|r| (*r).clone());
    match changed {
        Ok(now) => now,
        Err(_) => std::future::pending().await,
    }
}

fn async_stream<F, Fut>(f: F) -> EventStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<JobEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
