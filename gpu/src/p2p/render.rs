//! The report as text tables a person reads in a terminal.

use std::fmt::Write as _;

use super::report::P2pReport;

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.decimals$}"))
}

/// Devices, then one row per ordered pair, then each pair's findings.
pub fn render_table(r: &P2pReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "GPUs");
    let _ = writeln!(
        out,
        "  {:>3}  {:<22} {:<18} {:>9} {:>7} {:>12}",
        "gpu", "name", "pci bus id", "PCIe", "NVLink", "d2d GB/s"
    );
    for d in &r.devices {
        let nvlink = if d.nvlink_active_count > 0 && d.nvlink_speed_gbps > 0.0 {
            format!("{}×{:.1}", d.nvlink_active_count, d.nvlink_speed_gbps)
        } else if d.nvlink_active_count > 0 {
            format!("{}×?", d.nvlink_active_count)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "  {:>3}  {:<22} {:<18} {:>9} {:>7} {:>12}",
            d.index,
            d.name,
            d.pci_bus_id,
            format!("Gen{} x{}", d.pcie_link_gen, d.pcie_link_width),
            nvlink,
            opt(d.d2d_bandwidth_gbps, 1)
        );
    }
    if r.pairs.is_empty() {
        let _ = writeln!(out, "\nno pairs measured");
    } else {
        let _ = writeln!(
            out,
            "\nPairs (GB/s per direction unless bidi; latency µs; en = peer access enabled, dis = through the host)"
        );
        let _ = writeln!(
            out,
            "  {:>5}  {:<4} {:<10} {:<6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9}",
            "pair",
            "peer",
            "topology",
            "nvml w",
            "link",
            "uni en",
            "uni dis",
            "bidi en",
            "bidi dis",
            "lat en",
            "lat dis",
            "expected"
        );
        for p in &r.pairs {
            let link = if p.link.nvlink_count > 0 {
                format!("NV{}", p.link.nvlink_count)
            } else if p.link.pcie_gen > 0 {
                format!("G{}x{}", p.link.pcie_gen, p.link.pcie_width)
            } else {
                "?".to_string()
            };
            let _ = writeln!(
                out,
                "  {:>5}  {:<4} {:<10} {:<6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9}",
                format!("{}-{}", p.link.src, p.link.dst),
                if p.measured.cuda_can_access_peer {
                    "yes"
                } else {
                    "no"
                },
                if p.link.topology.is_empty() {
                    "-"
                } else {
                    &p.link.topology
                },
                p.link.nvml_write,
                link,
                opt(p.measured.uni_enabled_gbps, 1),
                opt(p.measured.uni_disabled_gbps, 1),
                opt(p.measured.bidi_enabled_gbps, 1),
                opt(p.measured.bidi_disabled_gbps, 1),
                opt(p.measured.latency_enabled_us, 2),
                opt(p.measured.latency_disabled_us, 2),
                format!("{:.0}", p.expected_gbps)
            );
        }
        let _ = writeln!(out, "\nDiagnosis");
        for p in &r.pairs {
            if p.findings.is_empty() {
                let _ = writeln!(
                    out,
                    "  {}-{}: as expected for {}",
                    p.link.src, p.link.dst, p.expected_link
                );
            }
            for f in &p.findings {
                let _ = writeln!(out, "  {}-{}: {f}", p.link.src, p.link.dst);
            }
        }
    }
    if let Some(reason) = &r.unavailable_reason {
        let _ = writeln!(out, "\nnot measured: {reason}");
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(
        out,
        "probe took {:.2} s ({} MiB buffers, {} runs per figure)",
        r.wall_s,
        r.buffer_bytes >> 20,
        r.repeats
    );
    out
}
