//! fleetbench-sim: a simulated SGLang-like inference server.
//!
//! Two modes. Fixed-latency mode (`--ttft-ms`, `--itl-ms`) answers every request with exactly
//! those delays, measured from the request's arrival on absolute deadlines, whatever the load:
//! the instrument the load generator is tested against. Model mode (the default) runs a
//! continuous-batching scheduler whose step times follow [`model`], changed by SGLang's flags the
//! way the real flags change a real engine; [`model`] also exposes the same model as pure
//! functions (step time, predicted throughput, the knee under an SLO) for the tuning and
//! regression work.

pub mod args;
pub mod body;
pub mod engine;
pub mod faults;
pub mod gang;
pub mod logs;
pub mod metrics;
pub mod model;
pub mod prefix;
pub mod reqfaults;
pub mod sched;
pub mod server;
pub mod sse;
pub mod startup;
pub mod timer;

pub use args::{ArgError, MoeBackend, SimArgs, StreamWrites, parse_args};
pub use model::ModelParams;
