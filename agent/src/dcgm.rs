//! GPU figures from an existing dcgm-exporter instead of NVML (`[gpu] source =
//! "dcgm-exporter"` in the agent config): sites that already run dcgm-exporter keep one reader
//! of the GPUs, and fleetbench's GPU series carry the same `UUID`, `gpu` and `Hostname` labels
//! as dcgm-exporter's, so the two join in PromQL.
//!
//! Fields read (dcgm-exporter's default counters; units converted to the sample's):
//! `DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_MEM_COPY_UTIL` (% memory controller busy),
//! `DCGM_FI_DEV_FB_USED`/`_FREE`/`_RESERVED` (MiB; the limit is their sum),
//! `DCGM_FI_DEV_POWER_USAGE` (W), `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ),
//! `DCGM_FI_DEV_SM_CLOCK`/`_MEM_CLOCK` (MHz), `DCGM_FI_DEV_GPU_TEMP` (°C),
//! `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` or `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (bitmask),
//! `DCGM_FI_DEV_XID_ERRORS` (the last XID; 0 = none), `DCGM_FI_PROF_PCIE_TX_BYTES`/`_RX_BYTES`
//! and `DCGM_FI_PROF_NVLINK_TX_BYTES`/`_RX_BYTES` (bytes/s). dcgm-exporter exports no XID
//! count, so samples from it carry none.

use std::collections::BTreeMap;
use std::time::Duration;

use fleetbench_gpu::GpuSampleData;

use crate::http::HttpClient;

/// Largest dcgm-exporter page read (a node of 8 GPUs with every counter is ~200 KiB).
const MAX_BODY: usize = 4 << 20;

/// One read of dcgm-exporter: its GPUs by index and the node name it labels them with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DcgmReading {
    pub hostname: Option<String>,
    pub gpus: Vec<GpuSampleData>,
}

/// GPU samples from a dcgm-exporter exposition. Series without a numeric `gpu` label (MIG
/// instances are labelled by their parent GPU and counted there once) are left out.
pub fn from_exposition(text: &str) -> DcgmReading {
    let exp = fleetbench_engines::prom::parse(text);
    let mut hostname = None;
    let mut by_gpu: BTreeMap<u32, GpuSampleData> = BTreeMap::new();
    let mut fb: BTreeMap<u32, [Option<f64>; 3]> = BTreeMap::new();
    for s in &exp.series {
        if !s.name.starts_with("DCGM_FI_") || !s.value.is_finite() {
            continue;
        }
        // MIG series repeat their parent GPU's device-level fields.
        if s.labels.contains_key("GPU_I_ID") {
            continue;
        }
        let Some(index) = s.labels.get("gpu").and_then(|g| g.parse::<u32>().ok()) else {
            continue;
        };
        if hostname.is_none() {
            hostname = s.labels.get("Hostname").filter(|h| !h.is_empty()).cloned();
        }
        let g = by_gpu.entry(index).or_insert_with(|| GpuSampleData {
            index,
            ..Default::default()
        });
        if g.uuid.is_empty()
            && let Some(u) = s.labels.get("UUID")
        {
            g.uuid = u.clone();
        }
        let v = s.value;
        let whole = |x: f64| (x >= 0.0).then_some(x.round() as u64);
        match s.name.as_str() {
            "DCGM_FI_DEV_GPU_UTIL" => g.utilization_pct = Some(v),
            "DCGM_FI_DEV_MEM_COPY_UTIL" => g.memory_utilization_pct = Some(v),
            "DCGM_FI_DEV_POWER_USAGE" => g.power_w = Some(v),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => g.energy_mj = whole(v),
            "DCGM_FI_DEV_SM_CLOCK" => g.sm_clock_mhz = whole(v).map(|x| x as u32),
            "DCGM_FI_DEV_MEM_CLOCK" => g.memory_clock_mhz = whole(v).map(|x| x as u32),
            "DCGM_FI_DEV_GPU_TEMP" => g.temperature_c = whole(v).map(|x| x as u32),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" | "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" => {
                g.clocks_throttle_reasons = whole(v)
            }
            "DCGM_FI_DEV_XID_ERRORS" => g.last_xid = whole(v).filter(|x| *x > 0),
            "DCGM_FI_PROF_PCIE_TX_BYTES" => g.pcie_tx_bytes_per_s = Some(v),
            "DCGM_FI_PROF_PCIE_RX_BYTES" => g.pcie_rx_bytes_per_s = Some(v),
            "DCGM_FI_PROF_NVLINK_TX_BYTES" => g.nvlink_tx_bytes_per_s = Some(v),
            "DCGM_FI_PROF_NVLINK_RX_BYTES" => g.nvlink_rx_bytes_per_s = Some(v),
            "DCGM_FI_DEV_FB_USED" => fb.entry(index).or_default()[0] = Some(v),
            "DCGM_FI_DEV_FB_FREE" => fb.entry(index).or_default()[1] = Some(v),
            "DCGM_FI_DEV_FB_RESERVED" => fb.entry(index).or_default()[2] = Some(v),
            _ => {}
        }
    }
    const MIB: f64 = 1024.0 * 1024.0;
    for (index, [used, free, reserved]) in fb {
        let g = by_gpu.get_mut(&index).expect("entry made above");
        g.memory_used_bytes = used.map(|u| (u * MIB) as u64);
        if let (Some(u), Some(f)) = (used, free) {
            g.memory_total_bytes = Some(((u + f + reserved.unwrap_or(0.0)) * MIB) as u64);
        }
    }
    DcgmReading {
        hostname,
        gpus: by_gpu.into_values().collect(),
    }
}

/// Reads dcgm-exporter at `url` (its `/metrics`). The error names the URL and what failed.
pub async fn read(http: &HttpClient, url: &str, timeout: Duration) -> Result<DcgmReading, String> {
    match http.get(url, timeout, MAX_BODY).await {
        Ok(r) if r.status == 200 => Ok(from_exposition(&r.body)),
        Ok(r) => Err(format!("dcgm-exporter at {url}: HTTP {}", r.status)),
        Err(e) => Err(format!("dcgm-exporter at {url}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/dcgm_exporter_h200.txt");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Serves `body` at `/metrics` over HTTP on loopback for `n` requests.
    async fn serve(body: String, n: usize) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..n {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let req = String::from_utf8_lossy(&buf);
                let (status, body) = if req.starts_with("GET /metrics ") {
                    ("200 OK", body.as_str())
                } else {
                    ("404 Not Found", "")
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body.as_bytes()).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn dcgm_exporter_figures_become_gpu_samples_over_http() {
        let addr = serve(fixture(), 2).await;
        let http = HttpClient::new();
        let r = read(
            &http,
            &format!("http://{addr}/metrics"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(r.hostname.as_deref(), Some("gpu-node-7"));
        assert_eq!(r.gpus.len(), 2);
        let (g0, g1) = (&r.gpus[0], &r.gpus[1]);
        assert_eq!(g0.index, 0);
        assert_eq!(g0.uuid, "GPU-3ea88e84-df26-ac01-b961-3dca62a033b1");
        assert_eq!(g0.utilization_pct, Some(97.0));
        assert_eq!(g0.memory_utilization_pct, Some(61.0));
        assert_eq!(g0.memory_used_bytes, Some(132_509 << 20));
        assert_eq!(g0.memory_total_bytes, Some((132_509 + 10_731 + 531) << 20));
        assert_eq!(g0.power_w, Some(612.417));
        assert_eq!(g0.energy_mj, Some(918_273_645));
        assert_eq!(
            (g0.sm_clock_mhz, g0.memory_clock_mhz),
            (Some(1980), Some(3201))
        );
        assert_eq!(g0.temperature_c, Some(52));
        assert_eq!(g0.clocks_throttle_reasons, Some(0x4));
        assert_eq!(g0.last_xid, None, "XID 0 means none");
        assert_eq!(g0.pcie_tx_bytes_per_s, Some(1_602_560.0));
        assert_eq!(g0.xid_errors, None, "dcgm-exporter has no XID count");
        assert_eq!(g1.uuid, "GPU-7c1d52a0-88e1-4f0b-9a57-2f3c9a1e6d42");
        assert_eq!(g1.last_xid, Some(79));
        assert_eq!(g1.clocks_throttle_reasons, Some(0x1));
        assert_eq!(g1.memory_used_bytes, Some(0));

        // A wrong path is an error naming the URL, not an empty reading.
        let err = read(
            &http,
            &format!("http://{addr}/nope"),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(err.contains("/nope") && err.contains("404"), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_exporter_is_an_error_naming_it() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}/metrics");
        let err = read(&HttpClient::new(), &url, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(err.contains(&url), "{err}");
    }

    #[test]
    fn mig_series_and_unlabelled_series_are_left_out() {
        let text = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 50\n\
                    DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",GPU_I_ID=\"1\"} 99\n\
                    DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-b\"} 7\n\
                    go_goroutines 12\n";
        let r = from_exposition(text);
        assert_eq!(r.gpus.len(), 1);
        assert_eq!(r.gpus[0].utilization_pct, Some(50.0));
        assert_eq!(r.hostname, None);
    }
}
