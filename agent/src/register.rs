//! Self-registration: `RegisterAgent` on the controller, repeated as a heartbeat.

use std::collections::BTreeMap;
use std::time::Duration;

use fleetbench_proto::controllerpb::{RegisterAgentRequest, controller_client::ControllerClient};
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

use crate::config::ControllerConfig;

/// Why the controller endpoint could not be set up (it is then never called).
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// `controller.address` is not a usable URI.
    #[error("controller.address {address:?}: {message}")]
    Address { address: String, message: String },
    /// The client certificate files could not be loaded.
    #[error("controller.tls: {0}")]
    Tls(#[from] fleetbench_support::tls::TlsError),
}

/// Builds the (lazily connecting) endpoint; errors name the field.
pub fn endpoint(c: &ControllerConfig) -> Result<Endpoint, RegisterError> {
    let bad = |m: String| RegisterError::Address {
        address: c.address.clone(),
        message: m,
    };
    let mut ep = Endpoint::from_shared(c.address.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    if let Some(t) = &c.tls {
        let domain = match &t.domain {
            Some(d) => d.clone(),
            None => ep
                .uri()
                .host()
                .map(str::to_string)
                .ok_or_else(|| bad("no host".into()))?,
        };
        let tls = fleetbench_support::tls::client_tls(&t.ca, &t.cert, &t.key, &domain)?;
        ep = ep.tls_config(tls).map_err(|e| bad(e.to_string()))?;
    }
    Ok(ep)
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
                cfg.interval_s.min(10)
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(wait)) => {}
        }
    }
}
