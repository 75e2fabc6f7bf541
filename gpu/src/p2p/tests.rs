//! Matrix assembly and diagnosis with recorded inputs: the 2×H200 machine as measured, and a
//! synthetic 8-GPU host with two NVLink islands joined over PCIe through the host bridge.

use serde::Deserialize;

use super::*;

#[derive(Deserialize)]
struct Recorded {
    links: Vec<PairLink>,
    measured: Vec<(u32, u32, PairMeasurement)>,
}

fn h200x2() -> Recorded {
    serde_json::from_str(include_str!("fixtures/h200x2.json")).expect("fixture parses")
}

fn link(src: u32, dst: u32) -> PairLink {
    PairLink {
        src,
        dst,
        nvml_read: "ok".into(),
        nvml_write: "ok".into(),
        nvml_nvlink: "ok".into(),
        nvml_atomics: "ok".into(),
        topology: "hostbridge".into(),
        nvlink_count: 18,
        nvlink_speed_gbps: 26.562,
        pcie_gen: 5,
        pcie_width: 16,
    }
}

fn healthy_nvlink() -> PairMeasurement {
    PairMeasurement {
        cuda_can_access_peer: true,
        uni_enabled_gbps: Some(375.0),
        uni_disabled_gbps: Some(37.5),
        bidi_enabled_gbps: Some(750.0),
        bidi_disabled_gbps: Some(52.5),
        latency_enabled_us: Some(2.2),
        latency_disabled_us: Some(16.0),
        error: None,
    }
}

#[test]
fn h200_nv18_expects_about_360_and_measured_figures_agree() {
    let r = h200x2();
    let pairs = assemble(&r.links, &r.measured);
    assert_eq!(pairs.len(), 2);
    for p in &pairs {
        assert!(
            (p.expected_gbps - 358.6).abs() < 0.5,
            "expected {}",
            p.expected_gbps
        );
        assert!(
            p.expected_link
                .starts_with("NV18 (18 × 26.6 GB/s = 478 GB/s"),
            "{}",
            p.expected_link
        );
        assert!(
            p.findings.is_empty(),
            "{}-{}: {:?}",
            p.link.src,
            p.link.dst,
            p.findings
        );
    }
    assert_eq!(pairs[0].measured.uni_enabled_gbps, Some(360.66));
    assert_eq!(pairs[1].measured.bidi_enabled_gbps, Some(769.72));
}

#[test]
fn nvlink_without_peer_access_goes_through_the_host_bridge() {
    let mut r = h200x2();
    for (_, _, m) in &mut r.measured {
        m.cuda_can_access_peer = false;
        m.uni_enabled_gbps = None;
        m.bidi_enabled_gbps = None;
        m.latency_enabled_us = None;
    }
    let pairs = assemble(&r.links, &r.measured);
    assert_eq!(
        pairs[0].findings,
        vec![
            "peer access unavailable: traffic goes through the host bridge (38 GB/s, expected ~359 GB/s over NV18)".to_string(),
            "NVML reports P2P write ok but CUDA denies peer access".to_string(),
        ]
    );
}

#[test]
fn slow_peer_copies_no_faster_than_the_host_are_called_staged() {
    let m = PairMeasurement {
        uni_enabled_gbps: Some(40.0),
        uni_disabled_gbps: Some(37.5),
        bidi_enabled_gbps: Some(75.0),
        ..healthy_nvlink()
    };
    let l = link(0, 1);
    let (expected, _) = expected_link(&l);
    let f = diagnose(&l, &m, expected);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with("P2P enabled but 40 GB/s, 11% of the ~359 GB/s expected over NV18"),
        "{}",
        f[0]
    );
    assert!(
        f[0].ends_with("no faster than through the host (38 GB/s): copies are staged"),
        "{}",
        f[0]
    );
}

#[test]
fn pcie_peer_latency_of_16us_is_a_virtualised_path() {
    let l = PairLink {
        nvml_nvlink: "not_supported".into(),
        nvlink_count: 0,
        nvlink_speed_gbps: 0.0,
        ..link(3, 4)
    };
    let m = PairMeasurement {
        cuda_can_access_peer: true,
        uni_enabled_gbps: Some(48.0),
        uni_disabled_gbps: Some(37.0),
        bidi_enabled_gbps: Some(90.0),
        bidi_disabled_gbps: Some(52.0),
        latency_enabled_us: Some(16.2),
        latency_disabled_us: Some(16.5),
        error: None,
    };
    let (expected, words) = expected_link(&l);
    assert!((expected - 50.4).abs() < 0.1, "{expected}");
    assert_eq!(
        words,
        "PCIe Gen5 x16 (63 GB/s raw per direction, common ancestor hostbridge)"
    );
    assert_eq!(
        diagnose(&l, &m, expected),
        vec!["P2P enabled but latency 16 µs: virtualised PCIe path".to_string()]
    );
}

#[test]
fn nvlink_latency_and_half_duplex_bidirectional_are_reported() {
    let m = PairMeasurement {
        latency_enabled_us: Some(9.0),
        bidi_enabled_gbps: Some(400.0),
        ..healthy_nvlink()
    };
    let l = link(0, 1);
    let f = diagnose(&l, &m, expected_link(&l).0);
    assert_eq!(
        f,
        vec![
            "bidirectional 400 GB/s is under 1.5 × unidirectional 375 GB/s: the path does not carry both directions at full rate".to_string(),
            "P2P enabled but latency 9.0 µs, expected ~2–3 µs over NV18".to_string(),
        ]
    );
}

#[test]
fn bandwidth_beyond_the_reported_link_means_nvml_facts_are_incomplete() {
    // NVML in a VM that hides NVLink: reports only PCIe, yet copies run at NVLink speed.
    let l = PairLink {
        nvml_nvlink: "not_supported".into(),
        nvlink_count: 0,
        nvlink_speed_gbps: 0.0,
        ..link(0, 1)
    };
    let f = diagnose(&l, &healthy_nvlink(), expected_link(&l).0);
    assert_eq!(f, vec!["measured 375 GB/s exceeds what PCIe Gen5 x16 can carry: NVML's link facts are incomplete".to_string()]);
}

#[test]
fn cuda_peer_access_against_nvml_status_is_noted() {
    let l = PairLink {
        nvml_write: "chipset_not_supported".into(),
        ..link(0, 1)
    };
    let f = diagnose(&l, &healthy_nvlink(), expected_link(&l).0);
    assert_eq!(
        f,
        vec![
            "CUDA allows peer access though NVML's P2P write status is chipset_not_supported"
                .to_string()
        ]
    );
}

#[test]
fn a_pair_whose_measurement_broke_says_why_and_keeps_its_figures() {
    let m = PairMeasurement {
        uni_enabled_gbps: None,
        bidi_enabled_gbps: None,
        latency_enabled_us: None,
        error: Some("CUDA cuCtxEnablePeerAccess failed: CUDA_ERROR_TOO_MANY_PEERS".into()),
        ..healthy_nvlink()
    };
    let l = link(0, 1);
    let pairs = assemble(&[l], &[(0, 1, m)]);
    assert_eq!(
        pairs[0].findings,
        vec![
            "measurement incomplete: CUDA cuCtxEnablePeerAccess failed: CUDA_ERROR_TOO_MANY_PEERS"
                .to_string()
        ]
    );
    assert_eq!(pairs[0].measured.uni_disabled_gbps, Some(37.5));
}

#[test]
fn unmeasured_pairs_get_no_findings_and_unknown_links_expect_nothing() {
    let l = PairLink {
        nvlink_count: 0,
        pcie_gen: 0,
        pcie_width: 0,
        ..link(0, 1)
    };
    let pairs = assemble(std::slice::from_ref(&l), &[]);
    assert_eq!(pairs[0].expected_gbps, 0.0);
    assert!(pairs[0].expected_link.starts_with("unknown link"));
    assert!(pairs[0].findings.is_empty());
    assert_eq!(pairs[0].measured, PairMeasurement::default());
}

/// Two NVSwitch islands {0..3} and {4..7}; across them PCIe Gen5 x16 through the host bridge
/// (topology "system", no peer access) except 3↔4, where the VM allows peer access over a
/// virtualised path. The 2→3 NVLink pair is degraded.
fn eight_gpu_host() -> (Vec<PairLink>, Vec<(u32, u32, PairMeasurement)>) {
    let island = |g: u32| g / 4;
    let mut links = Vec::new();
    let mut measured = Vec::new();
    for s in 0..8 {
        for d in 0..8 {
            if s == d {
                continue;
            }
            if island(s) == island(d) {
                links.push(PairLink {
                    topology: "node".into(),
                    ..link(s, d)
                });
                let m = if (s, d) == (2, 3) {
                    PairMeasurement {
                        uni_enabled_gbps: Some(120.0),
                        bidi_enabled_gbps: Some(240.0),
                        ..healthy_nvlink()
                    }
                } else {
                    healthy_nvlink()
                };
                measured.push((s, d, m));
                continue;
            }
            let virtualised = matches!((s, d), (3, 4) | (4, 3));
            links.push(PairLink {
                nvml_read: if virtualised {
                    "ok"
                } else {
                    "chipset_not_supported"
                }
                .into(),
                nvml_write: if virtualised {
                    "ok"
                } else {
                    "chipset_not_supported"
                }
                .into(),
                nvml_nvlink: "not_supported".into(),
                nvml_atomics: "not_supported".into(),
                topology: if virtualised { "hostbridge" } else { "system" }.into(),
                nvlink_count: 0,
                nvlink_speed_gbps: 0.0,
                ..link(s, d)
            });
            measured.push((
                s,
                d,
                PairMeasurement {
                    cuda_can_access_peer: virtualised,
                    uni_enabled_gbps: virtualised.then_some(24.0),
                    uni_disabled_gbps: Some(37.0),
                    bidi_enabled_gbps: virtualised.then_some(45.0),
                    bidi_disabled_gbps: Some(52.0),
                    latency_enabled_us: virtualised.then_some(16.0),
                    latency_disabled_us: Some(16.0),
                    error: None,
                },
            ));
        }
    }
    (links, measured)
}

#[test]
fn eight_gpu_matrix_keeps_order_and_diagnoses_each_kind_of_path() {
    let (links, measured) = eight_gpu_host();
    let pairs = assemble(&links, &measured);
    assert_eq!(pairs.len(), 56);
    let order: Vec<_> = pairs.iter().map(|p| (p.link.src, p.link.dst)).collect();
    let want: Vec<_> = links.iter().map(|l| (l.src, l.dst)).collect();
    assert_eq!(order, want);
    let get = |s, d| {
        pairs
            .iter()
            .find(|p| p.link.src == s && p.link.dst == d)
            .expect("pair present")
    };

    // Healthy NVLink pairs: nothing to say.
    for (s, d) in [(0, 1), (1, 0), (5, 7), (7, 4)] {
        assert!(
            get(s, d).findings.is_empty(),
            "{s}-{d}: {:?}",
            get(s, d).findings
        );
    }
    // Degraded NVLink: slow, and asymmetric against the healthy way back.
    let slow = &get(2, 3).findings;
    assert!(
        slow[0].starts_with("P2P enabled but 120 GB/s, 33% of the ~359 GB/s expected over NV18"),
        "{slow:?}"
    );
    assert!(
        slow.contains(&"asymmetric: 120 GB/s this way, 375 GB/s the other way".to_string()),
        "{slow:?}"
    );
    assert_eq!(
        get(3, 2).findings,
        vec!["asymmetric: 375 GB/s this way, 120 GB/s the other way".to_string()]
    );

    // Across islands without peer access: through the host bridge against a PCIe expectation.
    let cross = get(1, 6);
    assert_eq!(
        cross.expected_link,
        "PCIe Gen5 x16 (63 GB/s raw per direction, common ancestor system)"
    );
    assert_eq!(
        cross.findings,
        vec!["peer access unavailable: traffic goes through the host bridge (37 GB/s, expected ~50 GB/s over PCIe Gen5 x16)".to_string()]
    );
    // The virtualised peer path: slow and 16 µs.
    let v = &get(3, 4).findings;
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].starts_with(
            "P2P enabled but 24 GB/s, 48% of the ~50 GB/s expected over PCIe Gen5 x16"
        ),
        "{v:?}"
    );
    assert_eq!(v[1], "P2P enabled but latency 16 µs: virtualised PCIe path");

    let no_peer = pairs
        .iter()
        .filter(|p| !p.measured.cuda_can_access_peer)
        .count();
    assert_eq!(no_peer, 2 * 16 - 2);
}

#[test]
fn table_and_json_carry_every_pair() {
    let (links, measured) = eight_gpu_host();
    let report = P2pReport {
        devices: (0..8)
            .map(|i| P2pDevice {
                index: i,
                name: "NVIDIA H200".into(),
                pci_bus_id: format!("00000000:00:{:02x}.0", 6 + i),
                pcie_link_gen: 5,
                pcie_link_width: 16,
                nvlink_active_count: 18,
                nvlink_speed_gbps: 26.562,
                d2d_bandwidth_gbps: Some(3900.0),
            })
            .collect(),
        pairs: assemble(&links, &measured),
        unavailable_reason: None,
        wall_s: 12.5,
        buffer_bytes: DEFAULT_BUFFER_BYTES,
        repeats: DEFAULT_REPEATS,
        notes: vec![],
    };
    let table = render_table(&report);
    assert!(table.contains("  3-4  yes  hostbridge ok"), "{table}");
    assert!(table.contains("    0-1  yes  node       ok"), "{table}");
    assert!(table.contains("0-1: as expected for NV18"), "{table}");
    assert!(
        table.contains("3-4: P2P enabled but latency 16 µs: virtualised PCIe path"),
        "{table}"
    );
    assert!(
        table.contains("probe took 12.50 s (153 MiB buffers, 10 runs per figure)"),
        "{table}"
    );
    assert_eq!(table.matches("3900.0").count(), 8);

    let json = serde_json::to_string(&report).expect("serialises");
    let back: P2pReport = serde_json::from_str(&json).expect("reads back");
    assert_eq!(back, report);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        v["pairs"][0]["uni_enabled_gbps"], 375.0,
        "measurement fields are flat in the document"
    );
    assert_eq!(v["pairs"][0]["nvml_write"], "ok");
}

#[test]
fn pair_lists_parse_and_bad_ones_name_the_problem() {
    assert_eq!(
        parse_pairs("0-1, 1-0,3-2").expect("parses"),
        vec![(0, 1), (1, 0), (3, 2)]
    );
    let e = parse_pairs("0-1,2").expect_err("no dash").to_string();
    assert!(e.contains("\"2\" is not SRC-DST"), "{e}");
    let e = parse_pairs("0-x").expect_err("not a number").to_string();
    assert!(e.contains("\"x\" in \"0-x\" is not a GPU index"), "{e}");
}

#[test]
fn options_are_checked_against_the_host() {
    let all = ProbeOptions::default()
        .validate(3)
        .expect("defaults are valid");
    assert_eq!(all, vec![(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]);
    assert!(
        ProbeOptions::default()
            .validate(1)
            .expect("one GPU")
            .is_empty()
    );

    let with = |pairs: Vec<(u32, u32)>| ProbeOptions {
        pairs: Some(pairs),
        ..Default::default()
    };
    assert_eq!(with(vec![(1, 0)]).validate(2).expect("valid"), vec![(1, 0)]);
    let e = with(vec![(0, 2)])
        .validate(2)
        .expect_err("out of range")
        .to_string();
    assert_eq!(e, "invalid pair 0-2: this host has 2 GPU(s), indices 0..2");
    let e = with(vec![(1, 1)])
        .validate(2)
        .expect_err("same GPU")
        .to_string();
    assert!(e.contains("same GPU"), "{e}");
    let e = ProbeOptions {
        repeats: 0,
        ..Default::default()
    }
    .validate(2)
    .expect_err("zero repeats")
    .to_string();
    assert!(e.starts_with("invalid option repeats"), "{e}");
    let e = ProbeOptions {
        buffer_bytes: 8,
        ..Default::default()
    }
    .validate(2)
    .expect_err("tiny")
    .to_string();
    assert!(e.starts_with("invalid option buffer_bytes"), "{e}");
}

#[test]
fn median_ignores_non_finite_runs() {
    assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    assert_eq!(median(vec![f64::INFINITY, 5.0]), Some(5.0));
    assert_eq!(median(vec![]), None);
}

#[test]
fn nvml_bus_ids_map_to_cuda_pci_locations() {
    assert_eq!(parse_bus_id("00000000:00:06.0"), Some((0, 0, 6)));
    assert_eq!(parse_bus_id("00000001:1B:00.0"), Some((1, 0x1b, 0)));
    assert_eq!(parse_bus_id("garbage"), None);
}

#[test]
fn probe_without_a_driver_says_so() {
    let gpus = crate::Gpus::unavailable("test: no NVML");
    match probe(&gpus, &ProbeOptions::default()) {
        Err(ProbeError::NoCudaDriver) => assert!(!cuda::driver_present()),
        Err(other) => assert!(
            cuda::driver_present(),
            "unexpected error without a driver: {other}"
        ),
        Ok(report) => assert!(
            !report.devices.is_empty(),
            "a driver is present, so devices were measured"
        ),
    }
    let msg = ProbeError::NoCudaDriver.to_string();
    assert!(msg.starts_with("no CUDA driver"), "{msg}");
}

#[test]
fn a_recorded_2xh200_probe_reassembles_to_the_same_report() {
    // `fleetbench probe-p2p --json` on nvidia-h200-x2 (docs/validation/h200.md, run 6).
    let recorded: P2pReport =
        serde_json::from_str(include_str!("fixtures/h200x2-probe-run6.json")).expect("parses");
    let links: Vec<PairLink> = recorded.pairs.iter().map(|p| p.link.clone()).collect();
    let measured: Vec<_> = recorded
        .pairs
        .iter()
        .map(|p| (p.link.src, p.link.dst, p.measured.clone()))
        .collect();
    let again = assemble(&links, &measured);
    assert_eq!(again, recorded.pairs);
    for p in &again {
        assert_eq!(p.link.nvlink_count, 18);
        assert!(p.findings.is_empty(), "{:?}", p.findings);
        assert!(p.measured.uni_enabled_gbps.is_some_and(|g| g > 390.0));
    }
    assert_eq!(recorded.devices.len(), 2);
}
