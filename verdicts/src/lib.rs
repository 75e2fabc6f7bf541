//! Verdicts on stored results (a comparison of configs, a regression suite's checks), in a crate of their own so that what the CLI runs does not live
//! inside the controller's server: the controller's `Compare` call and the CLI's reports of an
//! embedded store give the same answer from the same code. The statistics are
//! `fleetbench-stats`; this crate maps stored levels and the job's spec onto them (which design
//! a job's order allows, which config may win, what the verdict says).

pub mod compare;
pub mod regress;
