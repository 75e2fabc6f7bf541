//! fleetbench-controller: inventory, scheduler, store, API.
//!
//! - [`config`]: the controller's one validated config struct.
//! - [`store`]: jobs, trials, runs, level results, telemetry, events (SQLite or PostgreSQL).
//! - [`agents`]: agent clients (built in one place) and the inventory with heartbeats.
//! - [`scheduler`]: jobs into trials, trials onto hosts, retries, cancel, resume.
//! - [`api`]: the `fleetbench.controller.v1.Controller` gRPC service and its auth.
//! - [`leader`]: one leader among controllers sharing a PostgreSQL store.
//! - [`server`]: start/stop a whole controller; [`embedded`]: the CLI's in-process one.
//! - [`regress`]: the suites it runs on a schedule and the suite history in its store; running
//!   a suite or a tuning search is `fleetbench-rounds`, which the CLI runs.

pub mod agents;
pub mod api;
pub mod authz;
pub mod config;
pub mod embedded;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod regress;
pub mod scheduler;
pub mod server;
pub mod store;

pub use config::{ConfigError, ControllerConfig, HostConfig};
pub use server::{ControllerHandle, StartError, start};
