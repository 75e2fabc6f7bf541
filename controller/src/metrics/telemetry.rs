//! GPU, engine and process telemetry relayed from agents: `hw.*` series per host and GPU,
//! engine series per host and config, and which config each host runs now.

use fleetbench_proto::agentpb;

use super::names::{self, attr};
use super::registry::{Labels, normalise};
use super::{Instrument, Metrics, lock};

/// NVML's clocks event reason bits (nvmlClocksEventReason*), as `fleetbench.gpu.throttle_reason`.
const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

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
            self.gpu_sample(host, &sample.hostname, g);
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

    fn gpu_sample(&self, host: &str, hostname: &str, g: &agentpb::GpuSample) {
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
                (attr::DCGM_UUID, g.uuid.clone()),
                (attr::DCGM_GPU, g.index.to_string()),
                (attr::DCGM_HOSTNAME, hostname.to_string()),
            ]
        };
        // Built once per GPU and sample, sorted as the registry keeps them: a sample sets
        // about 25 series per GPU, and a fresh attribute set for each was most of a relay's
        // cost at a thousand hosts.
        let base = normalise(labels());
        // `base` plus one more attribute, whose value the caller sets in place.
        let plus = |key: &'static str| -> (Labels, usize) {
            let mut l = base.clone();
            l.push((key, String::new()));
            l.sort_by_key(|(k, _)| *k);
            let at = l.iter().position(|(k, _)| *k == key).expect("pushed above");
            (l, at)
        };
        // The conventions' memory utilisation is the fraction of memory in use; NVML's
        // "memory utilization" is the memory controller's busy time, exported under its own name.
        let memory_fraction = match (g.memory_used_bytes, g.memory_total_bytes) {
            (Some(used), Some(total)) if total > 0 => Some(used as f64 / total as f64),
            _ => None,
        };
        let mhz = |v: Option<u32>| v.map(|m| f64::from(m) * 1e6);
        let gauges = [
            (
                &names::GPU_UTILIZATION,
                g.utilization_pct.map(|v| v / 100.0),
            ),
            (&names::GPU_MEMORY_UTILIZATION, memory_fraction),
            (
                &names::GPU_MEMORY_CONTROLLER,
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
            (&names::GPU_SM_CLOCK, mhz(g.sm_clock_mhz)),
            (&names::GPU_MEMORY_CLOCK, mhz(g.memory_clock_mhz)),
            (
                &names::GPU_THROTTLE_REASONS,
                g.clocks_throttle_reasons.map(|b| b as f64),
            ),
            (&names::GPU_LAST_XID, g.last_xid.map(|x| x as f64)),
        ];
        for (desc, v) in gauges {
            if let Some(v) = v {
                self.gauge_normalised(desc, &base, v);
            }
        }
        if let Some(bits) = g.clocks_throttle_reasons {
            let (mut l, at) = plus(attr::THROTTLE_REASON);
            for (bit, reason) in THROTTLE_REASONS {
                let on = if bits & bit != 0 { 1.0 } else { 0.0 };
                reason.clone_into(&mut l[at].1);
                self.gauge_normalised(&names::GPU_THROTTLED, &l, on);
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
        let (mut l, at) = plus(attr::IO_DIRECTION);
        for (desc, dir, v) in links {
            if let Some(v) = v {
                dir.clone_into(&mut l[at].1);
                self.gauge_normalised(desc, &l, v);
            }
        }
        // Cumulative counts from the agent become counter increments; a count that went back
        // (driver reload, agent restart) counts from zero again.
        let cumulative = [
            (&names::GPU_ENERGY, g.energy_mj, 1000.0),
            (&names::GPU_XID_ERRORS, g.xid_errors, 1.0),
        ];
        for (desc, now, per_unit) in cumulative {
            let Some(now) = now else { continue };
            let prev = lock(&self.cumulative).insert((host.to_string(), g.index, desc.name), now);
            let delta = match prev {
                Some(p) if now >= p => now - p,
                _ => now,
            };
            self.count(desc, labels(), delta as f64 / per_unit);
        }
    }

    pub(super) fn set_host_config(&self, host: &str, config_id: &str) {
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
            self.registry.remove_host(&[&names::HOST_CONFIG], host);
        }
        if let Some(labels) = wanted {
            self.gauge(&names::HOST_CONFIG, labels.clone(), 1.0);
            current.insert(host.to_string(), labels);
        }
    }
}
