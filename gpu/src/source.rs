//! The narrow seam between this crate and NVML: everything above it (sampling cadence, P2P
//! matrix assembly, diagnosis) is tested with recorded inputs through a fake source.

use crate::p2p::PairLink;
use crate::types::{GpuInfo, GpuProcess, GpuSampleData};

/// Readings of one GPU that take milliseconds, read on the background sampler thread.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SlowCounters {
    /// PCIe throughput over NVML's 20 ms window, bytes/s.
    pub pcie_tx_bytes_per_s: Option<f64>,
    pub pcie_rx_bytes_per_s: Option<f64>,
    /// NVLink data counters over all links, cumulative bytes.
    pub nvlink_tx_bytes: Option<u64>,
    pub nvlink_rx_bytes: Option<u64>,
    /// Energy since the driver loaded, mJ (2.5–12 ms per read on the H200 VM).
    pub energy_mj: Option<u64>,
}

/// What the crate needs from NVML. Each call answers for one device index; a field the device
/// cannot report is `None`/zero rather than an error, because a partial answer is still useful.
pub(crate) trait GpuSource: Send + Sync {
    /// (driver version, CUDA driver version).
    fn driver_versions(&self) -> (String, String);
    fn device_count(&self) -> u32;
    fn facts(&self, index: u32) -> Result<GpuInfo, String>;
    /// Everything of a sample that answers in microseconds (no PCIe/NVLink rates, no energy).
    fn sample_fast(&self, index: u32) -> GpuSampleData;
    /// Blocks about 40 ms per device (NVML samples PCIe over a 20 ms window per direction), plus
    /// the energy counter.
    fn slow_counters(&self, index: u32) -> SlowCounters;
    fn processes(&self, index: u32) -> Vec<GpuProcess>;
    /// Microseconds each NVML call of a sample takes on `index` (diagnostics; may be empty).
    fn call_costs(&self, _index: u32) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// Starts watching critical XID error events; returns the indices of the GPUs watched
    /// (none: this host cannot watch them, and samples carry no XID count).
    fn xid_watch(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Blocks up to `timeout_ms` for XID events; `(GPU index, XID code)` of those that came.
    fn xid_events(&self, _timeout_ms: u32) -> Vec<(u32, u64)> {
        Vec::new()
    }
    /// NVML's view of the path from `src` to `dst`.
    fn pair_link(&self, src: u32, dst: u32) -> PairLink;
}
