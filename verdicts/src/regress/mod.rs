//! Regression verdicts of a suite run: every gated metric at every level against the baseline
//! and the suite's stored history. What runs the suite and keeps its history (a controller or
//! the CLI's embedded one) lives in the controller; the verdicts are here so that both give the
//! same answer from the same code.
//!
//! - [`verdict`]: per config, workload, level and metric (the tolerance tested with the
//!   run-to-run variance from the history, Holm over the suite, error-rate rise, drift);
//!   rendering. The statistics live in `fleetbench-stats`.
//! - [`trend`]: each check over the stored history: its series and change points.
//! - [`junit`]: JUnit XML for CI.

pub mod junit;
pub mod trend;
pub mod verdict;

pub use verdict::{Grouped, Status, Verdict, group};

/// A stored run of the suite with its results, as the verdicts read the history.
#[derive(Debug, Clone)]
pub struct PastRun {
    pub job_id: String,
    pub created_unix_ms: i64,
    pub levels: Grouped,
}
