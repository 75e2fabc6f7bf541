//! Conversions between this crate's types and the agent's wire types.

use fleetbench_proto::agentpb;

use crate::p2p::{P2pReport, ProbeError, ProbeOptions};
use crate::types::{GpuInfo, GpuSampleData};

impl From<&GpuInfo> for agentpb::GpuFacts {
    fn from(g: &GpuInfo) -> Self {
        agentpb::GpuFacts {
            index: g.index,
            name: g.name.clone(),
            uuid: g.uuid.clone(),
            pci_bus_id: g.pci_bus_id.clone(),
            memory_total_bytes: g.memory_total_bytes,
            pcie_link_gen: g.pcie_link_gen,
            pcie_link_width: g.pcie_link_width,
            pcie_max_link_gen: g.pcie_max_link_gen,
            pcie_max_link_width: g.pcie_max_link_width,
            nvlink_active_count: g.nvlink_active_count,
            numa_node: g.numa_node,
            power_limit_w: g.power_limit_w,
        }
    }
}

impl From<&GpuSampleData> for agentpb::GpuSample {
    fn from(s: &GpuSampleData) -> Self {
        agentpb::GpuSample {
            index: s.index,
            uuid: s.uuid.clone(),
            utilization_pct: s.utilization_pct,
            memory_utilization_pct: s.memory_utilization_pct,
            memory_used_bytes: s.memory_used_bytes,
            memory_total_bytes: s.memory_total_bytes,
            power_w: s.power_w,
            energy_mj: s.energy_mj,
            sm_clock_mhz: s.sm_clock_mhz,
            memory_clock_mhz: s.memory_clock_mhz,
            temperature_c: s.temperature_c,
            pcie_tx_bytes_per_s: s.pcie_tx_bytes_per_s,
            pcie_rx_bytes_per_s: s.pcie_rx_bytes_per_s,
            nvlink_tx_bytes_per_s: s.nvlink_tx_bytes_per_s,
            nvlink_rx_bytes_per_s: s.nvlink_rx_bytes_per_s,
        }
    }
}

impl From<&P2pReport> for agentpb::P2pReport {
    fn from(r: &P2pReport) -> Self {
        agentpb::P2pReport {
            devices: r
                .devices
                .iter()
                .map(|d| agentpb::P2pDevice {
                    index: d.index,
                    name: d.name.clone(),
                    pci_bus_id: d.pci_bus_id.clone(),
                    pcie_link_gen: d.pcie_link_gen,
                    pcie_link_width: d.pcie_link_width,
                    nvlink_active_count: d.nvlink_active_count,
                    nvlink_speed_gbps: d.nvlink_speed_gbps,
                    d2d_bandwidth_gbps: d.d2d_bandwidth_gbps.unwrap_or(0.0),
                })
                .collect(),
            pairs: r
                .pairs
                .iter()
                .map(|p| agentpb::P2pPairResult {
                    src: p.link.src,
                    dst: p.link.dst,
                    nvml_read: p.link.nvml_read.clone(),
                    nvml_write: p.link.nvml_write.clone(),
                    nvml_nvlink: p.link.nvml_nvlink.clone(),
                    nvml_atomics: p.link.nvml_atomics.clone(),
                    topology: p.link.topology.clone(),
                    nvlink_count: p.link.nvlink_count,
                    nvlink_speed_gbps: p.link.nvlink_speed_gbps,
                    cuda_can_access_peer: p.measured.cuda_can_access_peer,
                    uni_enabled_gbps: p.measured.uni_enabled_gbps,
                    uni_disabled_gbps: p.measured.uni_disabled_gbps,
                    bidi_enabled_gbps: p.measured.bidi_enabled_gbps,
                    bidi_disabled_gbps: p.measured.bidi_disabled_gbps,
                    latency_enabled_us: p.measured.latency_enabled_us,
                    latency_disabled_us: p.measured.latency_disabled_us,
                    expected_gbps: p.expected_gbps,
                    expected_link: p.expected_link.clone(),
                    findings: p.findings.clone(),
                })
                .collect(),
            unavailable_reason: r.unavailable_reason.clone().unwrap_or_default(),
            wall_s: r.wall_s,
            buffer_bytes: r.buffer_bytes,
            repeats: r.repeats,
            notes: r.notes.clone(),
        }
    }
}

/// The probe options a `ProbeP2P` request asks for; zeros mean the defaults.
pub fn probe_options(req: &agentpb::ProbeP2pRequest) -> ProbeOptions {
    let d = ProbeOptions::default();
    ProbeOptions {
        buffer_bytes: if req.buffer_bytes == 0 { d.buffer_bytes } else { req.buffer_bytes },
        repeats: if req.repeats == 0 { d.repeats } else { req.repeats },
        pairs: (!req.pairs.is_empty()).then(|| req.pairs.iter().map(|p| (p.src, p.dst)).collect()),
    }
}

/// A report that says only why nothing was measured (for the RPC when the probe cannot run).
pub fn unavailable_report(err: &ProbeError, opts: &ProbeOptions) -> agentpb::P2pReport {
    agentpb::P2pReport {
        unavailable_reason: err.to_string(),
        buffer_bytes: opts.buffer_bytes,
        repeats: opts.repeats,
        ..Default::default()
    }
}
