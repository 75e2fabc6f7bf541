//! fleetbench-loadgen: an OpenAI-compatible streaming load generator.
//!
//! A [`Runner`] resolves the model (`/v1/models`), builds every prompt once (shaped to exact token
//! lengths with a local `tokenizer.json` or the server's `/tokenize`), then runs load levels:
//! closed loop at a concurrency, or open loop at a request rate (Poisson or gamma arrivals,
//! optionally capped). Latency counts from each request's intended send time, so queueing in the
//! client or the server cannot hide (no coordinated omission); timestamps are taken as bytes
//! arrive; token counts come from the server's `usage`.
//!
//! The protocol that keeps a figure from flattering a config: every request's prompt starts
//! with a marker unique to the run, level and request (no engine cache serves a prompt by
//! accident; see `dataset::mark`), failures are counted as a per-level error rate, a level can
//! measure steady state only ([`Runner::with_window`]), and a level with fewer requests than
//! [`BURST_FACTOR`] times its concurrency is marked a burst.

mod arrivals;
mod client;
mod config;
mod dataset;
mod endpoint;
mod error;
mod level;
mod report;
mod runner;
mod sse;
mod stats;
pub mod table;
mod tokenize;

pub use arrivals::{schedule, schedule_for};
pub use client::ConnectionStats;
pub use config::{Api, BenchConfig, Bound, DatasetSpec, Level, Slo};
pub use endpoint::ClientOptions;
pub use error::{Failure, FailureKind, LoadgenError};
pub use level::BURST_FACTOR;
pub use report::{
    BenchReport, LatencyHist, LeftOut, LevelHists, LevelOutcome, LevelReport, Progress,
    RequestRecord,
};
pub use runner::{Runner, Shaping};
pub use stats::{Stats, percentile_key};

/// Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`, off in every build of the
/// binaries): the SSE scanner stays crate-private, and this is the one door to it.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::sse::fuzz_one as sse;
}
