//! Test fleets that integration tests and benchmarks share. A crate of its own rather than a
//! `tests/common` module: a benchmark target cannot `mod` a file of the tests directory
//! without a `#[path]` seam, and a dev-dependency is compiled once for all of them.
//!
//! - [`sim_fleet`]: sim agents on loopback with an embedded controller (its store and metrics
//!   readable), and the suites and model lookups the regression and tuning tests check
//!   against (the controller's tests and benches).
//! - [`swarm_fleet`]: a controller process and a swarm of stand-in agents (the swarm's smoke
//!   test and its scale benchmark).

pub mod sim_fleet;
pub mod swarm_fleet;
