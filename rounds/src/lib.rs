//! fleetbench-rounds: what the CLI runs against a controller, in rounds of ordinary jobs.
//!
//! Code lives where it runs. `fleetbench tune` and `fleetbench regress` run in the CLI's
//! process: they submit jobs to a controller (remote, or the embedded one), wait for them, read
//! their results and decide. None of that needs the controller's store, scheduler or server,
//! so it is not the controller's code; the controller only schedules suites from its config
//! (`fleetbench_controller::regress::schedule`), which call this crate like the CLI does, and
//! keeps their history in its store (`fleetbench_controller::regress::StoreHistory`). This
//! crate does not depend on the controller.
//!
//! - [`fleet`]: the [`Fleet`] trait (submit a job, wait for it, read its results), and its
//!   implementation over the controller's gRPC API.
//! - [`tuning`]: tuning searches (`[search]`): candidates, scores, grid / random / successive
//!   halving, saturation points, the rendered outcome.
//! - [`regress`]: regression suites (`[suite]`): [`regress::run_suite`], the
//!   [`regress::History`] a suite's runs are kept in, the [`regress::SuiteRun`] record, and
//!   the history on a remote controller ([`regress::RemoteHistory`]).

pub mod fleet;
pub mod regress;
pub mod tuning;

pub use fleet::{Fleet, FleetError};
