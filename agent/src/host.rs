//! Host facts for `GetHost`.

use std::collections::BTreeMap;

use fleetbench_gpu::Gpus;
use fleetbench_proto::agentpb;

use crate::profile::Profile;

/// The host's name (kernel hostname), or "localhost" when it cannot be read.
pub fn hostname() -> String {
    sysinfo::System::host_name()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Everything `GetHost` reports. NVML absent: no GPUs and the reason.
pub fn host_facts(
    gpus: &Gpus,
    profiles: &BTreeMap<String, Profile>,
    labels: &BTreeMap<String, String>,
) -> agentpb::HostFacts {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let (driver_version, cuda_driver_version) = gpus.driver_versions();
    let os = sysinfo::System::long_os_version()
        .or_else(sysinfo::System::name)
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    agentpb::HostFacts {
        hostname: hostname(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        os,
        kernel: sysinfo::System::kernel_version().unwrap_or_default(),
        cpu_count: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(0),
        memory_total_bytes: sys.total_memory(),
        gpus: gpus.facts().iter().map(agentpb::GpuFacts::from).collect(),
        gpu_unavailable_reason: gpus.unavailable_reason().unwrap_or_default(),
        driver_version,
        cuda_driver_version,
        profiles: profiles.values().map(Profile::info).collect(),
        labels: labels.clone().into_iter().collect(),
        // Filled in by the service, which holds the lease table.
        lease: None,
        lease_note: String::new(),
    }
}
