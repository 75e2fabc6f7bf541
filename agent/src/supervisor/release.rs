//! What "released" means before the next engine starts: its port can be bound and, with NVML,
//! none of its processes holds GPU memory.
//!
//! Which ids NVML reports depends on where it is asked from and on the driver. Recorded on an H200
//! (driver 580, `release/*.nvml.txt`): from the host's PID namespace an engine inside a namespace
//! shows under its host id (548 for a process that sees itself as 1), which an agent in a pod never
//! sees; from inside the namespace the same driver reports the namespace's own ids and hides every
//! other process. So the check does not rely on matching ids: before a start the agent notes which
//! processes NVML lists ([`GpuBaseline`]); after a stop it waits until none is left that was not
//! there before, besides any id of the engine's own group. On GPUs the agent owns (the chart
//! requests every GPU of the node) only the engine can have appeared there. A stranger that starts
//! on a shared GPU during a run, and that NVML shows to the agent (a systemd agent sees every
//! process), delays the next start by at most `release_timeout_s`; the warning names it.

use std::collections::BTreeSet;
use std::time::Duration;

use fleetbench_gpu::{GpuProcess, Gpus};
use tokio::time::Instant;

/// Waits until `host:port` can be bound (the old engine's listener is gone).
pub(super) async fn wait_port_free(host: &str, port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match std::net::TcpListener::bind((host, port)) {
            Ok(l) => {
                drop(l);
                return Ok(());
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "port {port} on {host} is still in use after {:.0} s: {e}",
                    timeout.as_secs_f64()
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// NVML's process ids on the host's GPUs just before an engine started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GpuBaseline {
    pids: BTreeSet<u32>,
}

impl GpuBaseline {
    pub(super) fn of(processes: &[GpuProcess]) -> GpuBaseline {
        GpuBaseline {
            pids: processes.iter().map(|p| p.pid).collect(),
        }
    }

    /// What NVML lists now (empty without NVML).
    pub(super) async fn measure(gpus: &Gpus) -> GpuBaseline {
        if gpus.unavailable_reason().is_some() {
            return GpuBaseline::default();
        }
        let g = gpus.clone();
        let now = tokio::task::spawn_blocking(move || g.gpu_processes())
            .await
            .unwrap_or_default();
        GpuBaseline::of(&now)
    }
}

/// The processes in NVML's list `now` that still belong to the stopped engine: any that was
/// not there before it started, and any id of its own process group. Sorted, without repeats.
pub(super) fn engine_holders(now: &[GpuProcess], before: &GpuBaseline, group: &[u32]) -> Vec<u32> {
    let held: BTreeSet<u32> = now
        .iter()
        .map(|p| p.pid)
        .filter(|pid| !before.pids.contains(pid) || group.contains(pid))
        .collect();
    held.into_iter().collect()
}

/// Waits until no process of the stopped engine holds GPU memory ([`engine_holders`]), killing
/// stragglers of its group that escaped the group kill. Without NVML there is nothing to wait
/// for.
pub(super) async fn wait_gpu_free(
    gpus: &Gpus,
    before: &GpuBaseline,
    group: Vec<u32>,
    timeout: Duration,
) -> bool {
    if gpus.unavailable_reason().is_some() {
        return true;
    }
    let deadline = Instant::now() + timeout;
    loop {
        let g = gpus.clone();
        let now = tokio::task::spawn_blocking(move || g.gpu_processes())
            .await
            .unwrap_or_default();
        let holders = engine_holders(&now, before, &group);
        if holders.is_empty() {
            return true;
        }
        // Only ids the agent knows as the engine's are signalled: an id NVML reports from
        // another namespace may name an unrelated process here.
        for pid in holders.iter().filter(|p| group.contains(p)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                ?holders,
                "processes that appeared on the GPUs with the old engine still hold GPU memory"
            );
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests;
