//! What a host's agent relays: GPU telemetry (hardware semantic conventions) and the engine's
//! own metrics. Their series live only while the host's telemetry arrives.

use super::{MetricDesc, counter, gauge};

// --- GPU telemetry relayed from agents, hardware semantic conventions -----------------------
pub const GPU_UTILIZATION: MetricDesc = gauge(
    "hw.gpu.utilization",
    "1",
    "GPU utilisation (0..1), from NVML.",
);
pub const GPU_MEMORY_UTILIZATION: MetricDesc = gauge(
    "hw.gpu.memory.utilization",
    "1",
    "Fraction of GPU memory in use (used / limit), as the hardware semantic conventions define it.",
);
pub const GPU_MEMORY_CONTROLLER: MetricDesc = gauge(
    "fleetbench.gpu.memory_controller.utilization",
    "1",
    "Fraction of the sample period the memory controller was busy (NVML utilization.memory, \
     DCGM_FI_DEV_MEM_COPY_UTIL).",
);
pub const GPU_SM_CLOCK: MetricDesc = gauge(
    "fleetbench.gpu.clock.sm",
    "Hz",
    "SM clock (DCGM_FI_DEV_SM_CLOCK).",
);
pub const GPU_MEMORY_CLOCK: MetricDesc = gauge(
    "fleetbench.gpu.clock.memory",
    "Hz",
    "Memory clock (DCGM_FI_DEV_MEM_CLOCK).",
);
pub const GPU_THROTTLE_REASONS: MetricDesc = gauge(
    "fleetbench.gpu.clocks_throttle_reasons",
    "",
    "NVML's clocks event (throttle) reasons bitmask (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS); 0: none.",
);
pub const GPU_THROTTLED: MetricDesc = gauge(
    "fleetbench.gpu.throttled",
    "",
    "1 while the clocks are held back for fleetbench.gpu.throttle_reason, else 0.",
);
pub const GPU_XID_ERRORS: MetricDesc = counter(
    "fleetbench.gpu.xid_errors",
    "{error}",
    "Critical XID errors (NVML events, or dcgm-exporter).",
);
pub const GPU_LAST_XID: MetricDesc = gauge(
    "fleetbench.gpu.last_xid",
    "",
    "Code of the last XID error (DCGM_FI_DEV_XID_ERRORS).",
);
pub const GPU_MEMORY_USAGE: MetricDesc = gauge("hw.gpu.memory.usage", "By", "GPU memory in use.");
pub const GPU_MEMORY_LIMIT: MetricDesc = gauge("hw.gpu.memory.limit", "By", "GPU memory in total.");
pub const GPU_POWER: MetricDesc = gauge("hw.power", "W", "GPU power draw.");
pub const GPU_ENERGY: MetricDesc = counter(
    "hw.energy",
    "J",
    "GPU energy consumed since the driver loaded.",
);
pub const GPU_TEMPERATURE: MetricDesc = gauge("hw.temperature", "Cel", "GPU temperature.");
pub const GPU_PCIE_THROUGHPUT: MetricDesc = gauge(
    "fleetbench.gpu.pcie.throughput",
    "By/s",
    "PCIe traffic of a GPU, by network.io.direction.",
);
pub const GPU_NVLINK_THROUGHPUT: MetricDesc = gauge(
    "fleetbench.gpu.nvlink.throughput",
    "By/s",
    "NVLink traffic of a GPU, by network.io.direction.",
);

// --- engine metrics relayed from agents -------------------------------------------------------
pub const ENGINE_RUNNING: MetricDesc = gauge(
    "fleetbench.engine.running_requests",
    "{request}",
    "Requests the engine is running, from its /metrics.",
);
pub const ENGINE_QUEUED: MetricDesc = gauge(
    "fleetbench.engine.queued_requests",
    "{request}",
    "Requests waiting in the engine's queue, from its /metrics.",
);
pub const ENGINE_KV_CACHE: MetricDesc = gauge(
    "fleetbench.engine.kv_cache.usage",
    "1",
    "Fraction of the engine's KV cache in use.",
);
pub const ENGINE_GENERATION: MetricDesc = gauge(
    "fleetbench.engine.generation_throughput",
    "{token}/s",
    "Generation tokens per second the engine reports.",
);
pub const ENGINE_PROCESS_CPU: MetricDesc = gauge(
    "fleetbench.engine.process.cpu.utilization",
    "1",
    "CPU use of the engine's process group (1 = one core).",
);
pub const ENGINE_PROCESS_MEMORY: MetricDesc = gauge(
    "fleetbench.engine.process.memory.usage",
    "By",
    "Resident memory of the engine's process group.",
);
pub const HOST_CONFIG: MetricDesc = gauge(
    "fleetbench.host.config",
    "",
    "1 for the config each host's engine runs now (one series per host).",
);

/// Metrics relayed from a host's agent: live only while its telemetry arrives.
pub const PER_HOST: &[&MetricDesc] = &[
    &GPU_UTILIZATION,
    &GPU_MEMORY_UTILIZATION,
    &GPU_MEMORY_CONTROLLER,
    &GPU_SM_CLOCK,
    &GPU_MEMORY_CLOCK,
    &GPU_THROTTLE_REASONS,
    &GPU_THROTTLED,
    &GPU_XID_ERRORS,
    &GPU_LAST_XID,
    &GPU_MEMORY_USAGE,
    &GPU_MEMORY_LIMIT,
    &GPU_POWER,
    &GPU_ENERGY,
    &GPU_TEMPERATURE,
    &GPU_PCIE_THROUGHPUT,
    &GPU_NVLINK_THROUGHPUT,
    &ENGINE_RUNNING,
    &ENGINE_QUEUED,
    &ENGINE_KV_CACHE,
    &ENGINE_GENERATION,
    &ENGINE_PROCESS_CPU,
    &ENGINE_PROCESS_MEMORY,
    &HOST_CONFIG,
];
