//! Agent clients. Every gRPC client to an agent is built here, so that one layer (trace-context
//! injection, timeouts, TLS) applies to every call the controller makes.

use std::time::Duration;

use fleetbench_proto::agentpb::agent_client;
use fleetbench_support::telemetry::PropagateContext;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::config::AgentTls;

/// A client of one agent. Every call carries the caller's trace context (W3C `traceparent`), so
/// the agent's spans join the job's trace.
pub type AgentClient = agent_client::AgentClient<InterceptedService<Channel, PropagateContext>>;

/// Errors building an agent client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent's address does not make a valid URI.
    #[error("agent address {address:?}: {source}")]
    Address {
        address: String,
        source: tonic::transport::Error,
    },
    /// The TLS material could not be loaded.
    #[error("agent TLS: {0}")]
    Tls(#[from] fleetbench_support::tls::TlsError),
}

/// Builds agent clients with the controller's TLS material (none: plain HTTP/2, for loopback).
#[derive(Debug, Clone, Default)]
pub struct AgentConnector {
    tls: Option<AgentTls>,
}

impl AgentConnector {
    pub fn new(tls: Option<AgentTls>) -> Self {
        AgentConnector { tls }
    }

    fn tls_config(&self, address: &str) -> Result<Option<ClientTlsConfig>, ClientError> {
        let Some(t) = &self.tls else { return Ok(None) };
        let domain = t.domain.clone().unwrap_or_else(|| {
            address
                .rsplit_once(':')
                .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
                .unwrap_or_else(|| address.to_string())
        });
        Ok(Some(fleetbench_support::tls::client_tls(
            &t.ca, &t.cert, &t.key, &domain,
        )?))
    }

    /// A client for the agent at `host:port`. The connection is made on first use and remade
    /// after a failure, so a client outlives an agent restart.
    pub fn client(&self, address: &str) -> Result<AgentClient, ClientError> {
        let tls = self.tls_config(address)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let addr_err = |source| ClientError::Address {
            address: address.to_string(),
            source,
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(addr_err)?
            .connect_timeout(Duration::from_secs(3))
            .tcp_nodelay(true)
            // A host that vanishes without closing its sockets (power loss, partition) must
            // still end the streams of its trial, so that the trial moves to another host.
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).map_err(addr_err)?;
        }
        Ok(
            agent_client::AgentClient::with_interceptor(endpoint.connect_lazy(), PropagateContext)
                .max_decoding_message_size(64 * 1024 * 1024),
        )
    }
}
