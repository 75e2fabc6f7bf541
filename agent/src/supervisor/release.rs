//! What "released" means before the next engine starts: its port can be bound and, with NVML,
//! none of its processes holds GPU memory.

use std::time::Duration;

use fleetbench_gpu::Gpus;
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

/// Waits until none of `pids` holds GPU memory (NVML), killing stragglers that escaped the
/// group. Without NVML there is nothing to wait for.
pub(super) async fn wait_gpu_free(gpus: &Gpus, pids: Vec<u32>, timeout: Duration) -> bool {
    if gpus.unavailable_reason().is_some() || pids.is_empty() {
        return true;
    }
    let deadline = Instant::now() + timeout;
    loop {
        let g = gpus.clone();
        let holders: Vec<u32> = tokio::task::spawn_blocking(move || g.gpu_processes())
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.pid)
            .filter(|p| pids.contains(p))
            .collect();
        if holders.is_empty() {
            return true;
        }
        for pid in &holders {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                ?holders,
                "processes of the old engine still hold GPU memory"
            );
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
