//! fleetbench-sim
