//! Starting and stopping a controller: store, inventory and heartbeats, scheduler (resuming
//! unfinished jobs), the gRPC API and the `/metrics` endpoint.
//!
//! What only a leader does (heartbeats to agents, scheduled suites, running jobs) is a term
//! ([`Duties`]): on SQLite the one controller's term lasts from start to shutdown; on
//! PostgreSQL [`leader::elect`] begins and ends terms as leadership comes and goes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fleetbench_proto::controllerpb::controller_server::ControllerServer;
use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agents::{AgentConnector, ClientError, Inventory};
use crate::api::ControllerService;
use crate::config::{ControllerConfig, MetricsAuth};
use crate::leader::{self, Role, RoleRx};
use crate::metrics::{Metrics, ScrapePolicy};
use crate::scheduler::{Scheduler, SchedulerError};
use crate::store::{Backend, LeaderLock, Store, StoreError};

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
    /// `/metrics`' TLS material could not be loaded.
    #[error("metrics.tls: {0}")]
    MetricsTls(fleetbench_support::tls::TlsError),
    /// The gRPC server could not be configured.
    #[error("api server: {0}")]
    Server(#[from] tonic::transport::Error),
    /// The first term (SQLite: the only one) could not start.
    #[error("starting to lead: {0}")]
    Term(String),
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
    /// Leader, standby or starting, as it changes.
    pub role: RoleRx,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    tasks: Vec<JoinHandle<()>>,
    duties: Arc<Duties>,
    /// SQLite: the lock that keeps a second controller off the file, held until shutdown.
    _sqlite_lock: Option<std::fs::File>,
}

impl ControllerHandle {
    /// The API's URL, for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving; jobs in flight stay `running` in the store and resume at the next start
    /// (or on the standby that takes over). Job tasks are awaited (bounded by
    /// [`crate::scheduler::STOP_WAIT`]) before the store closes.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.server.await;
        for t in self.tasks {
            let _ = t.await;
        }
        // SQLite (no election task): end the one term here.
        self.duties.end_term(false).await;
        self.store.close().await;
    }

    /// Resolves when the server stops on its own (an error), for binaries to watch.
    pub fn token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// What a leadership term starts and stops: the agents' heartbeats, scheduled suites, and the
/// jobs (resumed from the store at its start).
#[derive(Debug)]
struct Duties {
    config: ControllerConfig,
    inventory: Arc<Inventory>,
    scheduler: Scheduler,
    metrics: Arc<Metrics>,
    store: Store,
    term: std::sync::Mutex<Option<(CancellationToken, Vec<JoinHandle<()>>)>>,
}

impl Duties {
    async fn begin_term(&self, token: CancellationToken) -> Result<(), String> {
        let config = &self.config;
        for h in &config.hosts {
            self.inventory
                .add(&h.name, &h.address, h.labels.clone(), "config")
                .map_err(|e| format!("host {}: {e}", h.name))?;
        }
        // Agents registered with any controller of this store (a former leader included).
        for a in self.store.agents().await.map_err(|e| e.to_string())? {
            if config.hosts.iter().any(|h| h.name == a.name) {
                continue;
            }
            if let Err(e) = self
                .inventory
                .add(&a.name, &a.address, a.labels, "registered")
            {
                tracing::warn!(agent = %a.name, error = %e, "registered agent skipped");
            }
        }
        let mut tasks = vec![tokio::spawn(
            self.inventory.clone().heartbeat_loop(token.clone()),
        )];
        self.scheduler.begin_term(token.clone());
        if !config.suites.is_empty() {
            tasks.push(tokio::spawn(crate::regress::schedule::run(
                self.scheduler.clone(),
                self.metrics.clone(),
                config.suites.clone(),
                token.clone(),
            )));
        }
        *self.term.lock().expect("term lock") = Some((token, tasks));
        let resumed = if config.resume_jobs {
            self.scheduler.resume_all().await
        } else {
            self.scheduler.abandon_all().await
        }
        .map_err(|e| format!("resuming jobs: {e}"))?;
        tracing::info!(resumed, "term started");
        Ok(())
    }

    async fn end_term(&self, deposed: bool) {
        let Some((token, tasks)) = self.term.lock().expect("term lock").take() else {
            return;
        };
        self.scheduler
            .end_term(deposed, crate::scheduler::STOP_WAIT)
            .await;
        token.cancel();
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl leader::Term for Arc<Duties> {
    fn begin(&self, token: CancellationToken) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.begin_term(token))
    }
    fn end(&self, deposed: bool) -> BoxFuture<'_, ()> {
        Box::pin(self.end_term(deposed))
    }
    fn token(&self) -> Option<CancellationToken> {
        self.term
            .lock()
            .expect("term lock")
            .as_ref()
            .map(|(t, _)| t.clone())
    }
}

/// How long `start` waits for the first election to settle (leader or standby) on PostgreSQL.
const FIRST_ELECTION_WAIT: Duration = Duration::from_secs(15);

/// `/metrics`' policy from `[metrics]`: the API's tokens prove a role there too.
fn scrape_policy(config: &ControllerConfig) -> Result<ScrapePolicy, StartError> {
    let tls = match &config.metrics.tls {
        Some(t) => Some(
            t.reloading(fleetbench_support::tls::ClientAuth::Optional)
                .map_err(StartError::MetricsTls)?,
        ),
        None => None,
    };
    Ok(ScrapePolicy::new(
        tls,
        api_tokens(config),
        config.metrics.auth == MetricsAuth::Viewer,
    ))
}

/// Every token the config accepts, with its role (the legacy `api.token` is an admin's).
fn api_tokens(config: &ControllerConfig) -> Vec<(String, crate::authz::ApiRole)> {
    let mut tokens = config.scoped_tokens.clone();
    if let Some(t) = &config.api_token {
        tokens.push((t.clone(), crate::authz::ApiRole::Admin));
    }
    tokens
}

/// Starts a controller from a validated config.
/// Removes a host's GPU and engine series from `/metrics` when it turns unreachable: a lost
/// host's last values must not stay on the dashboards as if current.
async fn drop_lost_hosts_series(
    inventory: Arc<Inventory>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut changed = inventory.subscribe();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = changed.changed() => if r.is_err() { return },
        }
        // Names only: this runs on every inventory change (a thousand at the end of a job
        // spread over a thousand hosts), and a full listing clones every host's facts.
        for name in inventory.unreachable() {
            metrics.host_series_remove(&name);
        }
    }
}

pub async fn start(
    config: ControllerConfig,
    metrics: Arc<Metrics>,
) -> Result<ControllerHandle, StartError> {
    let store = Store::open(&config.store_url)
        .await?
        .with_retry(config.store_retry);
    // SQLite serves one controller: refuse a second one before anything binds.
    let sqlite_lock = match store.backend() {
        Backend::Sqlite => Some(leader::lock_sqlite(&store)?),
        Backend::Postgres => None,
    };
    let shutdown = CancellationToken::new();
    let inventory = Inventory::new(
        AgentConnector::new(config.agent_tls.clone()),
        config.heartbeat_interval,
    );
    // Addresses are checked before anything binds (hosts are added when the term begins).
    for h in &config.hosts {
        AgentConnector::new(config.agent_tls.clone())
            .client(&h.address)
            .map_err(|source| StartError::Host {
                name: h.name.clone(),
                source,
            })?;
    }
    metrics.set_job_series_ttl(config.metrics_job_ttl);
    // A lost host's GPU and engine series leave /metrics (the heartbeats that find it lost run
    // only while this controller leads).
    let mut tasks = vec![tokio::spawn(drop_lost_hosts_series(
        inventory.clone(),
        metrics.clone(),
        shutdown.clone(),
    ))];

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
            let policy = scrape_policy(&config)?;
            if !a.ip().is_loopback() && config.metrics.auth == MetricsAuth::None {
                tracing::warn!(
                    addr = %a,
                    "/metrics is open beyond loopback (metrics.unauthenticated_off_loopback)"
                );
            }
            let (m, stop) = (metrics.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                if let Err(e) =
                    crate::metrics::serve_with(m, l, policy, stop.cancelled_owned()).await
                {
                    tracing::error!(error = %e, "/metrics server stopped");
                }
            }));
            Some(a)
        }
        None => None,
    };

    // The telemetry writer is awaited with the other tasks: it stores the relays' last
    // windows before the store closes.
    let (scheduler, telemetry_writer) = Scheduler::new(
        store.clone(),
        inventory.clone(),
        metrics.clone(),
        config.trial_attempts,
        config.host_wait,
        config.telemetry_interval,
        shutdown.clone(),
    );
    let scheduler = scheduler.with_lease_ttl(config.lease_ttl);
    tasks.push(telemetry_writer);
    let (role_tx, role) = watch::channel(Role::Starting);
    let service = ControllerService {
        role: role.clone(),
        scheduler: scheduler.clone(),
        inventory: inventory.clone(),
        shared_agent_identities: Arc::new(config.api.shared_agent_identities.clone()),
    };
    let check = crate::authz::Authorize {
        tokens: Arc::new(api_tokens(&config)),
        tls: config.api.tls.is_some(),
        role: role.clone(),
    };
    // Re-read when a renewal rewrites the files (cert-manager at day 60 of 90).
    let api_tls = match &config.api.tls {
        Some(t) => Some(t.reloading(fleetbench_support::tls::ClientAuth::Required)?),
        None => None,
    };
    let advertise = config.advertise_url.clone().unwrap_or_else(|| {
        let scheme = if config.api.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{addr}")
    });
    let duties = Arc::new(Duties {
        config,
        inventory,
        scheduler: scheduler.clone(),
        metrics: metrics.clone(),
        store: store.clone(),
        term: std::sync::Mutex::new(None),
    });
    match LeaderLock::new(&store) {
        None => {
            // SQLite: this controller leads from the start, alone.
            duties
                .begin_term(shutdown.child_token())
                .await
                .map_err(StartError::Term)?;
            role_tx.send_replace(Role::Leader { epoch: 0 });
        }
        Some(lock) => {
            let mut settled = role.clone();
            tasks.push(tokio::spawn(leader::elect(
                lock,
                store.clone(),
                leader::holder_name(),
                advertise.clone(),
                role_tx,
                duties.clone(),
                shutdown.clone(),
            )));
            // A lone controller leads before `start` returns, so its first caller is served.
            let _ = tokio::time::timeout(
                FIRST_ELECTION_WAIT,
                settled.wait_for(|r| *r != Role::Starting),
            )
            .await;
        }
    }

    let router = tonic::transport::Server::builder()
        .add_service(ControllerServer::with_interceptor(service, check));
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        match api_tls {
            Some(tls) => {
                let incoming = fleetbench_support::tls::tls_incoming(listener, tls);
                router
                    .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                    .await
            }
            None => {
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                router
                    .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                    .await
            }
        }
    });
    tracing::info!(%addr, %advertise, role = ?*role.borrow(), "controller listening");
    Ok(ControllerHandle {
        addr,
        metrics_addr,
        metrics,
        store,
        role,
        shutdown,
        server,
        tasks,
        duties,
        _sqlite_lock: sqlite_lock,
    })
}
