//! What the controller process runs of regression suites: the suites named in its config, on
//! a cron schedule ([`schedule`]), with their history in its store ([`StoreHistory`], also the
//! history of an embedded controller's suites) and their verdicts exported as its metrics.
//!
//! Running a suite is `fleetbench_rounds::regress::run_suite`, the same code `fleetbench
//! regress` runs in the CLI: code lives where it runs, and the controller only schedules.

pub mod history;
pub mod schedule;

pub use history::StoreHistory;
