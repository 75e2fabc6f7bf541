//! The P2P probe's inputs and its report, serialisable so a run can be recorded and replayed
//! through the assembly and diagnosis in tests.

use serde::{Deserialize, Serialize};

/// One GPU as the probe saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P2pDevice {
    pub index: u32,
    pub name: String,
    pub pci_bus_id: String,
    pub pcie_link_gen: u32,
    pub pcie_link_width: u32,
    pub nvlink_active_count: u32,
    /// GB/s per direction of one link; 0 without NVLink.
    pub nvlink_speed_gbps: f64,
    /// Same-device copy bandwidth, GB/s, counting bytes read and written (as the CUDA samples'
    /// p2pBandwidthLatencyTest does on its diagonal).
    pub d2d_bandwidth_gbps: Option<f64>,
}

/// NVML's view of the path from `src` to `dst`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairLink {
    pub src: u32,
    pub dst: u32,
    /// NVML P2P status per capability: "ok", "not_supported", "chipset_not_supported", ...
    pub nvml_read: String,
    pub nvml_write: String,
    pub nvml_nvlink: String,
    pub nvml_atomics: String,
    /// Common ancestor: internal, single, multiple, hostbridge, node, system ("" if unknown).
    pub topology: String,
    /// Active NVLinks that carry traffic from `src` to `dst` (direct, or through NVSwitches).
    pub nvlink_count: u32,
    /// GB/s per direction of one of those links.
    pub nvlink_speed_gbps: f64,
    /// The narrower end of the PCIe path: min of both GPUs' current generation and width.
    pub pcie_gen: u32,
    pub pcie_width: u32,
}

/// What was measured from `src` to `dst`. Bandwidths in GB/s (10^9 bytes/s), latency in µs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PairMeasurement {
    pub cuda_can_access_peer: bool,
    pub uni_enabled_gbps: Option<f64>,
    pub uni_disabled_gbps: Option<f64>,
    pub bidi_enabled_gbps: Option<f64>,
    pub bidi_disabled_gbps: Option<f64>,
    pub latency_enabled_us: Option<f64>,
    pub latency_disabled_us: Option<f64>,
    /// Why the pair's measurement stopped part-way (figures measured before it are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One ordered pair: link facts, measurements and the diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairResult {
    #[serde(flatten)]
    pub link: PairLink,
    #[serde(flatten)]
    pub measured: PairMeasurement,
    /// What the link NVML reports should carry in practice, GB/s per direction.
    pub expected_gbps: f64,
    /// The link in words, e.g. "NV18 (18 × 26.6 GB/s = 478 GB/s raw per direction)".
    pub expected_link: String,
    /// Plain-words findings; empty when the measurement agrees with the link.
    pub findings: Vec<String>,
}

/// The whole probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P2pReport {
    pub devices: Vec<P2pDevice>,
    pub pairs: Vec<PairResult>,
    /// Why nothing was measured.
    pub unavailable_reason: Option<String>,
    pub wall_s: f64,
    pub buffer_bytes: u64,
    pub repeats: u32,
    /// Remarks about the run as a whole ("one GPU, no pairs", method notes).
    pub notes: Vec<String>,
}
