//! The gRPC server: the agent service plus the standard health service, over mTLS (or plain
//! on loopback when configured insecure).
//!
//! This is the single place where the tonic server is built; tower layers go on the
//! `Server::builder()` below.

use std::future::Future;

use fleetbench_proto::agentpb::agent_server::AgentServer;
use fleetbench_support::telemetry::TraceContextLayer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Server, ServerTlsConfig};

use crate::service::AgentService;

/// Largest message accepted (a long log tail or a P2P report stays far below).
const MAX_MESSAGE: usize = 16 << 20;

/// Serves until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    tls: Option<ServerTlsConfig>,
    service: AgentService,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<AgentServer<AgentService>>().await;
    let mut builder = Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    // Each request runs in an `rpc.server` span continuing the caller's trace (W3C traceparent).
    builder
        .layer(TraceContextLayer)
        .add_service(health_service)
        .add_service(
            AgentServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}
