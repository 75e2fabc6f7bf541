//! Many stand-ins in one process: each a real tonic server on its own loopback port (and, when
//! asked, its own loopback address 127.0.x.y), each registering itself with the controller the
//! way a real agent does (`RegisterAgent`, repeated at the interval the controller answers).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use fleetbench_proto::agentpb::agent_server::AgentServer;
use fleetbench_proto::controllerpb::{RegisterAgentRequest, controller_client::ControllerClient};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::standin::{StandIn, Timing};

/// Errors starting a fleet.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A stand-in's port could not be bound.
    #[error("binding stand-in {name} on {addr}: {source}")]
    Bind {
        name: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The controller address is not a URI.
    #[error("--controller {address:?}: {message}")]
    Controller { address: String, message: String },
}

/// What to start.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub agents: usize,
    /// Agent names are `{prefix}-{index:04}`.
    pub prefix: String,
    /// Labels every stand-in reports and registers with.
    pub labels: Vec<(String, String)>,
    pub timing: Timing,
    /// Bind agent `i` on its own address 127.0.x.y instead of all on 127.0.0.1.
    pub distinct_addresses: bool,
    /// `http://host:port` of the controller to register with; none: do not register.
    pub controller: Option<String>,
    /// A bearer token for `RegisterAgent` (a scoped `agent` token).
    pub token: Option<String>,
    /// Answer `WatchEngine` with UNIMPLEMENTED, as an agent older than it (the controller
    /// polls `GetEngine` instead).
    pub without_watch_engine: bool,
}

/// A running fleet of stand-ins.
#[derive(Debug)]
pub struct Fleet {
    /// `(name, address)` of every stand-in.
    pub agents: Vec<(String, SocketAddr)>,
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

fn address_of(i: usize, distinct: bool) -> IpAddr {
    if !distinct {
        return IpAddr::V4(Ipv4Addr::LOCALHOST);
    }
    // 127.0.1.1 onwards: 250 per third octet, never .0 or .255.
    let third = 1 + (i / 250) as u8;
    let fourth = 1 + (i % 250) as u8;
    IpAddr::V4(Ipv4Addr::new(127, 0, third, fourth))
}

impl Fleet {
    /// Binds every stand-in, serves them and starts their registrations.
    pub async fn start(cfg: FleetConfig) -> Result<Fleet, FleetError> {
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let mut agents = Vec::with_capacity(cfg.agents);
        let endpoint = match &cfg.controller {
            Some(c) => Some(
                fleetbench_support::grpc::endpoint(c, None)
                    .map_err(|e| FleetError::Controller {
                        address: c.clone(),
                        message: e.to_string(),
                    })?
                    .timeout(Duration::from_secs(10)),
            ),
            None => None,
        };
        for i in 0..cfg.agents {
            let name = format!("{}-{i:04}", cfg.prefix);
            let bind = SocketAddr::new(address_of(i, cfg.distinct_addresses), 0);
            let listener = TcpListener::bind(bind)
                .await
                .map_err(|source| FleetError::Bind {
                    name: name.clone(),
                    addr: bind,
                    source,
                })?;
            let addr = listener.local_addr().map_err(|source| FleetError::Bind {
                name: name.clone(),
                addr: bind,
                source,
            })?;
            let mut standin = StandIn::new(&name, cfg.labels.clone(), cfg.timing);
            if cfg.without_watch_engine {
                standin = standin.without_watch_engine();
            }
            let router = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(Duration::from_secs(10)))
                .http2_keepalive_timeout(Some(Duration::from_secs(20)))
                .add_service(AgentServer::new(standin));
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let s = stop.clone();
            let n = name.clone();
            tasks.spawn(async move {
                if let Err(e) = router
                    .serve_with_incoming_shutdown(incoming, s.cancelled_owned())
                    .await
                {
                    tracing::error!(agent = %n, error = %e, "stand-in server stopped");
                }
            });
            if let Some(ep) = &endpoint {
                // Its own connection, as a real agent on its own host has.
                let client = ControllerClient::new(ep.connect_lazy());
                let req = RegisterAgentRequest {
                    name: name.clone(),
                    address: addr.to_string(),
                    labels: cfg.labels.iter().cloned().collect(),
                };
                // Registrations spread over the first second, as agents coming up do.
                let delay = Duration::from_millis((i as u64 * 1000) / cfg.agents.max(1) as u64);
                tasks.spawn(register(
                    client,
                    req,
                    cfg.token.clone(),
                    delay,
                    stop.clone(),
                ));
            }
            agents.push((name, addr));
        }
        Ok(Fleet {
            agents,
            stop,
            tasks,
        })
    }

    /// Stops every server and registration and waits for them.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Registers every interval the controller answers until `stop`; failures retry after 2 s.
async fn register(
    mut client: ControllerClient<tonic::transport::Channel>,
    req: RegisterAgentRequest,
    token: Option<String>,
    delay: Duration,
    stop: CancellationToken,
) {
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(delay) => {}
    }
    let mut failing = false;
    loop {
        let mut r = tonic::Request::new(req.clone());
        if let Some(t) = &token
            && let Ok(v) = format!("Bearer {t}").parse()
        {
            r.metadata_mut().insert("authorization", v);
        }
        let wait = match client.register_agent(r).await {
            Ok(resp) => {
                failing = false;
                Duration::from_secs(u64::from(resp.into_inner().heartbeat_interval_s.max(1)))
            }
            Err(status) => {
                if !failing {
                    tracing::warn!(agent = %req.name, error = %status, "registration failed; retrying");
                }
                failing = true;
                Duration::from_secs(2)
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
