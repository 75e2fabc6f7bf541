//! fleetbench-agent
