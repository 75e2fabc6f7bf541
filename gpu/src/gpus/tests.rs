//! [`Gpus`] over a recorded source: what it reports, and how link rates are derived.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;
use crate::p2p::PairLink;

/// Two GPUs with fixed answers; NVLink counters advance by 1 GiB per read.
struct Recorded {
    reads: Mutex<u64>,
}

impl GpuSource for Recorded {
    fn driver_versions(&self) -> (String, String) {
        ("580.159.04".into(), "13.0".into())
    }
    fn device_count(&self) -> u32 {
        2
    }
    fn facts(&self, index: u32) -> Result<GpuInfo, String> {
        if index == 1 {
            return Err("GPU 1: GpuLost".into());
        }
        Ok(GpuInfo {
            index,
            name: "NVIDIA H200".into(),
            uuid: "GPU-0".into(),
            pci_bus_id: "00000000:00:06.0".into(),
            memory_total_bytes: 143_771 << 20,
            pcie_link_gen: 5,
            pcie_link_width: 16,
            pcie_max_link_gen: 5,
            pcie_max_link_width: 16,
            nvlink_active_count: 0,
            nvlink_speed_gbps: None,
            numa_node: Some(0),
            power_limit_w: Some(700.0),
        })
    }
    fn sample_fast(&self, index: u32) -> GpuSampleData {
        GpuSampleData {
            index,
            utilization_pct: Some(97.0),
            power_w: Some(650.5),
            ..Default::default()
        }
    }
    fn slow_counters(&self, _index: u32) -> SlowCounters {
        let mut n = self.reads.lock().expect("lock");
        *n += 1;
        SlowCounters {
            pcie_tx_bytes_per_s: Some(1.5e9),
            pcie_rx_bytes_per_s: Some(2.5e9),
            nvlink_tx_bytes: Some(*n << 30),
            nvlink_rx_bytes: None,
            energy_mj: Some(1_000 * *n),
        }
    }
    fn processes(&self, index: u32) -> Vec<GpuProcess> {
        vec![GpuProcess {
            gpu: index,
            pid: 100 + index,
            used_bytes: Some(1 << 30),
        }]
    }
    fn pair_link(&self, _src: u32, _dst: u32) -> PairLink {
        unreachable!("not used by these tests")
    }
}

fn recorded() -> Gpus {
    Gpus::from_source(Box::new(Recorded {
        reads: Mutex::new(0),
    }))
}

#[test]
fn facts_leave_out_a_gpu_nvml_cannot_open() {
    let g = recorded();
    assert_eq!(g.unavailable_reason(), None);
    assert_eq!(g.count(), 2);
    let facts = g.facts();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].power_limit_w, Some(700.0));
    assert_eq!(
        g.driver_versions(),
        ("580.159.04".to_string(), "13.0".to_string())
    );
    assert_eq!(
        g.gpu_processes().iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![100, 101]
    );
}

#[test]
fn link_rates_join_samples_after_a_sampler_round() {
    let g = recorded();
    // The sampler thread starts with this first call; its first round may already have run,
    // so only the fast fields are certain here.
    assert_eq!(g.sample()[0].power_w, Some(650.5));
    g.sample_links_once();
    let s = g.sample();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].utilization_pct, Some(97.0));
    assert_eq!(s[1].pcie_tx_bytes_per_s, Some(1.5e9));
    assert_eq!(s[1].pcie_rx_bytes_per_s, Some(2.5e9));
    assert_eq!(
        s[0].nvlink_rx_bytes_per_s, None,
        "the device has no RX counter"
    );
    assert!(
        s[0].energy_mj.is_some_and(|e| e >= 1_000),
        "energy comes from the sampler round"
    );
    std::thread::sleep(Duration::from_millis(20));
    g.sample_links_once();
    let s = g.sample();
    let rate = s[0]
        .nvlink_tx_bytes_per_s
        .expect("a rate after two readings");
    assert!(rate > 0.0, "{rate}");
}

#[test]
fn sampler_thread_ends_with_the_last_clone() {
    let g = recorded();
    let weak = Arc::downgrade(&g.inner);
    let _ = g.sample();
    let clone = g.clone();
    drop(g);
    assert!(weak.upgrade().is_some(), "a clone still holds it");
    drop(clone);
    // The thread holds only a weak reference between rounds (it may be inside one now).
    let deadline = Instant::now() + Duration::from_secs(5);
    while weak.upgrade().is_some() {
        assert!(Instant::now() < deadline, "sampler kept the GPUs alive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn nvlink_rate_is_the_counter_delta_over_time() {
    let t0 = Instant::now();
    let first = next_link_state(
        LinkState::default(),
        SlowCounters {
            nvlink_tx_bytes: Some(1_000),
            nvlink_rx_bytes: Some(5_000),
            ..Default::default()
        },
        t0,
    );
    assert_eq!(
        first.nvlink_tx_bytes_per_s, None,
        "no rate from one reading"
    );
    let second = next_link_state(
        first,
        SlowCounters {
            nvlink_tx_bytes: Some(3_000),
            nvlink_rx_bytes: Some(4_000),
            ..Default::default()
        },
        t0 + Duration::from_millis(500),
    );
    assert_eq!(second.nvlink_tx_bytes_per_s, Some(4_000.0));
    assert_eq!(
        second.nvlink_rx_bytes_per_s, None,
        "a counter that went back was reset"
    );
}

#[test]
fn without_nvml_nothing_is_reported_and_the_reason_is_kept() {
    let g = Gpus::unavailable("no NVML: libnvidia-ml.so.1 could not be loaded");
    assert!(
        g.unavailable_reason()
            .is_some_and(|r| r.contains("libnvidia-ml"))
    );
    assert!(g.facts().is_empty());
    assert!(g.sample().is_empty());
    assert!(g.gpu_processes().is_empty());
    assert_eq!(g.count(), 0);
    assert_eq!(g.driver_versions(), (String::new(), String::new()));
}

#[test]
fn init_reports_gpus_or_a_reason() {
    let g = Gpus::init();
    match g.unavailable_reason() {
        Some(reason) => {
            assert!(reason.contains("NVML"), "{reason}");
            assert!(g.facts().is_empty());
        }
        None => assert_eq!(g.facts().len() as u32, g.count()),
    }
}

/// One GPU that can watch XID events and one that cannot; events come from a script.
struct XidScript {
    events: Arc<Mutex<Vec<(u32, u64)>>>,
}

impl GpuSource for XidScript {
    fn driver_versions(&self) -> (String, String) {
        (String::new(), String::new())
    }
    fn device_count(&self) -> u32 {
        2
    }
    fn facts(&self, index: u32) -> Result<GpuInfo, String> {
        Err(format!("GPU {index}: not needed"))
    }
    fn sample_fast(&self, index: u32) -> GpuSampleData {
        GpuSampleData {
            index,
            // HW slowdown (0x8) and SW power cap (0x4), as NVML reports them.
            clocks_throttle_reasons: Some(0x8 | 0x4),
            ..Default::default()
        }
    }
    fn slow_counters(&self, _index: u32) -> SlowCounters {
        SlowCounters::default()
    }
    fn processes(&self, _index: u32) -> Vec<GpuProcess> {
        Vec::new()
    }
    fn pair_link(&self, _src: u32, _dst: u32) -> PairLink {
        unreachable!("not used by these tests")
    }
    fn xid_watch(&self) -> Vec<u32> {
        vec![0]
    }
    fn xid_events(&self, timeout_ms: u32) -> Vec<(u32, u64)> {
        let out: Vec<(u32, u64)> = self.events.lock().expect("lock").drain(..).collect();
        if out.is_empty() {
            std::thread::sleep(Duration::from_millis(u64::from(timeout_ms.min(10))));
        }
        out
    }
}

#[test]
fn xid_errors_are_counted_per_watched_gpu_and_throttle_reasons_pass_through() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let g = Gpus::from_source(Box::new(XidScript {
        events: events.clone(),
    }));
    let s = g.sample();
    assert_eq!(s[0].clocks_throttle_reasons, Some(0xC));
    g.watch_xids_once();
    let s = g.sample();
    assert_eq!(s[0].xid_errors, Some(0), "watched, none yet: a real zero");
    assert_eq!(s[0].last_xid, None);
    assert_eq!(s[1].xid_errors, None, "not watchable: no count, not zero");

    // XID 79 (GPU fell off the bus) then 48 (double-bit ECC): both counted, the last kept; an
    // event for the unwatched GPU is not counted.
    events.lock().unwrap().extend([(0, 79), (1, 13), (0, 48)]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        g.watch_xids_once();
        let s = g.sample();
        if s[0].xid_errors == Some(2) {
            assert_eq!(s[0].last_xid, Some(48));
            assert_eq!(s[1].xid_errors, None);
            break;
        }
        assert!(Instant::now() < deadline, "XIDs not counted: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
