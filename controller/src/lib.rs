//! fleetbench-controller: inventory, scheduler, store, API.

pub mod metrics;
