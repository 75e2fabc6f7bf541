//! Agent clients. Every gRPC client to an agent is built here, so that one layer (trace-context
//! injection, timeouts, TLS) applies to every call the controller makes.

use std::time::Duration;

use fleetbench_proto::agentpb::agent_client;
use fleetbench_support::grpc::{self, EndpointError};
use fleetbench_support::telemetry::PropagateContext;
use fleetbench_support::tls::ClientTlsFiles;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A client of one agent. Every call carries the caller's trace context (W3C `traceparent`), so
/// the agent's spans join the job's trace.
pub type AgentClient = agent_client::AgentClient<InterceptedService<Channel, PropagateContext>>;

/// Errors building an agent client: the agent's address does not make a URL, or the TLS
/// material could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("agent {address:?}: {source}")]
pub struct ClientError {
    address: String,
    source: EndpointError,
}

/// Builds agent clients with the controller's TLS material (none: plain HTTP/2, for loopback).
#[derive(Debug, Clone, Default)]
pub struct AgentConnector {
    tls: Option<ClientTlsFiles>,
}

impl AgentConnector {
    pub fn new(tls: Option<ClientTlsFiles>) -> Self {
        AgentConnector { tls }
    }

    /// A client for the agent at `host:port`. The connection is made on first use and remade
    /// after a failure, so a client outlives an agent restart. The endpoint's keep-alive ends
    /// the streams of a host that vanishes without closing its sockets (power loss,
    /// partition), so that its trial moves to another host.
    pub fn client(&self, address: &str) -> Result<AgentClient, ClientError> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let tls = self.tls.as_ref().map(ClientTlsFiles::client);
        let endpoint = grpc::endpoint(&format!("{scheme}://{address}"), tls)
            .map_err(|source| ClientError {
                address: address.to_string(),
                source,
            })?
            // An agent is on the controller's network: a connect slower than this is a host
            // that is down.
            .connect_timeout(Duration::from_secs(3));
        Ok(
            agent_client::AgentClient::with_interceptor(endpoint.connect_lazy(), PropagateContext)
                .max_decoding_message_size(64 * 1024 * 1024),
        )
    }
}
