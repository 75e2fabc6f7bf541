//! What fleetbench knows about inference engines, shared by the agent (which runs them) and the
//! controller (which validates job specs before anything runs):
//!
//! - [`EngineKind`]: the built-in kinds (`sglang`, `vllm`, `llamacpp`, `sim`, `generic`, and
//!   the router `sglang-router`).
//! - [`flags`]: which flags a kind accepts and their types, so a bad value is refused by name.
//! - [`config_id`]: a config's identity, a hash of its canonical spec.
//! - [`logs`]: facts read from start-up logs (effective server args, KV-cache size, ...).
//! - [`crash`]: why an engine died (`oom`, `python_exception`, `nccl`, ...), from its exit and
//!   its log tail.
//! - [`metrics`]: an engine's Prometheus `/metrics` mapped to common names.
//! - [`cache`]: emptying an engine's prefix cache, and its own figure of what it served from it.
//! - [`gang`]: one engine spanning hosts: each rank's rendezvous flags, per kind.
//! - [`defaults`]: the built-in profile data per kind (program, fixed args, probes, timeouts).
//! - [`deployment`]: replicas behind a router, each by its own counters, and the router's
//!   per-worker outcomes.
//!
//! Each kind's knowledge of all of the above lives in one module, `engine::<kind>`, reached
//! through one match (`engine::spec`); the modules above ask it and hold what kinds share.
//!
//! A pure library: no runtime, no network; callers feed it text.

pub mod cache;
pub mod crash;
pub mod defaults;
pub mod deployment;
mod engine;
pub mod flags;
pub mod gang;
mod identity;
mod kind;
pub mod logs;
pub mod metrics;
pub mod prom;
pub mod pyrepr;

pub use crash::{Crash, CrashClass, ExitInfo, classify};
pub use defaults::{KindDefaults, defaults};
pub use identity::config_id;
pub use kind::{EngineKind, UnknownKind};
pub use logs::{LogFact, LogParser, parser};
pub use metrics::{EngineMetricsData, Series, map_metrics, rate};
