//! The embedded controller `fleetbench run` starts when no controller address is given: a
//! loopback API on a free port, a SQLite store under the data directory, and the hosts given
//! (the CLI passes the local agent it started).

use std::path::Path;

use crate::config::{ControllerConfig, HostConfig};
use crate::metrics::Metrics;
use crate::server::{ControllerHandle, StartError, start};

/// Starts a controller for one user on this machine, its store at `DATA_DIR/controller.db`.
pub async fn start_embedded(
    data_dir: &Path,
    hosts: Vec<HostConfig>,
) -> Result<ControllerHandle, StartError> {
    let url = format!("sqlite://{}", data_dir.join("controller.db").display());
    let mut config = ControllerConfig::local(&url);
    config.hosts = hosts;
    config.resume_jobs = false;
    start(config, Metrics::new()).await
}
