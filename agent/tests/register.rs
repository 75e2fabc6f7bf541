//! Self-registration: the agent calls `RegisterAgent` on the configured controller and repeats
//! it at the heartbeat interval the controller answers with.

mod common;

use std::pin::Pin;
use std::time::Duration;

use common::*;
use fleetbench_proto::controllerpb::{self as pb, controller_server::Controller};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// Answers RegisterAgent (heartbeat 1 s) and records each call; every other RPC is refused.
struct FakeController {
    calls: mpsc::UnboundedSender<pb::RegisterAgentRequest>,
}

type Unary<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Controller for FakeController {
    async fn submit_job(&self, _: Request<pb::SubmitJobRequest>) -> Unary<pb::SubmitJobResponse> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_job(&self, _: Request<pb::GetJobRequest>) -> Unary<pb::Job> {
        Err(Status::unimplemented("fake"))
    }
    async fn list_jobs(&self, _: Request<pb::ListJobsRequest>) -> Unary<pb::ListJobsResponse> {
        Err(Status::unimplemented("fake"))
    }
    async fn cancel_job(&self, _: Request<pb::CancelJobRequest>) -> Unary<pb::Job> {
        Err(Status::unimplemented("fake"))
    }
    type WatchJobStream = Pin<Box<dyn Stream<Item = Result<pb::JobEvent, Status>> + Send>>;
    async fn watch_job(&self, _: Request<pb::WatchJobRequest>) -> Unary<Self::WatchJobStream> {
        Err(Status::unimplemented("fake"))
    }
    async fn list_agents(
        &self,
        _: Request<pb::ListAgentsRequest>,
    ) -> Unary<pb::ListAgentsResponse> {
        Err(Status::unimplemented("fake"))
    }
    async fn register_agent(
        &self,
        r: Request<pb::RegisterAgentRequest>,
    ) -> Unary<pb::RegisterAgentResponse> {
        let _ = self.calls.send(r.into_inner());
        Ok(Response::new(pb::RegisterAgentResponse {
            accepted: true,
            heartbeat_interval_s: 1,
        }))
    }
    async fn set_agent_draining(
        &self,
        _: Request<pb::SetAgentDrainingRequest>,
    ) -> Unary<pb::AgentInfo> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_results(
        &self,
        _: Request<pb::GetResultsRequest>,
    ) -> Unary<pb::GetResultsResponse> {
        Err(Status::unimplemented("fake"))
    }
    async fn compare(&self, _: Request<pb::CompareRequest>) -> Unary<pb::CompareResponse> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_run(&self, _: Request<pb::GetRunRequest>) -> Unary<pb::Run> {
        Err(Status::unimplemented("fake"))
    }
    async fn record_suite_run(&self, _: Request<pb::RecordSuiteRunRequest>) -> Unary<pb::SuiteRun> {
        Err(Status::unimplemented("fake"))
    }
    async fn list_suite_runs(
        &self,
        _: Request<pb::ListSuiteRunsRequest>,
    ) -> Unary<pb::ListSuiteRunsResponse> {
        Err(Status::unimplemented("fake"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_with_labels_and_repeats_at_the_heartbeat() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ctl_addr = listener.local_addr().unwrap();
    let (tx, mut calls) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::controller_server::ControllerServer::new(
                FakeController { calls: tx },
            ))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let agent = Agent::start(&format!(
        "name = \"gpu-test\"\nlabels = {{ rack = \"r7\" }}\n[controller]\naddress = \"http://{ctl_addr}\"\ninterval_s = 30\n"
    ))
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), calls.recv())
        .await
        .expect("registered")
        .unwrap();
    assert_eq!(first.name, "gpu-test");
    assert_eq!(first.labels.get("rack").map(String::as_str), Some("r7"));
    assert!(
        first.address.ends_with(&format!(":{}", agent.addr.port())),
        "{}",
        first.address
    );
    // The controller asked for a 1 s heartbeat (not the configured 30 s).
    let second = tokio::time::timeout(Duration::from_secs(5), calls.recv())
        .await
        .expect("heartbeat")
        .unwrap();
    assert_eq!(second.name, "gpu-test");
}
