//! fleetbench-gpu
