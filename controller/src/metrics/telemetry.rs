//! GPU, engine and process telemetry relayed from agents: `hw.*` series per host and GPU,
//! engine series per host and config, and which config each host runs now.

use fleetbench_proto::agentpb;

use super::names::{self, attr};
use super::registry::Labels;
use super::{Instrument, Metrics, lock};

impl Metrics {
    /// A telemetry sample relayed from an agent (GPU, engine metrics, process). `config_id` is
    /// the config the host's engine runs (empty: none, or use the sample's own).
    pub fn telemetry(&self, host: &str, config_id: &str, sample: &agentpb::MetricsSample) {
        let config_id = if config_id.is_empty() {
            sample.config_id.as_str()
        } else {
            config_id
        };
        for g in &sample.gpus {
            self.gpu_sample(host, g);
        }
        let engine_labels = || -> Labels {
            vec![
                (attr::HOST, host.to_string()),
                (attr::CONFIG_ID, config_id.to_string()),
            ]
        };
        if let Some(e) = sample.engine.as_ref().filter(|e| e.scraped) {
            let pairs = [
                (&names::ENGINE_RUNNING, e.running_requests),
                (&names::ENGINE_QUEUED, e.queued_requests),
                (&names::ENGINE_KV_CACHE, e.kv_cache_usage),
                (&names::ENGINE_GENERATION, e.generation_tokens_per_s),
            ];
            for (desc, v) in pairs {
                if let Some(v) = v {
                    self.gauge(desc, engine_labels(), v);
                }
            }
        }
        if let Some(p) = sample.process.as_ref().filter(|p| p.process_count > 0) {
            self.gauge(
                &names::ENGINE_PROCESS_CPU,
                engine_labels(),
                p.cpu_pct / 100.0,
            );
            self.gauge(
                &names::ENGINE_PROCESS_MEMORY,
                engine_labels(),
                p.rss_bytes as f64,
            );
        }
        self.set_host_config(host, config_id);
    }

    fn gpu_sample(&self, host: &str, g: &agentpb::GpuSample) {
        let hw_id = if g.uuid.is_empty() {
            format!("gpu{}", g.index)
        } else {
            g.uuid.clone()
        };
        let labels = || -> Labels {
            vec![
                (attr::HOST, host.to_string()),
                (attr::GPU_INDEX, g.index.to_string()),
                (attr::HW_ID, hw_id.clone()),
                (attr::HW_TYPE, "gpu".to_string()),
            ]
        };
        let with_dir = |dir: &str| -> Labels {
            let mut l = labels();
            l.push((attr::IO_DIRECTION, dir.to_string()));
            l
        };
        let gauges = [
            (
                &names::GPU_UTILIZATION,
                g.utilization_pct.map(|v| v / 100.0),
            ),
            (
                &names::GPU_MEMORY_UTILIZATION,
                g.memory_utilization_pct.map(|v| v / 100.0),
            ),
            (
                &names::GPU_MEMORY_USAGE,
                g.memory_used_bytes.map(|v| v as f64),
            ),
            (
                &names::GPU_MEMORY_LIMIT,
                g.memory_total_bytes.map(|v| v as f64),
            ),
            (&names::GPU_POWER, g.power_w),
            (&names::GPU_TEMPERATURE, g.temperature_c.map(f64::from)),
        ];
        for (desc, v) in gauges {
            if let Some(v) = v {
                self.gauge(desc, labels(), v);
            }
        }
        let links = [
            (
                &names::GPU_PCIE_THROUGHPUT,
                "transmit",
                g.pcie_tx_bytes_per_s,
            ),
            (
                &names::GPU_PCIE_THROUGHPUT,
                "receive",
                g.pcie_rx_bytes_per_s,
            ),
            (
                &names::GPU_NVLINK_THROUGHPUT,
                "transmit",
                g.nvlink_tx_bytes_per_s,
            ),
            (
                &names::GPU_NVLINK_THROUGHPUT,
                "receive",
                g.nvlink_rx_bytes_per_s,
            ),
        ];
        for (desc, dir, v) in links {
            if let Some(v) = v {
                self.gauge(desc, with_dir(dir), v);
            }
        }
        if let Some(now) = g.energy_mj {
            let prev = lock(&self.energy_mj).insert((host.to_string(), g.index), now);
            // The driver's counter restarts when it reloads: count from zero again.
            let delta_mj = match prev {
                Some(p) if now >= p => now - p,
                _ => now,
            };
            self.count(&names::GPU_ENERGY, labels(), delta_mj as f64 / 1000.0);
        }
    }

    fn set_host_config(&self, host: &str, config_id: &str) {
        let mut current = lock(&self.host_config);
        let wanted: Option<Labels> = (!config_id.is_empty()).then(|| {
            let name = lock(&self.config_names)
                .get(config_id)
                .cloned()
                .unwrap_or_default();
            vec![
                (attr::HOST, host.to_string()),
                (attr::CONFIG_ID, config_id.to_string()),
                (attr::CONFIG_NAME, name),
            ]
        });
        if current.get(host) == wanted.as_ref() {
            return;
        }
        if let Some(old) = current.remove(host) {
            if let Some(Instrument::Gauge(g)) = self.instruments.get(names::HOST_CONFIG.name) {
                g.record(0.0, &Self::attrs(&old));
            }
            self.registry.remove_where(&names::HOST_CONFIG, |l| {
                l.iter().any(|(k, v)| *k == attr::HOST && v == host)
            });
        }
        if let Some(labels) = wanted {
            self.gauge(&names::HOST_CONFIG, labels.clone(), 1.0);
            current.insert(host.to_string(), labels);
        }
    }
}
