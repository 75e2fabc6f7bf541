//! Plain data the crate hands out: host GPU facts, telemetry samples, GPU processes.

use serde::{Deserialize, Serialize};

/// Static facts of one GPU, as NVML reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub pci_bus_id: String,
    pub memory_total_bytes: u64,
    /// Current PCIe link; a GPU at idle may train down to a lower generation.
    pub pcie_link_gen: u32,
    pub pcie_link_width: u32,
    pub pcie_max_link_gen: u32,
    pub pcie_max_link_width: u32,
    pub nvlink_active_count: u32,
    /// Speed of one active NVLink, GB/s per direction.
    pub nvlink_speed_gbps: Option<f64>,
    pub numa_node: Option<i32>,
    pub power_limit_w: Option<f64>,
}

/// One telemetry sample of one GPU. A field is `None` where the GPU or driver does not report it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSampleData {
    pub index: u32,
    pub uuid: String,
    pub utilization_pct: Option<f64>,
    pub memory_utilization_pct: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_w: Option<f64>,
    /// Energy since the driver was loaded, millijoules.
    pub energy_mj: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub pcie_tx_bytes_per_s: Option<f64>,
    pub pcie_rx_bytes_per_s: Option<f64>,
    pub nvlink_tx_bytes_per_s: Option<f64>,
    pub nvlink_rx_bytes_per_s: Option<f64>,
    /// NVML's clocks event (throttle) reasons bitmask; 0: not throttled.
    pub clocks_throttle_reasons: Option<u64>,
    /// Critical XID errors seen since watching began; `None` where they cannot be watched.
    pub xid_errors: Option<u64>,
    /// The last XID error's code.
    pub last_xid: Option<u64>,
}

/// A process that holds memory on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub gpu: u32,
    pub pid: u32,
    /// `None` where the driver does not tell (e.g. inside some containers and VMs).
    pub used_bytes: Option<u64>,
}
