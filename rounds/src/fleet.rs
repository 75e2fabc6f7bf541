//! What tuning searches and regression suites need of a controller: submit a job, wait for
//! it, read its results. Both run their work as ordinary jobs through the scheduler, so they
//! get its parallelism over hosts, crash handling and stored results for free.
//!
//! The CLI's fleet is a gRPC client of the controller (implemented here); the controller's own
//! scheduled suites use its scheduler (implemented in the controller). Where a suite's runs are
//! kept is not the fleet's business but the [`History`](crate::regress::History)'s.

use std::future::Future;
use std::time::Duration;

use fleetbench_proto::controllerpb::controller_client::ControllerClient;
use fleetbench_proto::controllerpb::{
    AgentHealth, AgentInfo, GetJobRequest, GetResultsRequest, GetResultsResponse, Job, JobKind,
    JobState, ListAgentsRequest, SubmitJobRequest, SubmitJobResponse,
};

use fleetbench_spec::SpecError;

/// Errors talking to the controller.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A call to the controller's API failed.
    #[error("controller {call}: {status}")]
    Rpc {
        call: &'static str,
        status: tonic::Status,
    },
    /// The in-process scheduler or its store failed (scheduled suites).
    #[error("controller: {0}")]
    Local(String),
    /// The controller refused a generated job spec (a bug: specs are validated first).
    #[error("the controller refused the job spec:\n{}", fleetbench_spec::render_errors(.0))]
    Refused(Vec<SpecError>),
}

/// A controller that runs jobs.
pub trait Fleet: Send {
    /// Submits a job spec as a job of `kind`; returns the job's id.
    fn submit(
        &mut self,
        spec_toml: &str,
        file_name: &str,
        tag: &str,
        kind: JobKind,
    ) -> impl Future<Output = Result<String, FleetError>> + Send;
    /// Waits until the job has ended; returns it.
    fn wait(&mut self, job_id: &str) -> impl Future<Output = Result<Job, FleetError>> + Send;
    /// Results of jobs (runs, levels, configs).
    fn results(
        &mut self,
        job_ids: &[String],
    ) -> impl Future<Output = Result<GetResultsResponse, FleetError>> + Send;
    /// The controller's agents with their facts (GPUs); empty when unknown.
    fn agents(&mut self) -> impl Future<Output = Result<Vec<AgentInfo>, FleetError>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Hosts that can take work now (known and reachable); None when unknown.
    fn hosts(&mut self) -> impl Future<Output = Option<usize>> + Send {
        async { None }
    }
}

/// The job id of an accepted submission, or the spec's errors that refused it (one rule for
/// every [`Fleet`]).
pub fn accepted(resp: SubmitJobResponse) -> Result<String, FleetError> {
    if resp.errors.is_empty() {
        Ok(resp.job_id)
    } else {
        Err(FleetError::Refused(
            resp.errors.iter().map(SpecError::from).collect(),
        ))
    }
}

pub(crate) fn rpc(call: &'static str) -> impl FnOnce(tonic::Status) -> FleetError {
    move |status| FleetError::Rpc { call, status }
}

impl<T> Fleet for ControllerClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Send,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
    T::Future: Send,
{
    async fn submit(
        &mut self,
        spec_toml: &str,
        file_name: &str,
        tag: &str,
        kind: JobKind,
    ) -> Result<String, FleetError> {
        let resp = self
            .submit_job(SubmitJobRequest {
                spec_toml: spec_toml.to_string(),
                file_name: file_name.to_string(),
                dry_run: false,
                tag: tag.to_string(),
                kind: kind as i32,
            })
            .await
            .map_err(rpc("SubmitJob"))?
            .into_inner();
        accepted(resp)
    }

    async fn wait(&mut self, job_id: &str) -> Result<Job, FleetError> {
        loop {
            let job = self
                .get_job(GetJobRequest {
                    job_id: job_id.to_string(),
                })
                .await
                .map_err(rpc("GetJob"))?
                .into_inner();
            if JobState::is_final_value(job.state) {
                return Ok(job);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn results(&mut self, job_ids: &[String]) -> Result<GetResultsResponse, FleetError> {
        Ok(self
            .get_results(GetResultsRequest {
                job_ids: job_ids.to_vec(),
                include_telemetry: false,
            })
            .await
            .map_err(rpc("GetResults"))?
            .into_inner())
    }

    async fn agents(&mut self) -> Result<Vec<AgentInfo>, FleetError> {
        Ok(self
            .list_agents(ListAgentsRequest {})
            .await
            .map_err(rpc("ListAgents"))?
            .into_inner()
            .agents)
    }

    async fn hosts(&mut self) -> Option<usize> {
        let agents = self
            .list_agents(ListAgentsRequest {})
            .await
            .ok()?
            .into_inner();
        Some(
            agents
                .agents
                .iter()
                .filter(|a| {
                    a.health == AgentHealth::Ready as i32 || a.health == AgentHealth::Busy as i32
                })
                .count(),
        )
    }
}
