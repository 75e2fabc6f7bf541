//! Starting and stopping a controller: store, inventory and heartbeats, scheduler (resuming
//! unfinished jobs), the gRPC API and the `/metrics` endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use fleetbench_proto::controllerpb::controller_server::ControllerServer;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agents::{AgentConnector, ClientError, Inventory};
use crate::api::ControllerService;
use crate::config::ControllerConfig;
use crate::metrics::Metrics;
use crate::scheduler::{Scheduler, SchedulerError};
use crate::store::{Store, StoreError};

/// Errors starting a controller.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A configured or registered host has an unusable address or TLS material.
    #[error("host {name}: {source}")]
    Host { name: String, source: ClientError },
    /// Resuming unfinished jobs failed.
    #[error("resuming jobs: {0}")]
    Resume(#[from] SchedulerError),
    /// The API or metrics address could not be bound.
    #[error("binding {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The API's TLS material could not be loaded.
    #[error("api.tls: {0}")]
    Tls(#[from] fleetbench_support::tls::TlsError),
    /// The gRPC server could not be configured.
    #[error("api server: {0}")]
    Server(#[from] tonic::transport::Error),
}

/// A running controller.
#[derive(Debug)]
pub struct ControllerHandle {
    /// The API's address (with the port the OS chose when the config said 0).
    pub addr: SocketAddr,
    /// Where `/metrics` is served, when configured.
    pub metrics_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    pub store: Store,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    tasks: Vec<JoinHandle<()>>,
}

impl ControllerHandle {
    /// The API's URL, for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving; jobs in flight stay `running` in the store and resume at the next start.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.server.await;
        for t in self.tasks {
            let _ = t.await;
        }
        self.store.close().await;
    }

    /// Resolves when the server stops on its own (an error), for binaries to watch.
    pub fn token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// Starts a controller from a validated config.
pub async fn start(
    config: ControllerConfig,
    metrics: Arc<Metrics>,
) -> Result<ControllerHandle, StartError> {
    let store = Store::open(&config.store_url).await?;
    let shutdown = CancellationToken::new();
    let inventory = Inventory::new(
        AgentConnector::new(config.agent_tls.clone()),
        config.heartbeat_interval,
    );
    for h in &config.hosts {
        inventory
            .add(&h.name, &h.address, h.labels.clone(), "config")
            .map_err(|source| StartError::Host {
                name: h.name.clone(),
                source,
            })?;
    }
    for a in store.agents().await? {
        if config.hosts.iter().any(|h| h.name == a.name) {
            continue;
        }
        if let Err(e) = inventory.add(&a.name, &a.address, a.labels, "registered") {
            tracing::warn!(agent = %a.name, error = %e, "registered agent skipped");
        }
    }
    let mut tasks = vec![tokio::spawn(
        inventory.clone().heartbeat_loop(shutdown.clone()),
    )];

    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            what: "the API",
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        what: "the API",
        addr: config.listen,
        source,
    })?;
    let metrics_addr = match config.metrics_listen {
        Some(m) => {
            let l = TcpListener::bind(m)
                .await
                .map_err(|source| StartError::Bind {
                    what: "/metrics",
                    addr: m,
                    source,
                })?;
            let a = l.local_addr().map_err(|source| StartError::Bind {
                what: "/metrics",
                addr: m,
                source,
            })?;
            let (m, stop) = (metrics.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                if let Err(e) = crate::metrics::serve_until(m, l, stop.cancelled_owned()).await {
                    tracing::error!(error = %e, "/metrics server stopped");
                }
            }));
            Some(a)
        }
        None => None,
    };

    let scheduler = Scheduler::new(
        store.clone(),
        inventory.clone(),
        metrics.clone(),
        config.trial_attempts,
        config.host_wait,
        shutdown.clone(),
    );
    if !config.suites.is_empty() {
        tasks.push(tokio::spawn(crate::regress::schedule::run(
            scheduler.clone(),
            metrics.clone(),
            config.suites.clone(),
            shutdown.clone(),
        )));
    }
    let service = ControllerService {
        scheduler: scheduler.clone(),
        inventory,
        shared_agent_identities: Arc::new(config.api.shared_agent_identities.clone()),
    };
    let mut tokens = config.scoped_tokens.clone();
    if let Some(t) = &config.api_token {
        tokens.push((t.clone(), crate::authz::ApiRole::Admin));
    }
    let check = crate::authz::Authorize {
        tokens: Arc::new(tokens),
        tls: config.api.tls.is_some(),
    };
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &config.api.tls {
        builder = builder.tls_config(fleetbench_support::tls::server_tls(
            &tls.cert,
            &tls.key,
            &tls.client_ca,
        )?)?;
    }
    let router = builder.add_service(ControllerServer::with_interceptor(service, check));
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await
    });
    let resumed = if config.resume_jobs {
        scheduler.resume_all().await?
    } else {
        scheduler.abandon_all().await?
    };
    tracing::info!(%addr, resumed, "controller listening");
    Ok(ControllerHandle {
        addr,
        metrics_addr,
        metrics,
        store,
        shutdown,
        server,
        tasks,
    })
}
