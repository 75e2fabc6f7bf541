//! The suite history kept on a controller this process reaches over gRPC (`fleetbench regress
//! --controller URL`): its `ListSuiteRuns` and `RecordSuiteRun`, which also exports the checks
//! as that controller's regression metrics. A controller older than the history answers
//! `Unimplemented`: its runs are then unknown (None) and a run is not recorded, with a warning.

use fleetbench_proto::controllerpb::controller_client::ControllerClient;
use fleetbench_proto::controllerpb::{
    self, JobState, ListJobsRequest, ListSuiteRunsRequest, RecordSuiteRunRequest,
};

use super::history::{History, checks};
use super::{RegressError, SuiteRun};
use crate::fleet::{FleetError, rpc};
use fleetbench_verdicts::regress::Verdict;

/// A controller's suite history, through its API.
#[derive(Debug, Clone)]
pub struct RemoteHistory<T> {
    client: ControllerClient<T>,
}

impl<T> RemoteHistory<T> {
    /// The history kept by the controller `client` talks to.
    pub fn new(client: ControllerClient<T>) -> Self {
        RemoteHistory { client }
    }
}

/// Whether a controller answered that it has no such call (a version before the history).
fn unimplemented(e: &FleetError) -> bool {
    matches!(e, FleetError::Rpc { status, .. } if status.code() == tonic::Code::Unimplemented)
}

impl<T> History for RemoteHistory<T>
where
    T: tonic::client::GrpcService<tonic::body::Body> + Send,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
    T::Future: Send,
{
    async fn runs(&mut self, suite: &str) -> Result<Option<Vec<SuiteRun>>, RegressError> {
        let answer = self
            .client
            .list_suite_runs(ListSuiteRunsRequest {
                suite: suite.to_string(),
                limit: 0,
            })
            .await
            .map_err(rpc("ListSuiteRuns"));
        match answer {
            Ok(r) => Ok(Some(
                r.into_inner().runs.iter().map(SuiteRun::from).collect(),
            )),
            Err(e) if unimplemented(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn tagged_job(&mut self, suite: &str, tag: &str) -> Result<Option<String>, RegressError> {
        // A run tagged before the controller kept the history (or by an older client) is
        // still a job of the suite with the tag.
        let jobs = self
            .client
            .list_jobs(ListJobsRequest {
                limit: 1000,
                ..Default::default()
            })
            .await
            .map_err(rpc("ListJobs"))?
            .into_inner()
            .jobs;
        Ok(jobs
            .iter()
            .find(|j| j.tag == tag && j.name == suite && j.state == JobState::Succeeded as i32)
            .map(|j| j.id.clone()))
    }

    async fn record(&mut self, run: &SuiteRun, verdicts: &[Verdict]) -> Result<(), RegressError> {
        let mut pb = controllerpb::SuiteRun::from(run);
        pb.checks = checks(verdicts);
        let answer = self
            .client
            .record_suite_run(RecordSuiteRunRequest { run: Some(pb) })
            .await
            .map_err(rpc("RecordSuiteRun"));
        match answer {
            Ok(_) => Ok(()),
            Err(e) if unimplemented(&e) => {
                tracing::warn!(
                    suite = %run.suite,
                    job = %run.job_id,
                    "the controller keeps no suite history (RecordSuiteRun unimplemented): this run is not recorded"
                );
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
