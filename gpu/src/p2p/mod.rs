//! The GPU peer-to-peer probe: NVML's link facts plus measured copy bandwidth and latency for
//! every ordered pair, with a diagnosis in words. Blocking: the agent calls it in
//! `spawn_blocking`.

mod assemble;
mod cuda;
mod diagnose;
mod links;
mod render;
mod report;

use std::time::Instant;

pub use assemble::assemble;
pub use cuda::driver_present as cuda_driver_present;
pub use diagnose::{diagnose, expected_link, pcie_lane_gbps};
pub use links::{NvlinkEnds, nvlink_version_gbps, pair_nvlinks};
pub use render::render_table;
pub use report::{P2pDevice, P2pReport, PairLink, PairMeasurement, PairResult};

use crate::Gpus;
use cuda::{BANDWIDTH_COPIES, Cuda, LATENCY_BYTES, LATENCY_COPIES};

/// Default buffer per copy: 153 MiB, CUDA's p2pBandwidthLatencyTest's 40,000,000 ints
/// (160 MB) rounded to whole MiB, so the defaults reproduce the figures people compare with.
/// Launch costs vanish at any size above a few MiB, but bidirectional copies through the host
/// fall as buffers grow (56.6 GB/s at 128 MiB, 44.9 at 256 MiB on 2×H200: the host blocks while
/// it enqueues staged copies), so the size must match the sample's to compare.
pub const DEFAULT_BUFFER_BYTES: u64 = 153 << 20;
/// Default number of timed runs per figure (the median is reported).
pub const DEFAULT_REPEATS: u32 = 10;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Bytes per copy for bandwidth.
    pub buffer_bytes: u64,
    /// Timed runs per figure; the median is reported.
    pub repeats: u32,
    /// Ordered pairs (NVML indices) to measure; `None`: every ordered pair.
    pub pairs: Option<Vec<(u32, u32)>>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            repeats: DEFAULT_REPEATS,
            pairs: None,
        }
    }
}

/// Why the probe could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// libcuda could not be loaded: no NVIDIA driver on this host.
    #[error(
        "no CUDA driver: libcuda.so could not be loaded, so no GPU can be measured on this host"
    )]
    NoCudaDriver,
    /// The driver loaded but reports no devices.
    #[error("no GPUs: the CUDA driver reports 0 devices")]
    NoGpus,
    /// A requested pair names a GPU that does not exist, or the same GPU twice.
    #[error("invalid pair {src}-{dst}: {reason}")]
    InvalidPair {
        /// Source GPU index as given.
        src: u32,
        /// Destination GPU index as given.
        dst: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// An option is out of range.
    #[error("invalid option {field}: {reason}")]
    InvalidOption {
        /// The option's name.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A pair list could not be parsed.
    #[error("invalid pair list {input:?}: {reason} (expected e.g. \"0-1,1-0\")")]
    BadPairList {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA {step} failed: {message}")]
    Cuda {
        /// The driver function that failed.
        step: String,
        /// The driver's error.
        message: String,
    },
    /// A timed run did not finish in time.
    #[error("a timed copy did not finish within {seconds} s")]
    Timeout {
        /// The deadline.
        seconds: u64,
    },
}

/// Parses "0-1,1-0" into ordered pairs.
pub fn parse_pairs(input: &str) -> Result<Vec<(u32, u32)>, ProbeError> {
    let bad = |reason: String| ProbeError::BadPairList {
        input: input.to_string(),
        reason,
    };
    let mut out = Vec::new();
    for part in input.split(',').map(str::trim) {
        let Some((s, d)) = part.split_once('-') else {
            return Err(bad(format!("{part:?} is not SRC-DST")));
        };
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| bad(format!("{t:?} in {part:?} is not a GPU index")))
        };
        out.push((num(s)?, num(d)?));
    }
    Ok(out)
}

impl ProbeOptions {
    /// Checks the options against a host with `count` GPUs; returns the pairs to measure.
    pub fn validate(&self, count: u32) -> Result<Vec<(u32, u32)>, ProbeError> {
        if self.buffer_bytes < LATENCY_BYTES as u64 {
            return Err(ProbeError::InvalidOption {
                field: "buffer_bytes",
                reason: format!(
                    "{} is below the minimum of {LATENCY_BYTES} bytes",
                    self.buffer_bytes
                ),
            });
        }
        if self.buffer_bytes > 16 << 30 {
            return Err(ProbeError::InvalidOption {
                field: "buffer_bytes",
                reason: format!("{} is above the maximum of 16 GiB", self.buffer_bytes),
            });
        }
        if self.repeats == 0 || self.repeats > 1000 {
            return Err(ProbeError::InvalidOption {
                field: "repeats",
                reason: format!("{} is outside 1..=1000", self.repeats),
            });
        }
        let Some(pairs) = &self.pairs else {
            return Ok((0..count)
                .flat_map(|s| (0..count).filter(move |&d| d != s).map(move |d| (s, d)))
                .collect());
        };
        for &(src, dst) in pairs {
            let invalid = |reason: String| ProbeError::InvalidPair { src, dst, reason };
            if src == dst {
                return Err(invalid("source and destination are the same GPU".into()));
            }
            if src >= count || dst >= count {
                return Err(invalid(format!(
                    "this host has {count} GPU(s), indices 0..{count}"
                )));
            }
        }
        Ok(pairs.clone())
    }
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// Parses NVML's "00000000:00:06.0" into (domain, bus, device).
fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.trim().split(':');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let dev = parts.next()?.split('.').next()?;
    Some((domain, bus, u32::from_str_radix(dev, 16).ok()?))
}

/// Measures every requested ordered pair and each GPU's own copy bandwidth.
pub fn probe(gpus: &Gpus, opts: &ProbeOptions) -> Result<P2pReport, ProbeError> {
    let began = Instant::now();
    if !cuda::driver_present() {
        return Err(ProbeError::NoCudaDriver);
    }
    let count = cuda::device_count()?;
    if count == 0 {
        return Err(ProbeError::NoGpus);
    }
    let facts = gpus.facts();
    // NVML numbers GPUs in PCI order, CUDA by its own order: pair them by PCI location so that
    // indices in options and report are NVML's (what nvidia-smi shows).
    let mut ordinal_of: Vec<usize> = (0..count as usize).collect();
    if facts.len() == count as usize {
        let locs: Vec<_> = (0..count)
            .map(cuda::pci_location)
            .collect::<Result<_, _>>()?;
        for (ord, loc) in locs.iter().enumerate() {
            if let Some(f) = facts
                .iter()
                .find(|f| parse_bus_id(&f.pci_bus_id) == Some(*loc))
            {
                ordinal_of[f.index as usize] = ord;
            }
        }
    }
    let pairs = opts.validate(count)?;
    let buffer = opts.buffer_bytes as usize;
    let mut cuda = Cuda::open(count, buffer)?;
    let mut notes = vec![format!(
        "method: cuMemcpyPeerAsync timed by CUDA events, {BANDWIDTH_COPIES} copies of {} MiB per run, median of {} runs; latency: {LATENCY_COPIES} copies of {LATENCY_BYTES} B per run; each run's stream held while enqueuing (at most 5 ms, as p2pBandwidthLatencyTest's spin kernel); same-device bandwidth counts bytes read and written",
        opts.buffer_bytes as f64 / (1u64 << 20) as f64,
        opts.repeats
    )];

    let copy_bytes = buffer as f64 * f64::from(BANDWIDTH_COPIES);

    let mut devices = Vec::new();
    for index in 0..count {
        let ord = ordinal_of[index as usize];
        let d2d = median_of(&mut cuda, opts.repeats, &mut |c| {
            c.time_uni(ord, ord, buffer, BANDWIDTH_COPIES, true)
                .map(|t| 2.0 * copy_bytes / t / 1e9)
        })?;
        let f = facts.iter().find(|f| f.index == index);
        devices.push(P2pDevice {
            index,
            name: f.map(|f| f.name.clone()).unwrap_or_default(),
            pci_bus_id: f.map(|f| f.pci_bus_id.clone()).unwrap_or_default(),
            pcie_link_gen: f.map_or(0, |f| f.pcie_link_gen),
            pcie_link_width: f.map_or(0, |f| f.pcie_link_width),
            nvlink_active_count: f.map_or(0, |f| f.nvlink_active_count),
            nvlink_speed_gbps: f.and_then(|f| f.nvlink_speed_gbps).unwrap_or(0.0),
            d2d_bandwidth_gbps: d2d,
        });
    }

    let mut links = Vec::new();
    let mut measured = Vec::new();
    for &(src, dst) in &pairs {
        let (s, d) = (ordinal_of[src as usize], ordinal_of[dst as usize]);
        links.push(match gpus.source() {
            Some(nvml) => nvml.pair_link(src, dst),
            None => unknown_link(src, dst),
        });
        let mut m = PairMeasurement::default();
        if let Err(e) = measure_pair(&mut cuda, s, d, opts.repeats, buffer, &mut m) {
            // A wedged GPU makes every later figure meaningless; anything else stays with the pair.
            if matches!(e, ProbeError::Timeout { .. }) {
                return Err(e);
            }
            let _ = cuda.set_peer(s, d, false);
            m.error = Some(e.to_string());
        }
        measured.push((src, dst, m));
    }
    if !cuda.hold_works() {
        notes.push("cuStreamWaitValue32 refused: runs were timed without holding the stream, so small-copy latency includes launch overhead".into());
    }
    drop(cuda);
    if count == 1 {
        notes.push("one GPU, no pairs".into());
    }
    Ok(P2pReport {
        devices,
        pairs: assemble(&links, &measured),
        unavailable_reason: None,
        wall_s: began.elapsed().as_secs_f64(),
        buffer_bytes: opts.buffer_bytes,
        repeats: opts.repeats,
        notes,
    })
}

/// Runs the pair measurement path on GPU 0 against itself (copies through
/// `cuMemcpyPeerAsync`, bidirectional on two streams, latency with and without holding the
/// stream), so that a one-GPU host exercises the code a pair uses. Figures: (label, value).
#[doc(hidden)]
pub fn self_test(opts: &ProbeOptions) -> Result<Vec<(String, f64)>, ProbeError> {
    if !cuda::driver_present() {
        return Err(ProbeError::NoCudaDriver);
    }
    if cuda::device_count()? == 0 {
        return Err(ProbeError::NoGpus);
    }
    opts.validate(1)?;
    let buffer = opts.buffer_bytes as usize;
    let mut c = Cuda::open(1, buffer)?;
    c.peer_api_always = true;
    let copy_bytes = buffer as f64 * f64::from(BANDWIDTH_COPIES);
    let mut out = Vec::new();
    for hold in [false, true] {
        let tag = if hold { "held" } else { "not held" };
        let uni = median_of(&mut c, opts.repeats, &mut |c| {
            c.time_uni(0, 0, buffer, BANDWIDTH_COPIES, hold)
                .map(|t| copy_bytes / t / 1e9)
        })?;
        let bidi = median_of(&mut c, opts.repeats, &mut |c| {
            c.time_bidi(0, 0, buffer, BANDWIDTH_COPIES, hold)
                .map(|t| 2.0 * copy_bytes / t / 1e9)
        })?;
        let lat = median_of(&mut c, opts.repeats, &mut |c| {
            c.time_uni(0, 0, LATENCY_BYTES, LATENCY_COPIES, hold)
                .map(|t| t * 1e6 / f64::from(LATENCY_COPIES))
        })?;
        out.push((
            format!("uni GB/s via cuMemcpyPeerAsync, {tag}"),
            uni.unwrap_or(f64::NAN),
        ));
        out.push((
            format!("bidi GB/s on two streams, {tag}"),
            bidi.unwrap_or(f64::NAN),
        ));
        out.push((
            format!("latency µs per 16 B copy, {tag}"),
            lat.unwrap_or(f64::NAN),
        ));
    }
    out.push((
        "stream hold worked (1 = yes)".into(),
        if c.hold_works() { 1.0 } else { 0.0 },
    ));
    Ok(out)
}

/// Timed runs after one warm-up; the median.
fn median_of(
    cuda: &mut Cuda,
    repeats: u32,
    f: &mut dyn FnMut(&mut Cuda) -> Result<f64, ProbeError>,
) -> Result<Option<f64>, ProbeError> {
    f(cuda)?;
    let mut xs = Vec::with_capacity(repeats as usize);
    for _ in 0..repeats {
        xs.push(f(cuda)?);
    }
    Ok(median(xs))
}

/// Everything measured for one ordered pair (CUDA ordinals `s` → `d`), filled into `m` as it
/// goes so that figures measured before an error are kept.
fn measure_pair(
    cuda: &mut Cuda,
    s: usize,
    d: usize,
    repeats: u32,
    buffer: usize,
    m: &mut PairMeasurement,
) -> Result<(), ProbeError> {
    let copy_bytes = buffer as f64 * f64::from(BANDWIDTH_COPIES);
    let gb = |bytes: f64, secs: f64| bytes / secs / 1e9;
    let per_copy_us = |t: f64| t * 1e6 / f64::from(LATENCY_COPIES);
    m.cuda_can_access_peer = cuda.can_access_peer(s, d)? && cuda.can_access_peer(d, s)?;
    cuda.set_peer(s, d, false)?;
    m.uni_disabled_gbps = median_of(cuda, repeats, &mut |c| {
        c.time_uni(s, d, buffer, BANDWIDTH_COPIES, true)
            .map(|t| gb(copy_bytes, t))
    })?;
    m.bidi_disabled_gbps = median_of(cuda, repeats, &mut |c| {
        c.time_bidi(s, d, buffer, BANDWIDTH_COPIES, true)
            .map(|t| gb(2.0 * copy_bytes, t))
    })?;
    m.latency_disabled_us = median_of(cuda, repeats, &mut |c| {
        c.time_uni(s, d, LATENCY_BYTES, LATENCY_COPIES, true)
            .map(per_copy_us)
    })?;
    if !m.cuda_can_access_peer {
        return Ok(());
    }
    cuda.set_peer(s, d, true)?;
    m.uni_enabled_gbps = median_of(cuda, repeats, &mut |c| {
        c.time_uni(s, d, buffer, BANDWIDTH_COPIES, true)
            .map(|t| gb(copy_bytes, t))
    })?;
    m.bidi_enabled_gbps = median_of(cuda, repeats, &mut |c| {
        c.time_bidi(s, d, buffer, BANDWIDTH_COPIES, true)
            .map(|t| gb(2.0 * copy_bytes, t))
    })?;
    m.latency_enabled_us = median_of(cuda, repeats, &mut |c| {
        c.time_uni(s, d, LATENCY_BYTES, LATENCY_COPIES, true)
            .map(per_copy_us)
    })?;
    // Leave peer access off so the next pair's "disabled" figures are honest.
    cuda.set_peer(s, d, false)
}

fn unknown_link(src: u32, dst: u32) -> PairLink {
    PairLink {
        src,
        dst,
        nvml_read: "unknown".into(),
        nvml_write: "unknown".into(),
        nvml_nvlink: "unknown".into(),
        nvml_atomics: "unknown".into(),
        topology: String::new(),
        nvlink_count: 0,
        nvlink_speed_gbps: 0.0,
        pcie_gen: 0,
        pcie_width: 0,
    }
}

#[cfg(test)]
mod tests;
