//! [`Gpus`]: the host's GPUs through NVML, initialised once and shared.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::nvml::NvmlSource;
use crate::source::{GpuSource, SlowCounters};
use crate::types::{GpuInfo, GpuProcess, GpuSampleData};

/// Pause between rounds of the link sampler (each round itself blocks ~40 ms per GPU).
const LINK_ROUND_PAUSE: Duration = Duration::from_millis(200);
/// Link rates older than this are not reported.
const LINK_RATE_MAX_AGE: Duration = Duration::from_secs(5);

/// The latest link rates of one GPU, and the counters they were derived from.
#[derive(Debug, Clone, Copy, Default)]
struct LinkState {
    at: Option<Instant>,
    counters: SlowCounters,
    nvlink_tx_bytes_per_s: Option<f64>,
    nvlink_rx_bytes_per_s: Option<f64>,
}

/// Critical XID errors of one GPU seen by the watcher.
#[derive(Debug, Clone, Copy, Default)]
struct XidState {
    watched: bool,
    count: u64,
    last: Option<u64>,
}

/// How long one wait of the XID watcher blocks (and how late the last clone's drop may end it).
const XID_WAIT_MS: u32 = 1000;

struct Inner {
    source: Option<Box<dyn GpuSource>>,
    reason: Option<String>,
    links: Mutex<Vec<LinkState>>,
    xids: Mutex<Vec<XidState>>,
    sampler_started: AtomicBool,
}

/// The host's GPUs. Cheap to clone; every clone shares one NVML handle and one background
/// sampler thread, which ends when the last clone is dropped.
#[derive(Clone)]
pub struct Gpus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpus")
            .field("available", &self.inner.source.is_some())
            .field("unavailable_reason", &self.inner.reason)
            .finish()
    }
}

impl Gpus {
    /// Loads NVML. Never fails: without a driver the value holds the reason and reports no GPUs.
    pub fn init() -> Gpus {
        match NvmlSource::init() {
            Ok(src) => Gpus::from_source(Box::new(src)),
            Err(reason) => Gpus::unavailable(reason),
        }
    }

    /// A value that reports no GPUs, for `reason`.
    pub fn unavailable(reason: impl Into<String>) -> Gpus {
        Gpus {
            inner: Arc::new(Inner {
                source: None,
                reason: Some(reason.into()),
                links: Mutex::new(Vec::new()),
                xids: Mutex::new(Vec::new()),
                sampler_started: AtomicBool::new(false),
            }),
        }
    }

    pub(crate) fn from_source(source: Box<dyn GpuSource>) -> Gpus {
        let n = source.device_count() as usize;
        Gpus {
            inner: Arc::new(Inner {
                source: Some(source),
                reason: None,
                links: Mutex::new(vec![LinkState::default(); n]),
                xids: Mutex::new(vec![XidState::default(); n]),
                sampler_started: AtomicBool::new(false),
            }),
        }
    }

    pub(crate) fn source(&self) -> Option<&dyn GpuSource> {
        self.inner.source.as_deref()
    }

    /// Why there are no GPUs to report (no driver, NVML failed), or `None` when NVML works.
    pub fn unavailable_reason(&self) -> Option<String> {
        self.inner.reason.clone()
    }

    /// Number of GPUs NVML sees (0 without NVML).
    pub fn count(&self) -> u32 {
        self.source().map_or(0, |s| s.device_count())
    }

    /// (driver version, CUDA driver version); empty strings without NVML.
    pub fn driver_versions(&self) -> (String, String) {
        self.source()
            .map(|s| s.driver_versions())
            .unwrap_or_default()
    }

    /// Facts of every GPU; a GPU NVML cannot open is left out.
    pub fn facts(&self) -> Vec<GpuInfo> {
        let Some(src) = self.source() else {
            return Vec::new();
        };
        (0..src.device_count())
            .filter_map(|i| src.facts(i).ok())
            .collect()
    }

    /// One telemetry sample of every GPU. Returns in well under a millisecond per GPU: PCIe and
    /// NVLink rates and the energy counter come from the background sampler (started by the
    /// first call, so they appear from about the second call on, and are at most one sampler
    /// round old: ~40 ms per GPU plus a 200 ms pause).
    pub fn sample(&self) -> Vec<GpuSampleData> {
        let Some(src) = self.source() else {
            return Vec::new();
        };
        self.start_sampler();
        let links = self
            .inner
            .links
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        let xids = self
            .inner
            .xids
            .lock()
            .map(|x| x.clone())
            .unwrap_or_default();
        (0..src.device_count())
            .map(|i| {
                let mut s = src.sample_fast(i);
                if let Some(l) = links.get(i as usize)
                    && l.at.is_some_and(|t| t.elapsed() <= LINK_RATE_MAX_AGE)
                {
                    s.pcie_tx_bytes_per_s = l.counters.pcie_tx_bytes_per_s;
                    s.pcie_rx_bytes_per_s = l.counters.pcie_rx_bytes_per_s;
                    s.nvlink_tx_bytes_per_s = l.nvlink_tx_bytes_per_s;
                    s.nvlink_rx_bytes_per_s = l.nvlink_rx_bytes_per_s;
                    s.energy_mj = l.counters.energy_mj;
                }
                if let Some(x) = xids.get(i as usize).filter(|x| x.watched) {
                    s.xid_errors = Some(x.count);
                    s.last_xid = x.last;
                }
                s
            })
            .collect()
    }

    /// Processes holding memory on any GPU.
    pub fn gpu_processes(&self) -> Vec<GpuProcess> {
        let Some(src) = self.source() else {
            return Vec::new();
        };
        (0..src.device_count())
            .flat_map(|i| src.processes(i))
            .collect()
    }

    /// Microseconds each NVML call of a sample takes, per GPU: a diagnostic for hosts where
    /// sampling is slow (virtual machines add a cost per driver call).
    pub fn sample_call_costs(&self) -> Vec<(u32, &'static str, f64)> {
        let Some(src) = self.source() else {
            return Vec::new();
        };
        (0..src.device_count())
            .flat_map(|i| src.call_costs(i).into_iter().map(move |(n, us)| (i, n, us)))
            .collect()
    }

    fn start_sampler(&self) {
        if self.inner.sampler_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("fleetbench-gpu-links".into())
            .spawn(move || link_sampler(weak));
        if spawned.is_err() {
            // Without the thread samples simply carry no link rates; try again next call.
            self.inner.sampler_started.store(false, Ordering::Release);
            return;
        }
        self.start_xid_watcher();
    }

    /// Registers for XID events and starts the thread that counts them; a host that cannot
    /// watch them (no support, no permission) reports no XID count rather than a false 0.
    fn start_xid_watcher(&self) {
        let Some(src) = self.source() else { return };
        let watched = src.xid_watch();
        if watched.is_empty() {
            return;
        }
        if let Ok(mut x) = self.inner.xids.lock() {
            for i in watched {
                if x.len() <= i as usize {
                    x.resize(i as usize + 1, XidState::default());
                }
                x[i as usize].watched = true;
            }
        }
        let weak = Arc::downgrade(&self.inner);
        let _ = std::thread::Builder::new()
            .name("fleetbench-gpu-xid".into())
            .spawn(move || xid_watcher(weak));
    }

    /// One wait of the XID watcher, run inline (tests drive it without the thread).
    #[cfg(test)]
    pub(crate) fn watch_xids_once(&self) {
        if let Some(src) = self.source()
            && self
                .inner
                .xids
                .lock()
                .is_ok_and(|x| x.iter().all(|s| !s.watched))
        {
            let watched = src.xid_watch();
            if let Ok(mut x) = self.inner.xids.lock() {
                for i in watched {
                    if let Some(s) = x.get_mut(i as usize) {
                        s.watched = true;
                    }
                }
            }
        }
        record_xids(&self.inner, 0);
    }

    /// One round of the link sampler, run inline (tests drive it without the thread).
    #[cfg(test)]
    pub(crate) fn sample_links_once(&self) {
        sample_links_round(&self.inner);
    }
}

fn link_sampler(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        sample_links_round(&inner);
        drop(inner);
        std::thread::sleep(LINK_ROUND_PAUSE);
    }
}

fn xid_watcher(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        record_xids(&inner, XID_WAIT_MS);
    }
}

/// Waits up to `timeout_ms` for XID events and counts them per GPU.
fn record_xids(inner: &Inner, timeout_ms: u32) {
    let Some(src) = inner.source.as_deref() else {
        return;
    };
    let events = src.xid_events(timeout_ms);
    if events.is_empty() {
        return;
    }
    let Ok(mut x) = inner.xids.lock() else { return };
    for (i, code) in events {
        if let Some(s) = x.get_mut(i as usize).filter(|s| s.watched) {
            s.count += 1;
            s.last = Some(code);
        }
    }
}

fn sample_links_round(inner: &Inner) {
    let Some(src) = inner.source.as_deref() else {
        return;
    };
    for i in 0..src.device_count() {
        let counters = src.slow_counters(i);
        let now = Instant::now();
        let Ok(mut links) = inner.links.lock() else {
            return;
        };
        if links.len() <= i as usize {
            links.resize(i as usize + 1, LinkState::default());
        }
        let prev = links[i as usize];
        links[i as usize] = next_link_state(prev, counters, now);
    }
}

/// NVLink rates are deltas of cumulative counters; the first reading has no rate yet.
fn next_link_state(prev: LinkState, counters: SlowCounters, now: Instant) -> LinkState {
    let rate = |old: Option<u64>, new: Option<u64>| -> Option<f64> {
        let dt = now.duration_since(prev.at?).as_secs_f64();
        let (old, new) = (old?, new?);
        // A counter that went backwards was reset; report nothing rather than a huge rate.
        (dt > 0.0 && new >= old).then(|| (new - old) as f64 / dt)
    };
    LinkState {
        at: Some(now),
        counters,
        nvlink_tx_bytes_per_s: rate(prev.counters.nvlink_tx_bytes, counters.nvlink_tx_bytes),
        nvlink_rx_bytes_per_s: rate(prev.counters.nvlink_rx_bytes, counters.nvlink_rx_bytes),
    }
}

#[cfg(test)]
mod tests;
