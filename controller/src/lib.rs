//! fleetbench-controller
