//! What a pair's link should carry, and plain-words findings where the measurement disagrees.
//!
//! The efficiency factors are what copy engines reach on healthy links: on 2×H200 (NV18,
//! 478 GB/s raw per direction) the CUDA samples measured 361–391 GB/s, about 75–82 %; staged or
//! direct PCIe copies reach about 80 % of the raw lane rate at best.

use super::report::{PairLink, PairMeasurement};

/// Share of NVLink's raw rate a copy engine reaches.
pub const NVLINK_EFFICIENCY: f64 = 0.75;
/// Share of PCIe's raw rate (after line coding) a copy reaches.
pub const PCIE_EFFICIENCY: f64 = 0.80;
/// Below this share of the expected bandwidth a pair is reported as slow.
pub const SLOW_SHARE: f64 = 0.80;
/// Peer latency above this over NVLink is reported (healthy: about 2–3 µs).
pub const NVLINK_LATENCY_US: f64 = 5.0;
/// Peer latency above this over PCIe is reported (bare-metal P2P: a few µs).
pub const PCIE_LATENCY_US: f64 = 8.0;
/// Two directions differing by more than this share are reported as asymmetric.
pub const ASYMMETRY_SHARE: f64 = 0.25;

/// Raw GB/s per lane and direction of a PCIe generation, after line coding.
pub fn pcie_lane_gbps(gen_: u32) -> Option<f64> {
    match gen_ {
        1 => Some(0.25),
        2 => Some(0.5),
        3 => Some(8.0 * 128.0 / 130.0 / 8.0),
        4 => Some(16.0 * 128.0 / 130.0 / 8.0),
        5 => Some(32.0 * 128.0 / 130.0 / 8.0),
        // FLIT mode: 242/256 efficiency at 64 GT/s.
        6 => Some(64.0 * 242.0 / 256.0 / 8.0),
        _ => None,
    }
}

/// The link NVML reports for a pair: (expected practical GB/s per direction, words).
pub fn expected_link(link: &PairLink) -> (f64, String) {
    if link.nvlink_count > 0 && link.nvlink_speed_gbps > 0.0 {
        let raw = f64::from(link.nvlink_count) * link.nvlink_speed_gbps;
        let words = format!(
            "NV{} ({} × {:.1} GB/s = {:.0} GB/s raw per direction)",
            link.nvlink_count, link.nvlink_count, link.nvlink_speed_gbps, raw
        );
        return (raw * NVLINK_EFFICIENCY, words);
    }
    match pcie_lane_gbps(link.pcie_gen) {
        Some(lane) if link.pcie_width > 0 => {
            let raw = lane * f64::from(link.pcie_width);
            let path = match link.topology.as_str() {
                "" => String::new(),
                t => format!(", common ancestor {t}"),
            };
            let words = format!(
                "PCIe Gen{} x{} ({raw:.0} GB/s raw per direction{path})",
                link.pcie_gen, link.pcie_width
            );
            (raw * PCIE_EFFICIENCY, words)
        }
        _ => (
            0.0,
            "unknown link (NVML reported neither NVLink nor PCIe)".to_string(),
        ),
    }
}

fn short_link(link: &PairLink) -> String {
    if link.nvlink_count > 0 {
        format!("NV{}", link.nvlink_count)
    } else if link.pcie_gen > 0 {
        format!("PCIe Gen{} x{}", link.pcie_gen, link.pcie_width)
    } else {
        "the reported link".to_string()
    }
}

/// Findings for one ordered pair from its own facts and measurements. Rules that need the
/// reverse pair (asymmetry) live in the assembly.
pub fn diagnose(link: &PairLink, m: &PairMeasurement, expected_gbps: f64) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = &m.error {
        out.push(format!("measurement incomplete: {e}"));
    }
    let via = short_link(link);
    let nvlink = link.nvlink_count > 0;

    if !m.cuda_can_access_peer {
        let through_host = m.uni_disabled_gbps.or(m.uni_enabled_gbps);
        let measured = through_host
            .map(|g| format!("{g:.0} GB/s, "))
            .unwrap_or_default();
        if nvlink || link.pcie_gen > 0 {
            out.push(format!(
                "peer access unavailable: traffic goes through the host bridge ({measured}expected ~{expected_gbps:.0} GB/s over {via})"
            ));
        } else {
            out.push(format!("peer access unavailable: traffic goes through the host bridge ({measured}link unknown)"));
        }
        if link.nvml_write == "ok" {
            out.push("NVML reports P2P write ok but CUDA denies peer access".to_string());
        }
        return out;
    }

    if link.nvml_write != "ok" && !link.nvml_write.is_empty() {
        out.push(format!(
            "CUDA allows peer access though NVML's P2P write status is {}",
            link.nvml_write
        ));
    }

    if let Some(uni) = m.uni_enabled_gbps {
        if expected_gbps > 0.0 && uni < SLOW_SHARE * expected_gbps {
            let mut f = format!(
                "P2P enabled but {uni:.0} GB/s, {:.0}% of the ~{expected_gbps:.0} GB/s expected over {via}",
                100.0 * uni / expected_gbps
            );
            if let Some(dis) = m.uni_disabled_gbps
                && uni <= 1.15 * dis
            {
                f.push_str(&format!(
                    "; no faster than through the host ({dis:.0} GB/s): copies are staged"
                ));
            }
            out.push(f);
        }
        // A link that carries far more than NVML's facts allow means the facts are wrong
        // (e.g. NVLink hidden from a VM), which would mislead placement decisions.
        if expected_gbps > 0.0
            && uni
                > 1.3 * expected_gbps
                    / if nvlink {
                        NVLINK_EFFICIENCY
                    } else {
                        PCIE_EFFICIENCY
                    }
        {
            out.push(format!(
                "measured {uni:.0} GB/s exceeds what {via} can carry: NVML's link facts are incomplete"
            ));
        }
        if let Some(bidi) = m.bidi_enabled_gbps
            && bidi < 1.5 * uni
        {
            out.push(format!(
                "bidirectional {bidi:.0} GB/s is under 1.5 × unidirectional {uni:.0} GB/s: the path does not carry both directions at full rate"
            ));
        }
    }

    if let Some(lat) = m.latency_enabled_us {
        if nvlink && lat > NVLINK_LATENCY_US {
            out.push(format!(
                "P2P enabled but latency {lat:.1} µs, expected ~2–3 µs over {via}"
            ));
        } else if !nvlink && lat > PCIE_LATENCY_US {
            out.push(format!(
                "P2P enabled but latency {lat:.0} µs: virtualised PCIe path"
            ));
        }
    }
    out
}

/// Finding for a pair whose two directions differ a lot, or `None`.
pub fn asymmetry(this_way: f64, other_way: f64) -> Option<String> {
    let hi = this_way.max(other_way);
    if hi <= 0.0 || (this_way - other_way).abs() / hi <= ASYMMETRY_SHARE {
        return None;
    }
    Some(format!(
        "asymmetric: {this_way:.0} GB/s this way, {other_way:.0} GB/s the other way"
    ))
}
