//! Self-registration: `RegisterAgent` on the controller, repeated as a heartbeat.

use std::collections::BTreeMap;
use std::time::Duration;

use fleetbench_proto::controllerpb::{RegisterAgentRequest, controller_client::ControllerClient};
use fleetbench_support::grpc::EndpointError;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

use crate::config::ControllerConfig;

/// Why the controller endpoint could not be set up (it is then never called); each names the
/// config field.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// `controller.address` is not a usable URL.
    #[error("controller.address: {0}")]
    Address(EndpointError),
    /// The client certificate files of `controller.tls` could not be loaded.
    #[error("controller.tls: {0}")]
    Tls(EndpointError),
}

/// Builds the (lazily connecting) endpoint; errors name the field.
pub fn endpoint(c: &ControllerConfig) -> Result<Endpoint, RegisterError> {
    let tls = c.tls.as_ref().map(|t| t.client());
    let ep = fleetbench_support::grpc::endpoint(&c.address, tls).map_err(|e| match e {
        EndpointError::Tls(_) => RegisterError::Tls(e),
        EndpointError::Url { .. } => RegisterError::Address(e),
    })?;
    Ok(ep.timeout(Duration::from_secs(10)))
}

/// Registers every interval until `stop`; failures are logged and retried.
pub async fn run(
    ep: Endpoint,
    cfg: ControllerConfig,
    name: String,
    advertise: String,
    labels: BTreeMap<String, String>,
    stop: CancellationToken,
) {
    let mut client = ControllerClient::new(ep.connect_lazy());
    let mut last_ok: Option<bool> = None;
    loop {
        let req = RegisterAgentRequest {
            name: name.clone(),
            address: advertise.clone(),
            labels: labels.clone().into_iter().collect(),
        };
        let wait = match client.register_agent(req).await {
            Ok(resp) => {
                let r = resp.into_inner();
                if last_ok != Some(true) {
                    tracing::info!(controller = %cfg.address, accepted = r.accepted, "registered with the controller");
                }
                last_ok = Some(true);
                if r.heartbeat_interval_s > 0 {
                    u64::from(r.heartbeat_interval_s)
                } else {
                    cfg.interval_s
                }
            }
            Err(status) => {
                if last_ok != Some(false) {
                    tracing::warn!(controller = %cfg.address, error = %status, "registration failed; retrying");
                }
                last_ok = Some(false);
                // The channel keeps the client certificate it was built with: after a renewal
                // rewrote the files (and the old certificate expired) only a new one connects.
                if let Ok(fresh) = endpoint(&cfg) {
                    client = ControllerClient::new(fresh.connect_lazy());
                }
                cfg.interval_s.min(10)
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(wait)) => {}
        }
    }
}
