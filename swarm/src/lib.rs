//! Stand-in agents for measuring the controller at fleet scale.
//!
//! A thousand GPU hosts cannot be had for a test, and a thousand real agents with a thousand
//! simulated engines would measure this machine, not the controller. A stand-in speaks the real
//! `fleetbench.agent.v1` gRPC API on its own port, registers itself like an agent, and answers
//! with an engine's timing (start-up time, each level's duration and figures from the simulated
//! engine's model, telemetry at the requested interval) without starting any process. The
//! controller cannot tell it from an agent; what it costs the controller is what a fleet costs.
//!
//! Figures a stand-in reports are predictions, never measurements: they serve scale and
//! scheduling tests only (its host facts and registration carry the label `standin = "true"`).
//!
//! - [`standin`]: one stand-in, the `Agent` service.
//! - [`model`]: the predicted levels and telemetry.
//! - [`fleet`]: many stand-ins in one process, registering with a controller.

pub mod fleet;
mod lease;
pub(crate) mod model;
pub mod standin;

pub use fleet::{Fleet, FleetConfig, FleetError};
pub use standin::{StandIn, Timing};
