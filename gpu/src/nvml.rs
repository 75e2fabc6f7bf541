//! The real [`GpuSource`]: NVML through nvml-wrapper, loaded at run time.

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, P2pCapabilitiesIndex, P2pStatus, PcieUtilCounter, TemperatureSensor, TopologyLevel,
};
use nvml_wrapper::enum_wrappers::nv_link::IntDeviceType;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_NVLINK_GET_SPEED, NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
};
use nvml_wrapper::{Device, Nvml};

use crate::p2p::{NvlinkEnds, PairLink, pair_nvlinks};
use crate::source::{GpuSource, SlowCounters};
use crate::types::{GpuInfo, GpuProcess, GpuSampleData};

/// NVML's most links per GPU.
const MAX_NVLINKS: u32 = nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;

/// A device handle NVML gave out; NVML's handles stay valid until shutdown and NVML is
/// thread-safe, so sharing them across threads is sound.
#[derive(Clone, Copy)]
struct Handle(nvml_wrapper_sys::bindings::nvmlDevice_t);
// SAFETY: see above; the handle is an opaque token NVML accepts from any thread.
unsafe impl Send for Handle {}
// SAFETY: as for Send; the token is never dereferenced by us.
unsafe impl Sync for Handle {}

/// NVML's event set of the XID watcher, kept as its raw handle: the wrapper borrows the `Nvml`
/// it came from, which lives in the same struct.
struct XidSet(nvml_wrapper_sys::bindings::nvmlEventSet_t);
// SAFETY: an event set may be used from any one thread at a time; the Mutex around it ensures
// that, and it is only freed in Drop.
unsafe impl Send for XidSet {}

pub(crate) struct NvmlSource {
    /// Declared before `nvml`: freed while NVML is still loaded.
    xid_set: std::sync::Mutex<Option<XidSet>>,
    nvml: Nvml,
    /// Looked up once: a lookup is a driver call, which costs far more in a VM.
    handles: Vec<Handle>,
    /// Read once: a UUID never changes, and every driver call costs microseconds in a VM.
    uuids: Vec<String>,
}

impl NvmlSource {
    /// Loads libnvidia-ml and initialises it; the error says why not in words.
    pub(crate) fn init() -> Result<NvmlSource, String> {
        match Nvml::init() {
            Ok(nvml) => {
                let n = nvml.device_count().unwrap_or(0);
                let mut handles = Vec::new();
                let mut uuids = Vec::new();
                for i in 0..n {
                    let Ok(d) = nvml.device_by_index(i) else {
                        break;
                    };
                    uuids.push(d.uuid().unwrap_or_default());
                    // SAFETY: only copies the opaque handle out.
                    handles.push(Handle(unsafe { d.handle() }));
                }
                Ok(NvmlSource {
                    xid_set: std::sync::Mutex::new(None),
                    nvml,
                    handles,
                    uuids,
                })
            }
            Err(NvmlError::LibloadingError(e)) => Err(format!(
                "no NVML: libnvidia-ml.so.1 could not be loaded ({e}); is the NVIDIA driver installed?"
            )),
            Err(e) => Err(format!("NVML failed to initialise: {e}")),
        }
    }

    /// The XID event set as the wrapper type, not freed when dropped.
    fn xid_set_wrapper(&self, raw: &XidSet) -> std::mem::ManuallyDrop<EventSet<'_>> {
        // SAFETY: the handle came from this Nvml's create_event_set and is freed only in Drop.
        std::mem::ManuallyDrop::new(unsafe { EventSet::new(raw.0, &self.nvml) })
    }

    fn device(&self, index: u32) -> Result<Device<'_>, String> {
        if let Some(h) = self.handles.get(index as usize) {
            // SAFETY: the handle came from this Nvml, which outlives the returned Device.
            return Ok(unsafe { Device::new(h.0, &self.nvml) });
        }
        self.nvml
            .device_by_index(index)
            .map_err(|e| format!("GPU {index}: {e}"))
    }
}

fn p2p_word(r: Result<P2pStatus, NvmlError>) -> String {
    match r {
        Ok(P2pStatus::Ok) => "ok",
        Ok(P2pStatus::ChipsetNotSupported) => "chipset_not_supported",
        Ok(P2pStatus::GpuNotSupported) => "gpu_not_supported",
        Ok(P2pStatus::IohTopologyNotSupported) => "ioh_topology_not_supported",
        Ok(P2pStatus::DisabledByRegkey) => "disabled_by_regkey",
        Ok(P2pStatus::NotSupported) => "not_supported",
        Ok(P2pStatus::Unknown) => "unknown",
        Err(_) => "error",
    }
    .to_string()
}

fn topology_word(level: TopologyLevel) -> &'static str {
    match level {
        TopologyLevel::Internal => "internal",
        TopologyLevel::Single => "single",
        TopologyLevel::Multiple => "multiple",
        TopologyLevel::HostBridge => "hostbridge",
        TopologyLevel::Node => "node",
        TopologyLevel::System => "system",
    }
}

fn bus_eq(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// NVLink link speed, GB/s per direction, of the device's active links. The common-speed
/// field answered nothing on the 2×H200 VM, so per-link speed (scoped to `link`) and, last, the
/// NVLink version's nominal rate are tried after it.
fn nvlink_speed_gbps(nvml: &Nvml, dev: &Device<'_>, link: u32) -> Option<f64> {
    let common = dev
        .field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON)])
        .ok()
        .and_then(|v| v.into_iter().next())
        .and_then(|s| s.ok())
        .and_then(|s| s.value.ok())
        .and_then(sample_as_f64);
    let mbps = common
        .filter(|m| *m > 0.0)
        .or_else(|| raw_field(nvml, dev, NVML_FI_DEV_NVLINK_GET_SPEED, link).filter(|m| *m > 0.0));
    if let Some(mbps) = mbps {
        return Some(mbps / 1000.0);
    }
    let version = dev.link_wrapper_for(link).version().ok()?;
    crate::p2p::nvlink_version_gbps(version)
}

/// One field value with a scope (a link number, or `u32::MAX` for all links) as f64.
/// nvml-wrapper's `field_values_for` always sends scope 0, hence the raw call.
fn raw_field(nvml: &Nvml, dev: &Device<'_>, field: u32, scope: u32) -> Option<f64> {
    raw_fields(nvml, dev, &[field], scope)
        .into_iter()
        .next()
        .flatten()
}

fn raw_fields(nvml: &Nvml, dev: &Device<'_>, fields: &[u32], scope: u32) -> Vec<Option<f64>> {
    use nvml_wrapper_sys::bindings::*;
    const DOUBLE: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE;
    const UNSIGNED_INT: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
    const UNSIGNED_LONG: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG;
    const UNSIGNED_LONG_LONG: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    const SIGNED_LONG_LONG: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG;
    const SIGNED_INT: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT;
    const UNSIGNED_SHORT: u32 = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT;
    let Ok(sym) = nvml.lib().nvmlDeviceGetFieldValues.as_ref() else {
        return vec![None; fields.len()];
    };
    let mut values: Vec<nvmlFieldValue_t> = fields
        .iter()
        .map(|&f| {
            // SAFETY: nvmlFieldValue_t is plain C data; zeroed is a valid empty request.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = f;
            v.scopeId = scope;
            v
        })
        .collect();
    // SAFETY: the handle belongs to this live Nvml; the vector outlives the call and its length
    // is passed.
    let rc = unsafe { sym(dev.handle(), values.len() as i32, values.as_mut_ptr()) };
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        return vec![None; fields.len()];
    }
    values
        .iter()
        .map(|v| {
            if v.nvmlReturn != nvmlReturn_enum_NVML_SUCCESS {
                return None;
            }
            // SAFETY: the union member read is the one `valueType` names.
            Some(unsafe {
                match v.valueType {
                    DOUBLE => v.value.dVal,
                    UNSIGNED_INT => f64::from(v.value.uiVal),
                    UNSIGNED_LONG => v.value.ulVal as f64,
                    UNSIGNED_LONG_LONG => v.value.ullVal as f64,
                    SIGNED_LONG_LONG => v.value.sllVal as f64,
                    SIGNED_INT => f64::from(v.value.siVal),
                    UNSIGNED_SHORT => f64::from(v.value.usVal),
                    _ => return None,
                }
            })
        })
        .collect()
}

/// Energy since the driver loaded, mJ, through field values where the driver has them (one
/// read took 2.5 ms either way on the H200 VM, hence on the background thread).
fn energy_mj(dev: &Device<'_>) -> Option<u64> {
    let by_field = dev
        .field_values_for(&[FieldId(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)])
        .ok()
        .and_then(|v| v.into_iter().next())
        .and_then(|s| s.ok())
        .and_then(|s| s.value.ok())
        .and_then(sample_as_f64);
    match by_field {
        Some(mj) if mj >= 0.0 => Some(mj as u64),
        _ => dev.total_energy_consumption().ok(),
    }
}

fn sample_as_f64(v: nvml_wrapper::enums::device::SampleValue) -> Option<f64> {
    use nvml_wrapper::enums::device::SampleValue as S;
    Some(match v {
        S::F64(x) => x,
        S::U32(x) => f64::from(x),
        S::U64(x) => x as f64,
        S::I64(x) => x as f64,
    })
}

fn active_links(dev: &Device<'_>) -> Vec<u32> {
    (0..MAX_NVLINKS)
        .filter(|&l| dev.link_wrapper_for(l).is_active().unwrap_or(false))
        .collect()
}

/// NVLink data counters summed over all links (scope `u32::MAX`), bytes; NVML counts KiB.
fn nvlink_totals(nvml: &Nvml, dev: &Device<'_>) -> (Option<u64>, Option<u64>) {
    let v = raw_fields(
        nvml,
        dev,
        &[
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ],
        u32::MAX,
    );
    let bytes = |x: Option<f64>| x.map(|kib| kib as u64 * 1024);
    (bytes(v[0]), bytes(v[1]))
}

impl GpuSource for NvmlSource {
    fn driver_versions(&self) -> (String, String) {
        let driver = self.nvml.sys_driver_version().unwrap_or_default();
        let cuda = self
            .nvml
            .sys_cuda_driver_version()
            .map(|v| {
                format!(
                    "{}.{}",
                    nvml_wrapper::cuda_driver_version_major(v),
                    nvml_wrapper::cuda_driver_version_minor(v)
                )
            })
            .unwrap_or_default();
        (driver, cuda)
    }

    fn device_count(&self) -> u32 {
        self.nvml.device_count().unwrap_or(0)
    }

    fn facts(&self, index: u32) -> Result<GpuInfo, String> {
        let dev = self.device(index)?;
        let links = active_links(&dev);
        Ok(GpuInfo {
            index,
            name: dev.name().unwrap_or_default(),
            uuid: dev.uuid().unwrap_or_default(),
            pci_bus_id: dev.pci_info().map(|p| p.bus_id).unwrap_or_default(),
            memory_total_bytes: dev.memory_info().map(|m| m.total).unwrap_or(0),
            pcie_link_gen: dev.current_pcie_link_gen().unwrap_or(0),
            pcie_link_width: dev.current_pcie_link_width().unwrap_or(0),
            pcie_max_link_gen: dev.max_pcie_link_gen().unwrap_or(0),
            pcie_max_link_width: dev.max_pcie_link_width().unwrap_or(0),
            nvlink_active_count: links.len() as u32,
            nvlink_speed_gbps: links
                .first()
                .and_then(|&l| nvlink_speed_gbps(&self.nvml, &dev, l)),
            numa_node: dev.numa_node_id().ok().and_then(|n| i32::try_from(n).ok()),
            power_limit_w: dev
                .enforced_power_limit()
                .ok()
                .map(|mw| f64::from(mw) / 1000.0),
        })
    }

    fn sample_fast(&self, index: u32) -> GpuSampleData {
        let Ok(dev) = self.device(index) else {
            return GpuSampleData {
                index,
                ..Default::default()
            };
        };
        let util = dev.utilization_rates().ok();
        let mem = dev.memory_info().ok();
        GpuSampleData {
            index,
            uuid: self.uuids.get(index as usize).cloned().unwrap_or_default(),
            utilization_pct: util.as_ref().map(|u| f64::from(u.gpu)),
            memory_utilization_pct: util.as_ref().map(|u| f64::from(u.memory)),
            memory_used_bytes: mem.as_ref().map(|m| m.used),
            memory_total_bytes: mem.as_ref().map(|m| m.total),
            power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
            memory_clock_mhz: dev.clock_info(Clock::Memory).ok(),
            temperature_c: dev.temperature(TemperatureSensor::Gpu).ok(),
            clocks_throttle_reasons: dev.current_throttle_reasons().ok().map(|r| r.bits()),
            ..Default::default()
        }
    }

    fn slow_counters(&self, index: u32) -> SlowCounters {
        let Ok(dev) = self.device(index) else {
            return SlowCounters::default();
        };
        // NVML reports KB/s over a 20 ms window.
        let pcie = |c| dev.pcie_throughput(c).ok().map(|kb| f64::from(kb) * 1024.0);
        let (nvlink_tx_bytes, nvlink_rx_bytes) = nvlink_totals(&self.nvml, &dev);
        SlowCounters {
            pcie_tx_bytes_per_s: pcie(PcieUtilCounter::Send),
            pcie_rx_bytes_per_s: pcie(PcieUtilCounter::Receive),
            nvlink_tx_bytes,
            nvlink_rx_bytes,
            energy_mj: energy_mj(&dev),
        }
    }

    fn call_costs(&self, index: u32) -> Vec<(&'static str, f64)> {
        fn time<T>(name: &'static str, f: impl FnOnce() -> T) -> (&'static str, f64) {
            let t = std::time::Instant::now();
            let _ = std::hint::black_box(f());
            (name, t.elapsed().as_secs_f64() * 1e6)
        }
        let mut out = vec![time("device_by_index", || {
            self.nvml.device_by_index(index).is_ok()
        })];
        let Ok(dev) = self.device(index) else {
            return out;
        };
        out.extend([
            time("uuid", || dev.uuid().is_ok()),
            time("utilization_rates", || dev.utilization_rates().is_ok()),
            time("memory_info", || dev.memory_info().is_ok()),
            time("power_usage", || dev.power_usage().is_ok()),
            time("total_energy_consumption", || {
                dev.total_energy_consumption().is_ok()
            }),
            time("energy (field value)", || energy_mj(&dev)),
            time("clock_info(SM)", || dev.clock_info(Clock::SM).is_ok()),
            time("clock_info(Memory)", || {
                dev.clock_info(Clock::Memory).is_ok()
            }),
            time("temperature", || {
                dev.temperature(TemperatureSensor::Gpu).is_ok()
            }),
            time("running_compute_processes", || {
                dev.running_compute_processes().is_ok()
            }),
            time("pcie_throughput(Send)", || {
                dev.pcie_throughput(PcieUtilCounter::Send).is_ok()
            }),
            time("nvlink totals (field values)", || {
                nvlink_totals(&self.nvml, &dev)
            }),
        ]);
        out
    }

    fn xid_watch(&self) -> Vec<u32> {
        let mut guard = self.xid_set.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_some() {
            return Vec::new();
        }
        let Ok(mut set) = self.nvml.create_event_set() else {
            return Vec::new();
        };
        let mut watched = Vec::new();
        for i in 0..self.device_count() {
            let Ok(dev) = self.device(i) else { continue };
            let supported = dev
                .supported_event_types()
                .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
            if !supported {
                continue;
            }
            match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(s) => {
                    set = s;
                    watched.push(i);
                }
                // The set was freed on failure: start again with a new one for the others.
                Err(_) => match self.nvml.create_event_set() {
                    Ok(s) => set = s,
                    Err(_) => return Vec::new(),
                },
            }
        }
        if watched.is_empty() {
            let _ = set.release_events();
            return Vec::new();
        }
        // SAFETY: the raw handle is kept and freed exactly once, in Drop.
        *guard = Some(XidSet(unsafe { set.handle() }));
        std::mem::forget(set);
        watched
    }

    fn xid_events(&self, timeout_ms: u32) -> Vec<(u32, u64)> {
        let guard = self.xid_set.lock().unwrap_or_else(|e| e.into_inner());
        let Some(raw) = guard.as_ref() else {
            return Vec::new();
        };
        let set = self.xid_set_wrapper(raw);
        let mut out = Vec::new();
        let mut wait = timeout_ms;
        // The first wait blocks; then whatever is already queued, without waiting.
        while out.len() < 64 {
            let Ok(ev) = set.wait(wait) else { break };
            if let Some(xid) = ev.event_data {
                let code = match xid {
                    XidError::Value(v) => v,
                    XidError::Unknown => 999,
                };
                if let Ok(i) = ev.device.index() {
                    out.push((i, code));
                }
            }
            wait = 0;
        }
        out
    }

    fn processes(&self, index: u32) -> Vec<GpuProcess> {
        let Ok(dev) = self.device(index) else {
            return Vec::new();
        };
        let mut out: Vec<GpuProcess> = Vec::new();
        let lists = [
            dev.running_compute_processes(),
            dev.running_graphics_processes(),
        ];
        for p in lists.into_iter().flatten().flatten() {
            if out.iter().any(|q| q.pid == p.pid) {
                continue;
            }
            let used_bytes = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            };
            out.push(GpuProcess {
                gpu: index,
                pid: p.pid,
                used_bytes,
            });
        }
        out
    }

    fn pair_link(&self, src: u32, dst: u32) -> PairLink {
        let mut link = PairLink {
            src,
            dst,
            nvml_read: "error".into(),
            nvml_write: "error".into(),
            nvml_nvlink: "error".into(),
            nvml_atomics: "error".into(),
            topology: String::new(),
            nvlink_count: 0,
            nvlink_speed_gbps: 0.0,
            pcie_gen: 0,
            pcie_width: 0,
        };
        let (Ok(a), Ok(b)) = (self.device(src), self.device(dst)) else {
            return link;
        };
        link.nvml_read = p2p_word(a.p2p_status(&b, P2pCapabilitiesIndex::Read));
        link.nvml_write = p2p_word(a.p2p_status(&b, P2pCapabilitiesIndex::Write));
        link.nvml_nvlink = p2p_word(a.p2p_status(&b, P2pCapabilitiesIndex::NvLink));
        link.nvml_atomics = p2p_word(a.p2p_status(&b, P2pCapabilitiesIndex::Atomics));
        if let Ok(b_again) = self.device(dst)
            && let Ok(level) = a.topology_common_ancestor(b_again)
        {
            link.topology = topology_word(level).to_string();
        }
        let gen_ = |d: &Device<'_>| d.current_pcie_link_gen().unwrap_or(0);
        let width = |d: &Device<'_>| d.current_pcie_link_width().unwrap_or(0);
        link.pcie_gen = gen_(&a).min(gen_(&b));
        link.pcie_width = width(&a).min(width(&b));

        let b_bus = b.pci_info().map(|p| p.bus_id).unwrap_or_default();
        let a_links = active_links(&a);
        let mut ends = NvlinkEnds::default();
        for &l in &a_links {
            let nv = a.link_wrapper_for(l);
            let remote_bus = nv.remote_pci_info().map(|r| r.bus_id).ok();
            match nv.remote_device_type(l) {
                _ if remote_bus
                    .as_deref()
                    .is_some_and(|r| !b_bus.is_empty() && bus_eq(r, &b_bus)) =>
                {
                    ends.to_dst += 1
                }
                Ok(IntDeviceType::Switch) => ends.to_switch += 1,
                // A GPU, or a far end NVML cannot name (seen inside the 2×H200 VM).
                _ => ends.to_other_gpu += 1,
            }
        }
        let nvlink_ok = link.nvml_nvlink == "ok";
        let nvlink_peers = if nvlink_ok && ends.to_dst == 0 && ends.to_switch == 0 {
            (0..self.device_count())
                .filter(|&c| c != src)
                .filter_map(|c| self.device(c).ok())
                .filter(|c| {
                    matches!(
                        a.p2p_status(c, P2pCapabilitiesIndex::NvLink),
                        Ok(P2pStatus::Ok)
                    )
                })
                .count() as u32
        } else {
            0
        };
        link.nvlink_count = pair_nvlinks(&ends, nvlink_ok, nvlink_peers);
        if link.nvlink_count > 0 {
            link.nvlink_speed_gbps = a_links
                .first()
                .and_then(|&l| nvlink_speed_gbps(&self.nvml, &a, l))
                .unwrap_or(0.0);
        }
        link
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        if let Some(raw) = self.xid_set.get_mut().ok().and_then(Option::take) {
            let set = std::mem::ManuallyDrop::into_inner(self.xid_set_wrapper(&raw));
            let _ = set.release_events();
        }
    }
}
