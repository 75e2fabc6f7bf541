//! fleetbench-agent: the gRPC service on every GPU host. It owns the local inference engine
//! (one supervisor task, one process group), reads the host's GPUs, scrapes the engine's
//! metrics and runs the load generator against the engine on loopback.
//!
//! In-process use (the CLI's embedded mode):
//!
//! ```no_run
//! # async fn f() -> Result<(), fleetbench_agent::AgentError> {
//! let agent = fleetbench_agent::start(fleetbench_agent::AgentConfig::local("/tmp/fb")).await?;
//! println!("agent on {}", agent.addr);
//! agent.shutdown().await; // stops the engine; no process is left behind
//! # Ok(()) }
//! ```

pub mod allow;
pub mod bench;
pub mod bounds;
mod cache;
pub mod config;
pub mod convert;
pub mod dcgm;
pub mod engine_args;
pub mod engine_user;
pub mod external;
pub mod host;
pub mod http;
pub mod lease;
pub mod metrics;
mod private_file;
pub mod profile;
pub mod program;
pub mod register;
mod replicas;
pub mod server;
pub mod service;
pub mod status;
pub mod supervisor;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{AgentConfig, ConfigError};
pub use profile::Profile;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The TLS files could not be loaded.
    #[error("tls: {0}")]
    Tls(#[from] fleetbench_support::tls::TlsError),
    /// Self-registration could not be set up.
    #[error(transparent)]
    Register(#[from] register::RegisterError),
    /// The data directory could not be created.
    #[error("data_dir {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    /// The engine user could write or replace the data directory (a root agent only).
    #[error("data_dir: {0}")]
    UnsafeDataDir(String),
    /// The lease epoch file cannot be trusted (see [`lease`]).
    #[error(transparent)]
    EpochFile(#[from] lease::EpochFileError),
    /// The listen address could not be bound.
    #[error("listen {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    /// The address the gRPC server is bound to (the real port when the config said 0).
    pub addr: SocketAddr,
    stop: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    supervisor: supervisor::Supervisor,
    /// Ends expired leases (stopping the engine); awaited at shutdown.
    expiry: JoinHandle<()>,
}

impl AgentHandle {
    /// Stops the engine (its whole process group), then the server.
    pub async fn shutdown(self) {
        self.supervisor.shutdown().await;
        self.stop.cancel();
        let _ = self.expiry.await;
        match self.server.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "gRPC server ended with an error"),
            Err(e) => tracing::warn!(error = %e, "gRPC server task failed"),
            Ok(Ok(())) => {}
        }
    }

    /// Resolves when the server stops on its own (an error), for binaries that wait on it.
    pub async fn stopped(&mut self) -> Result<(), String> {
        match (&mut self.server).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Starts the agent: checks TLS material, creates the data directory, binds, serves. Nothing is
/// bound when any check fails.
pub async fn start(config: AgentConfig) -> Result<AgentHandle, AgentError> {
    if config.tls.is_none() && !config.listen.ip().is_loopback() {
        return Err(ConfigError::field(
            "insecure",
            "plaintext is allowed only on a loopback listen address",
        )
        .into());
    }
    let tls = match &config.tls {
        // Re-read when a renewal rewrites the files (cert-manager at day 60 of 90).
        Some(t) => Some(
            fleetbench_support::tls::ServerTlsFiles {
                cert: t.cert.clone(),
                key: t.key.clone(),
                client_ca: t.client_ca.clone(),
            }
            .reloading(fleetbench_support::tls::ClientAuth::Required)?,
        ),
        None => None,
    };
    let registration = match &config.controller {
        Some(c) => Some((register::endpoint(c)?, c.clone())),
        None => None,
    };
    // A root agent whose engines drop to the engine user: that user must not be able to write
    // or replace the data directory (checked before it is made, and again after).
    let engine_creds = match &config.engine_user {
        Some(u) if engine_user::agent_is_root() => engine_user::resolve(u, "NAME").ok(),
        _ => None,
    };
    let check_data_dir = || match &engine_creds {
        Some(c) => {
            engine_user::check_data_dir(&config.data_dir, c).map_err(AgentError::UnsafeDataDir)
        }
        None => Ok(()),
    };
    check_data_dir()?;
    std::fs::create_dir_all(config.data_dir.join("runs")).map_err(|source| {
        AgentError::DataDir {
            path: config.data_dir.display().to_string(),
            source,
        }
    })?;
    check_data_dir()?;
    // Before anything else runs: a corrupt epoch file must not let the agent hand out epochs.
    let leases = lease::Leases::open(&config.data_dir)?;
    supervisor::group::become_subreaper();
    // Before the port is bound: a controller must not start an engine beside a dead agent's.
    if let Some(r) = supervisor::leftover::reclaim(&config.data_dir).await {
        tracing::warn!(
            pgid = r.pgid,
            processes = r.processes,
            killed = r.killed,
            gone = r.gone,
            "stopped the engine a previous agent left running"
        );
    }
    let gpus = tokio::task::spawn_blocking(fleetbench_gpu::Gpus::init)
        .await
        .unwrap_or_else(|e| {
            fleetbench_gpu::Gpus::unavailable(format!("NVML initialisation panicked: {e}"))
        });
    if let Some(reason) = gpus.unavailable_reason() {
        tracing::info!(%reason, "no GPUs to report");
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| AgentError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| AgentError::Bind {
        addr: config.listen,
        source,
    })?;

    let http = http::HttpClient::new();
    let sup = supervisor::Supervisor::start(
        supervisor::SupervisorConfig {
            data_dir: config.data_dir.clone(),
            release_timeout: config.release_timeout,
            log_ring_lines: config.log_ring_lines,
        },
        gpus.clone(),
        http.clone(),
        leases.watch(),
    );
    let cfg = Arc::new(config);
    let stop = CancellationToken::new();
    let expiry = tokio::spawn(leases.clone().run_expiry(sup.clone(), stop.clone()));
    let service = service::AgentService::new(cfg.clone(), sup.clone(), gpus, http, leases);
    let allowed = cfg.tls.as_ref().map(|t| t.allowed_clients.clone());
    let server = tokio::spawn(server::serve(
        listener,
        tls.map(|t| (t, allowed.unwrap_or_default())),
        service,
        stop.clone().cancelled_owned(),
    ));
    if let Some((ep, c)) = registration {
        let advertise = c
            .advertise
            .clone()
            .unwrap_or_else(|| format!("{}:{}", host::hostname(), addr.port()));
        tokio::spawn(register::run(
            ep,
            c,
            cfg.name.clone(),
            advertise,
            cfg.labels.clone(),
            stop.clone(),
        ));
    }
    tracing::info!(%addr, tls = cfg.tls.is_some(), profiles = ?cfg.profiles.keys().collect::<Vec<_>>(), "agent serving");
    Ok(AgentHandle {
        addr,
        stop,
        server,
        supervisor: sup,
        expiry,
    })
}
