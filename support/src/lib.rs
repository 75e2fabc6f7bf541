//! Process plumbing shared by fleetbench's binaries (agent, controller, CLI, sim).
//!
//! - [`telemetry`]: the one function each binary calls to set up tracing and OpenTelemetry; it
//!   returns a guard that flushes and shuts the providers down on drop.
//! - [`grpc`]: the one builder of gRPC client endpoints (transport settings, mTLS).
//! - [`signal`]: the one handler of SIGTERM and SIGINT.
//! - [`tls`]: loading certificate material for mTLS, and writing a development CA with agent and
//!   controller certificates (`fleetbench certs init`).

pub mod grpc;
pub mod signal;
pub mod telemetry;
pub mod tls;
