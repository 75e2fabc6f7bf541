//! What fleetbench knows about inference engines, shared by the agent (which runs them) and the
//! controller (which validates job specs before anything runs):
//!
//! - [`EngineKind`]: the built-in kinds (`sglang`, `vllm`, `llamacpp`, `sim`, `generic`).
//! - [`flags`]: which flags a kind accepts and their types, so a bad value is refused by name.
//! - [`config_id`]: a config's identity, a hash of its canonical spec.
//! - log facts, crash classification and metric-name mapping per kind (modules added by the
//!   engine-knowledge work).

pub mod flags;
mod identity;
mod kind;

pub use identity::config_id;
pub use kind::{EngineKind, UnknownKind};
