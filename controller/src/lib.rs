//! fleetbench-controller: inventory, scheduler, store, API.

pub mod compare;
pub mod metrics;
pub mod spec;
