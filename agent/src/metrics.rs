//! `StreamMetrics`: GPU samples (NVML), the engine's `/metrics` mapped to common names, and the
//! engine process group's CPU and memory, at the requested interval.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fleetbench_gpu::Gpus;
use fleetbench_proto::agentpb;

use crate::http::HttpClient;
use crate::supervisor::group::{GroupTracker, read_stat};
use crate::supervisor::{Snapshot, Supervisor};

/// Full `/proc` scans (to find new members of the engine group) at most this often; in
/// between only the known members' own stat files are read.
const FULL_SCAN_EVERY: Duration = Duration::from_secs(2);
/// Largest `/metrics` body read (SGLang exposes ~150 families with histograms).
const MAX_METRICS_BODY: usize = 8 << 20;

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as u64 } else { 4096 }
}

/// CPU and RSS of one process group over time.
#[derive(Debug)]
pub struct ProcessSampler {
    tracker: GroupTracker,
    members: Vec<i32>,
    last_scan: Option<Instant>,
    /// pid -> (start ticks, cpu ticks) at the previous sample.
    prev: HashMap<i32, (u64, u64)>,
    prev_at: Option<Instant>,
    tck: f64,
    page: u64,
}

impl ProcessSampler {
    pub fn new(root: i32) -> Self {
        ProcessSampler {
            tracker: GroupTracker::new(root),
            members: Vec::new(),
            last_scan: None,
            prev: HashMap::new(),
            prev_at: None,
            tck: clk_tck(),
            page: page_size(),
        }
    }

    pub fn root(&self) -> i32 {
        self.tracker.root
    }

    pub fn sample(&mut self) -> agentpb::ProcessSample {
        let now = Instant::now();
        let stats = if self
            .last_scan
            .is_none_or(|t| now.duration_since(t) >= FULL_SCAN_EVERY)
        {
            self.last_scan = Some(now);
            let s = self.tracker.scan();
            self.members = s.iter().map(|p| p.pid).collect();
            s
        } else {
            self.members.iter().filter_map(|p| read_stat(*p)).collect()
        };
        let live: Vec<_> = stats
            .into_iter()
            .filter(|p| p.state != 'Z' && p.state != 'X')
            .collect();
        let mut delta_ticks = 0u64;
        let mut next = HashMap::with_capacity(live.len());
        for p in &live {
            if let Some((start, ticks)) = self.prev.get(&p.pid)
                && *start == p.start_ticks
            {
                delta_ticks += p.cpu_ticks.saturating_sub(*ticks);
            }
            next.insert(p.pid, (p.start_ticks, p.cpu_ticks));
        }
        let cpu_pct = match self.prev_at {
            Some(t) if now > t => {
                delta_ticks as f64 / self.tck / now.duration_since(t).as_secs_f64() * 100.0
            }
            _ => 0.0,
        };
        self.prev = next;
        self.prev_at = Some(now);
        agentpb::ProcessSample {
            process_count: live.len() as u32,
            cpu_pct,
            rss_bytes: live.iter().map(|p| p.rss_pages * self.page).sum(),
        }
    }
}

/// Tokens/s from the generated-token counter since the previous scrape `prev` (engine
/// generation, when, value), if that scrape was of the same engine run: a new run's counter
/// starts again from zero and says nothing about the old one's rate.
fn counter_rate(
    prev: Option<(u64, Instant, f64)>,
    generation: u64,
    now: Instant,
    total: f64,
) -> Option<f64> {
    let (g, at, before) = prev?;
    if g != generation {
        return None;
    }
    fleetbench_engines::metrics::rate(
        Some(before),
        Some(total),
        now.duration_since(at).as_secs_f64(),
    )
}

/// One subscriber's sampling state.
pub struct MetricsStream {
    req: agentpb::StreamMetricsRequest,
    gpus: Gpus,
    http: HttpClient,
    sup: Supervisor,
    procs: Option<(u64, ProcessSampler)>,
    /// The engine's generated-token counter at the previous scrape: (engine generation, when,
    /// value), for engines whose own figure is not the server's throughput.
    prev_generated: Option<(u64, Instant, f64)>,
    /// dcgm-exporter's URL when GPU figures come from it instead of NVML.
    dcgm_url: Option<String>,
    /// The OS host name, as dcgm-exporter's `Hostname` label would carry it.
    hostname: String,
}

impl MetricsStream {
    pub fn new(
        req: agentpb::StreamMetricsRequest,
        gpus: Gpus,
        http: HttpClient,
        sup: Supervisor,
    ) -> Self {
        MetricsStream {
            req,
            gpus,
            http,
            sup,
            procs: None,
            prev_generated: None,
            dcgm_url: None,
            hostname: crate::host::hostname(),
        }
    }

    /// Reads GPU figures from `source` (NVML is the default).
    pub fn with_gpu_source(mut self, source: &crate::config::GpuTelemetrySource) -> Self {
        self.dcgm_url = match source {
            crate::config::GpuTelemetrySource::Nvml => None,
            crate::config::GpuTelemetrySource::DcgmExporter { url } => Some(url.clone()),
        };
        self
    }

    /// The GPUs' samples and the host name to label them with.
    async fn gpu_samples(&self) -> (Vec<agentpb::GpuSample>, String) {
        let Some(url) = &self.dcgm_url else {
            let gpus = self.gpus.sample();
            return (
                gpus.iter().map(agentpb::GpuSample::from).collect(),
                self.hostname.clone(),
            );
        };
        let timeout = Duration::from_millis(u64::from(self.req.interval_ms).clamp(100, 1000));
        match crate::dcgm::read(&self.http, url, timeout).await {
            Ok(r) => (
                r.gpus.iter().map(agentpb::GpuSample::from).collect(),
                r.hostname.unwrap_or_else(|| self.hostname.clone()),
            ),
            // No figures rather than stale or zero ones; the stream goes on.
            Err(e) => {
                tracing::debug!(error = %e, "no GPU sample from dcgm-exporter");
                (Vec::new(), self.hostname.clone())
            }
        }
    }

    pub async fn sample(&mut self) -> agentpb::MetricsSample {
        let snap: Snapshot = self.sup.snapshot();
        let (gpus, hostname) = if self.req.gpu {
            self.gpu_samples().await
        } else {
            (Vec::new(), self.hostname.clone())
        };
        let engine = if self.req.engine {
            let mut e = self.scrape(&snap).await;
            self.derive_generation_rate(snap.generation, &mut e);
            Some(e)
        } else {
            None
        };
        let process = if self.req.process {
            self.process(&snap)
        } else {
            None
        };
        agentpb::MetricsSample {
            unix_ms: fleetbench_proto::now_unix_ms(),
            gpus,
            engine,
            process,
            config_id: snap
                .plan
                .as_ref()
                .map(|p| p.config_id.clone())
                .unwrap_or_default(),
            hostname,
        }
    }

    /// Engines that export no server-wide generation rate (vLLM; llama.cpp, whose gauge is a
    /// per-request decode speed) get one from their generated-token counter between this
    /// stream's scrapes of the same engine run.
    fn derive_generation_rate(&mut self, generation: u64, e: &mut agentpb::EngineMetrics) {
        let Some(total) = e.generation_tokens_total.filter(|_| e.scraped) else {
            return;
        };
        let now = Instant::now();
        if e.generation_tokens_per_s.is_none() {
            e.generation_tokens_per_s = counter_rate(self.prev_generated, generation, now, total);
        }
        self.prev_generated = Some((generation, now, total));
    }

    fn process(&mut self, snap: &Snapshot) -> Option<agentpb::ProcessSample> {
        let pid = snap.pid? as i32;
        if self
            .procs
            .as_ref()
            .is_none_or(|(g, p)| *g != snap.generation || p.root() != pid)
        {
            self.procs = Some((snap.generation, ProcessSampler::new(pid)));
        }
        self.procs.as_mut().map(|(_, p)| p.sample())
    }

    async fn scrape(&self, snap: &Snapshot) -> agentpb::EngineMetrics {
        let unscraped = |error: String| agentpb::EngineMetrics {
            scraped: false,
            error,
            ..Default::default()
        };
        let Some(plan) = &snap.plan else {
            return unscraped("no engine".into());
        };
        let Some(url) = &plan.metrics_url else {
            return unscraped(format!("profile {} has no metrics path", plan.profile));
        };
        if snap.pid.is_none() {
            return unscraped("engine not running".into());
        }
        let timeout = Duration::from_millis(u64::from(self.req.interval_ms).clamp(100, 1000));
        match self.http.get(url, timeout, MAX_METRICS_BODY).await {
            Ok(r) if r.status == 200 => {
                let m = fleetbench_engines::metrics::map_metrics(plan.kind, &r.body);
                agentpb::EngineMetrics {
                    scraped: true,
                    error: String::new(),
                    running_requests: m.running_requests,
                    queued_requests: m.queued_requests,
                    kv_cache_usage: m.kv_cache_usage,
                    generation_tokens_per_s: m.generation_tokens_per_s,
                    prompt_tokens_total: m.prompt_tokens_total,
                    generation_tokens_total: m.generation_tokens_total,
                    raw: if self.req.engine_raw {
                        m.raw
                            .into_iter()
                            .map(|s| agentpb::RawSeries {
                                name: s.name,
                                labels: s.labels.into_iter().collect(),
                                value: s.value,
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                }
            }
            Ok(r) => unscraped(format!("GET {url}: HTTP {}", r.status)),
            Err(e) => unscraped(format!("GET {url}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's rate comes from its counter between two scrapes of one engine run. On the
    /// H200 (docs/validation/h200.md, run 9) llama.cpp's own `predicted_tokens_seconds` read
    /// 16 tokens/s (one request's decode speed) while the server generated 750 tokens/s with
    /// 64 requests in flight.
    #[test]
    fn generation_rate_from_the_counter_of_the_same_run() {
        let t0 = Instant::now();
        let half = t0 + Duration::from_millis(500);
        // 375 tokens in 0.5 s: 750 tokens/s.
        assert_eq!(
            counter_rate(Some((3, t0, 9216.0)), 3, half, 9591.0),
            Some(750.0)
        );
        // No earlier scrape, or one of another engine run (a restart): no rate.
        assert_eq!(counter_rate(None, 3, half, 9591.0), None);
        assert_eq!(counter_rate(Some((2, t0, 9216.0)), 3, half, 40.0), None);
        // The same run's counter never goes down; if it does, count from zero as Prometheus.
        assert_eq!(
            counter_rate(Some((3, t0, 100.0)), 3, half, 50.0),
            Some(100.0)
        );
    }

    #[test]
    fn sampler_sees_own_process_tree_cpu_and_memory() {
        // A child in its own group that burns CPU (`yes` writing to /dev/null).
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("yes")
            .stdout(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        // Sampled only once `yes` has run user code: caught inside its exec, the child has a
        // new, still empty address space and shows no resident memory (seen once in CI).
        let stat = format!("/proc/{}/stat", child.id());
        let user_ticks = || {
            let text = std::fs::read_to_string(&stat).unwrap_or_default();
            let after_comm = text.rsplit_once(')').map_or("", |(_, rest)| rest);
            // Fields after the command: state is field 3 of the line, utime field 14.
            after_comm
                .split_whitespace()
                .nth(11)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let t = std::time::Instant::now();
        while user_ticks() == 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut s = ProcessSampler::new(child.id() as i32);
        let first = s.sample();
        std::thread::sleep(Duration::from_millis(300));
        let second = s.sample();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(first.process_count, 1);
        assert!(first.rss_bytes > 0, "{first:?}");
        assert!(second.cpu_pct > 10.0, "{second:?}");
    }
}
