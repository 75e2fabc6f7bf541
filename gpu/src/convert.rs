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
            clocks_throttle_reasons: s.clocks_throttle_reasons,
            xid_errors: s.xid_errors,
            last_xid: s.last_xid,
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
        buffer_bytes: if req.buffer_bytes == 0 {
            d.buffer_bytes
        } else {
            req.buffer_bytes
        },
        repeats: if req.repeats == 0 {
            d.repeats
        } else {
            req.repeats
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::p2p::{P2pDevice, PairLink, PairMeasurement, PairResult};

    #[test]
    fn report_keeps_every_field_on_the_wire() {
        let r = P2pReport {
            devices: vec![P2pDevice {
                index: 0,
                name: "NVIDIA H200".into(),
                pci_bus_id: "00000000:00:06.0".into(),
                pcie_link_gen: 5,
                pcie_link_width: 16,
                nvlink_active_count: 18,
                nvlink_speed_gbps: 26.562,
                d2d_bandwidth_gbps: None,
            }],
            pairs: vec![PairResult {
                link: PairLink {
                    src: 0,
                    dst: 1,
                    nvml_read: "ok".into(),
                    nvml_write: "ok".into(),
                    nvml_nvlink: "ok".into(),
                    nvml_atomics: "not_supported".into(),
                    topology: "hostbridge".into(),
                    nvlink_count: 18,
                    nvlink_speed_gbps: 26.562,
                    pcie_gen: 5,
                    pcie_width: 16,
                },
                measured: PairMeasurement {
                    cuda_can_access_peer: true,
                    uni_enabled_gbps: Some(360.66),
                    latency_disabled_us: Some(16.63),
                    ..Default::default()
                },
                expected_gbps: 358.6,
                expected_link: "NV18".into(),
                findings: vec!["a finding".into()],
            }],
            unavailable_reason: None,
            wall_s: 3.5,
            buffer_bytes: 1 << 28,
            repeats: 10,
            notes: vec!["n".into()],
        };
        let pb = agentpb::P2pReport::from(&r);
        assert_eq!(pb.devices[0].d2d_bandwidth_gbps, 0.0);
        let p = &pb.pairs[0];
        assert_eq!((p.src, p.dst, p.nvlink_count), (0, 1, 18));
        assert_eq!(p.nvml_atomics, "not_supported");
        assert_eq!(p.uni_enabled_gbps, Some(360.66));
        assert_eq!(p.uni_disabled_gbps, None);
        assert_eq!(p.latency_disabled_us, Some(16.63));
        assert_eq!(p.findings, vec!["a finding".to_string()]);
        assert_eq!(pb.unavailable_reason, "");
        assert_eq!((pb.wall_s, pb.buffer_bytes, pb.repeats), (3.5, 1 << 28, 10));
    }

    #[test]
    fn request_zeros_mean_defaults() {
        let o = probe_options(&agentpb::ProbeP2pRequest::default());
        assert_eq!(o, ProbeOptions::default());
        let o = probe_options(&agentpb::ProbeP2pRequest {
            buffer_bytes: 1 << 20,
            repeats: 3,
            pairs: vec![agentpb::GpuPair { src: 1, dst: 0 }],
        });
        assert_eq!(
            o,
            ProbeOptions {
                buffer_bytes: 1 << 20,
                repeats: 3,
                pairs: Some(vec![(1, 0)])
            }
        );
        let r = unavailable_report(&ProbeError::NoCudaDriver, &o);
        assert!(r.unavailable_reason.starts_with("no CUDA driver"));
        assert!(r.pairs.is_empty());
    }

    #[test]
    fn facts_and_samples_convert() {
        let f = GpuInfo {
            index: 3,
            name: "NVIDIA H200".into(),
            uuid: "GPU-x".into(),
            pci_bus_id: "b".into(),
            memory_total_bytes: 7,
            pcie_link_gen: 4,
            pcie_link_width: 8,
            pcie_max_link_gen: 5,
            pcie_max_link_width: 16,
            nvlink_active_count: 2,
            nvlink_speed_gbps: Some(26.5),
            numa_node: None,
            power_limit_w: Some(700.0),
        };
        let pb = agentpb::GpuFacts::from(&f);
        assert_eq!(
            (
                pb.index,
                pb.pcie_link_gen,
                pb.pcie_max_link_width,
                pb.nvlink_active_count
            ),
            (3, 4, 16, 2)
        );
        assert_eq!((pb.numa_node, pb.power_limit_w), (None, Some(700.0)));
        let s = GpuSampleData {
            index: 3,
            power_w: Some(100.0),
            nvlink_rx_bytes_per_s: Some(5.0),
            ..Default::default()
        };
        let pb = agentpb::GpuSample::from(&s);
        assert_eq!(
            (pb.power_w, pb.nvlink_rx_bytes_per_s, pb.utilization_pct),
            (Some(100.0), Some(5.0), None)
        );
    }
}
