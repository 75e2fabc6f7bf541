//! Tuning searches over engine flags (`[search]` in a job spec; docs/tuning.md).
//!
//! `fleetbench tune` runs a search in the CLI's process: each round is an ordinary job on the
//! controller (through [`Fleet`](crate::Fleet)), and the scores and decisions are made here.
//!
//! - [`space`]: candidates from the space (grid, constraints, random draw) and the job spec
//!   of a round.
//! - [`score`]: a candidate's objective under the SLO, Pareto front, engine-minutes.
//! - [`search`]: grid / random / successive halving, one job per round.
//! - [`saturation`]: per config, bracket and bisect the highest concurrency meeting the SLO.
//! - [`render`]: the outcome as text for the CLI and the stored report.
//! - [`hosts`]: GPUs per host, and the per-watt objective's check that every host has GPUs.

pub mod hosts;
pub mod render;
pub mod saturation;
pub mod score;
pub mod search;
pub mod space;

use crate::fleet::FleetError;
use fleetbench_spec::search::{SearchSpec, parse_search};
use fleetbench_spec::{JobSpec, SpecError};

/// Errors of a tuning search.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The search spec is invalid; every problem, located.
    #[error("{}", fleetbench_spec::render_errors(.0))]
    Spec(Vec<SpecError>),
    /// Talking to the controller failed.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// A round's job spec could not be generated from the file.
    #[error("generating a round's job spec: {0}")]
    Toml(String),
    /// The objective needs GPU power and a host the search may run on has no GPUs (found
    /// from its facts before anything ran).
    #[error("objective {objective} needs GPU power; host {host} reported none ({why})")]
    NoPowerHost {
        objective: &'static str,
        host: String,
        why: String,
    },
    /// The objective needs GPU power and a level was measured without it.
    #[error(transparent)]
    NoPower(#[from] score::NoPower),
}

/// Parses a search spec.
pub fn parse(file_name: &str, text: &str) -> Result<(JobSpec, SearchSpec), TuneError> {
    parse_search(file_name, text).map_err(TuneError::Spec)
}
