//! The gRPC server: the agent service plus the standard health service, over mTLS (or plain
//! on loopback when configured insecure).
//!
//! This is the single place where the tonic server is built; tower layers go on the
//! `Server::builder()` below.

use std::future::Future;
use std::time::Duration;

use fleetbench_proto::agentpb::agent_server::AgentServer;
use fleetbench_support::telemetry::TraceContextLayer;
use std::sync::Arc;

use fleetbench_support::tls::{ReloadingTls, Role, peer_identity, tls_incoming};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;

use crate::service::AgentService;

/// Largest message accepted (a long log tail or a P2P report stays far below).
const MAX_MESSAGE: usize = 16 << 20;
/// HTTP/2 pings on every connection: a controller that vanished without closing its socket (a
/// partition, a power loss) is noticed, and the streams it held (a benchmark, a log follow)
/// end instead of running for a reader that is gone. The lease, not this, decides when the
/// engine stops.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lets through only callers whose certificate names an allowed controller identity with the
/// controller role: the CA also signs agents, operators and viewers, and none of them may drive
/// an agent. `None`: plaintext on loopback, no certificates to check.
fn authorize(
    allowed: Option<Vec<String>>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, Status> + Clone {
    move |req: tonic::Request<()>| {
        let Some(allowed) = &allowed else {
            return Ok(req);
        };
        let who = req
            .peer_certs()
            .and_then(|c| c.first().and_then(|d| peer_identity(d.as_ref())));
        match who {
            Some(id) if id.role == Some(Role::Controller) && allowed.contains(&id.name) => Ok(req),
            Some(id) => Err(Status::permission_denied(format!(
                "client certificate {id} may not call this agent: it answers only the \
                 controller identities {} (tls.allowed_clients)",
                allowed.join(", ")
            ))),
            None => Err(Status::unauthenticated(
                "no client certificate with a readable identity",
            )),
        }
    }
}

/// Serves until `shutdown` completes. With TLS, `allowed` names the controller identities
/// answered; the certificate files are re-read when a renewal rewrites them.
pub async fn serve(
    listener: TcpListener,
    tls: Option<(Arc<ReloadingTls>, Vec<String>)>,
    service: AgentService,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<AgentServer<AgentService>>().await;
    let (tls, allowed) = match tls {
        Some((tls, names)) => (Some(tls), Some(names)),
        None => (None, None),
    };
    // Each request runs in an `rpc.server` span continuing the caller's trace (W3C traceparent).
    let router = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .layer(TraceContextLayer)
        .add_service(health_service)
        .add_service(InterceptedService::new(
            AgentServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            authorize(allowed),
        ));
    match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(tls_incoming(listener, tls), shutdown)
                .await
        }
        None => {
            router
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                .await
        }
    }
}
