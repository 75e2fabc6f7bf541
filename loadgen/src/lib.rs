//! fleetbench-loadgen
