//! The wire contract of fleetbench: one place that owns every `.proto` file, compiled once.
//!
//! Packages are versioned (`fleetbench.agent.v1`, `fleetbench.controller.v1`); a breaking change
//! gets a new package, never a renumbered field.

/// `fleetbench.agent.v1`: the agent on every GPU host.
pub mod agent {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("fleetbench.agent.v1");
    }
}

/// `fleetbench.controller.v1`: the controller the CLI talks to.
pub mod controller {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("fleetbench.controller.v1");
    }
}

pub mod budget;
pub mod limits;
pub mod spans;
pub mod words;

pub use words::Word;

pub use agent::v1 as agentpb;
pub use controller::v1 as controllerpb;

/// A closed-loop level with fewer measured requests than this many times its concurrency is a
/// burst (`LevelResult.burst`): its figures describe the first synchronized wave. The load
/// generator marks levels with it; the tuner never cuts a rung below it.
pub const BURST_FACTOR: u32 = 4;

/// Milliseconds since the Unix epoch, the timestamp every message carries.
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
