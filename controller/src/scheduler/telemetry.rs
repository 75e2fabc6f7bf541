//! Telemetry during a trial: the agent's `StreamMetrics` samples go to the metrics (every
//! sample) and to the store as points averaged over a window (the store keeps a downsampled
//! history for reports, not every sample).
//!
//! The relay also keeps every sample's GPU power (summed over the host's GPUs) in a
//! [`PowerLog`], from which a level's mean power is taken over the level's own time window
//! ([`mean_power_within`]): the stored series are too coarse (2 s windows, stamped on arrival).
//!
//! Stored series: `hw.gpu.utilization` (0..1), `hw.gpu.memory.usage` (bytes), `hw.power` (W),
//! `hw.temperature` (°C), per GPU; `engine.running_requests`, `engine.queued_requests`,
//! `engine.kv_cache_usage` (0..1), `engine.generation_tokens_per_s`; `process.cpu_pct`,
//! `process.rss_bytes`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::{MetricsSample, StreamMetricsRequest};
use fleetbench_proto::controllerpb::TelemetryPoint;
use fleetbench_proto::now_unix_ms;
use tokio_util::sync::CancellationToken;

use super::telemetry_writer::TelemetryWriter;
use crate::agents::AgentClient;
use crate::metrics::Metrics;

/// Samples are averaged over this window before they are stored.
const WINDOW: Duration = Duration::from_secs(2);
/// The sampling interval of a [`PowerLog`] made with `default()` (the config's default).
const DEFAULT_INTERVAL_MS: i64 = 500;

/// GPU power samples of one trial attempt: `(agent's unix ms, W summed over the GPUs that
/// reported power)`, oldest first. Shared by the telemetry relay (writer) and the attempt that
/// stores the levels (reader).
#[derive(Debug, Clone)]
pub(crate) struct PowerLog {
    samples: Arc<Mutex<VecDeque<(i64, f64)>>>,
    arrived: Arc<tokio::sync::Notify>,
    /// The relay's sampling interval (the slack of [`mean_power_within`]).
    interval_ms: i64,
}

impl Default for PowerLog {
    fn default() -> Self {
        PowerLog {
            samples: Arc::default(),
            arrived: Arc::default(),
            interval_ms: DEFAULT_INTERVAL_MS,
        }
    }
}

/// Samples kept: an hour at the relay's interval; a level longer than that is averaged over
/// its last hour.
const POWER_SAMPLES_KEPT: usize = 7200;

impl PowerLog {
    /// A log of samples taken every `interval`.
    pub fn with_interval(interval: Duration) -> Self {
        PowerLog {
            interval_ms: (interval.as_millis() as i64).max(1),
            ..PowerLog::default()
        }
    }

    /// How long a level's result waits for the power sample covering its end: two intervals.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(2 * self.interval_ms as u64)
    }

    fn push(&self, unix_ms: i64, watts: f64) {
        let mut s = self.samples.lock().expect("power log lock");
        if s.len() == POWER_SAMPLES_KEPT {
            s.pop_front();
        }
        s.push_back((unix_ms, watts));
        drop(s);
        self.arrived.notify_waiters();
    }

    fn snapshot(&self) -> Vec<(i64, f64)> {
        self.samples
            .lock()
            .expect("power log lock")
            .iter()
            .copied()
            .collect()
    }

    /// The mean power over `[start_ms, end_ms]` (see [`mean_power_within`]). The level result and the
    /// telemetry come on separate streams, so when the host reports power but no sample from
    /// after the level's end has arrived yet, this waits up to `wait` for one.
    pub async fn level_mean(&self, start_ms: i64, end_ms: i64, wait: Duration) -> Option<f64> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let arrived = self.arrived.notified();
            let samples = self.snapshot();
            let caught_up = samples.last().is_none_or(|(t, _)| *t >= end_ms);
            if caught_up || tokio::time::Instant::now() >= deadline {
                return mean_power_within(&samples, start_ms, end_ms, self.interval_ms);
            }
            let _ = tokio::time::timeout_at(deadline, arrived).await;
        }
    }
}

/// Total GPU power of one sample: the sum over the GPUs that reported power; None when none did.
pub(crate) fn sample_power(s: &MetricsSample) -> Option<f64> {
    let watts: Vec<f64> = s
        .gpus
        .iter()
        .filter_map(|g| g.power_w)
        .filter(|w| w.is_finite() && *w >= 0.0)
        .collect();
    (!watts.is_empty()).then(|| watts.iter().sum())
}

#[cfg(test)]
pub(crate) fn mean_power(samples: &[(i64, f64)], start_ms: i64, end_ms: i64) -> Option<f64> {
    mean_power_within(samples, start_ms, end_ms, DEFAULT_INTERVAL_MS)
}

/// The mean of the power samples taken inside `[start_ms, end_ms]`. A level shorter than the
/// sampling interval (`slack`, ms) may hold no sample: then the samples within one interval of
/// its edges stand for it. None when there is no such sample (the host reported no power).
pub(crate) fn mean_power_within(
    samples: &[(i64, f64)],
    start_ms: i64,
    end_ms: i64,
    slack: i64,
) -> Option<f64> {
    let mean_in = |lo: i64, hi: i64| {
        let inside: Vec<f64> = samples
            .iter()
            .filter(|(t, _)| (lo..=hi).contains(t))
            .map(|(_, w)| *w)
            .collect();
        (!inside.is_empty()).then(|| inside.iter().sum::<f64>() / inside.len() as f64)
    };
    mean_in(start_ms, end_ms).or_else(|| mean_in(start_ms - slack, end_ms + slack))
}

pub(crate) struct Relay {
    pub writer: TelemetryWriter,
    pub power: PowerLog,
    pub metrics: Arc<Metrics>,
    pub client: AgentClient,
    pub job_id: String,
    pub run_id: String,
    pub host: String,
    pub config_id: String,
    pub interval: Duration,
}

type Window = BTreeMap<(String, Option<u32>), (f64, u32)>;

fn add(w: &mut Window, series: &str, gpu: Option<u32>, value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        let e = w.entry((series.to_string(), gpu)).or_insert((0.0, 0));
        e.0 += v;
        e.1 += 1;
    }
}

fn accumulate(w: &mut Window, s: &MetricsSample) {
    for g in &s.gpus {
        let i = Some(g.index);
        add(
            w,
            "hw.gpu.utilization",
            i,
            g.utilization_pct.map(|p| p / 100.0),
        );
        add(
            w,
            "hw.gpu.memory.usage",
            i,
            g.memory_used_bytes.map(|b| b as f64),
        );
        add(w, "hw.power", i, g.power_w);
        add(w, "hw.temperature", i, g.temperature_c.map(f64::from));
    }
    if let Some(e) = s.engine.as_ref().filter(|e| e.scraped) {
        add(w, "engine.running_requests", None, e.running_requests);
        add(w, "engine.queued_requests", None, e.queued_requests);
        add(w, "engine.kv_cache_usage", None, e.kv_cache_usage);
        add(
            w,
            "engine.generation_tokens_per_s",
            None,
            e.generation_tokens_per_s,
        );
    }
    if let Some(p) = &s.process {
        add(w, "process.cpu_pct", None, Some(p.cpu_pct));
        add(w, "process.rss_bytes", None, Some(p.rss_bytes as f64));
    }
}

fn flush(r: &Relay, w: &mut Window) {
    let now = now_unix_ms();
    let points: Vec<TelemetryPoint> = std::mem::take(w)
        .into_iter()
        .map(|((series, gpu), (sum, n))| TelemetryPoint {
            unix_ms: now,
            host: r.host.clone(),
            series,
            gpu,
            value: sum / f64::from(n.max(1)),
            run_id: r.run_id.clone(),
        })
        .collect();
    r.writer.send(&r.job_id, points);
}

/// Relays until `cancel` or the stream ends; a missing or failing stream only loses telemetry.
pub(crate) async fn relay(r: Relay, cancel: CancellationToken) {
    let mut client = r.client.clone();
    let req = StreamMetricsRequest {
        interval_ms: r.interval.as_millis().clamp(100, 60_000) as u32,
        gpu: true,
        engine: true,
        process: true,
        engine_raw: false,
    };
    let mut stream = tokio::select! {
        s = client.stream_metrics(req) => match s {
            Ok(s) => s.into_inner(),
            Err(e) => {
                tracing::debug!(error = %e, "no telemetry stream");
                return;
            }
        },
        _ = cancel.cancelled() => return,
    };
    let mut window = Window::new();
    let mut started = Instant::now();
    loop {
        let msg = tokio::select! {
            m = stream.message() => m,
            _ = cancel.cancelled() => break,
        };
        match msg {
            Ok(Some(sample)) => {
                r.metrics.telemetry(&r.host, &r.config_id, &sample);
                if let Some(w) = sample_power(&sample) {
                    r.power.push(sample.unix_ms, w);
                }
                accumulate(&mut window, &sample);
                if started.elapsed() >= WINDOW {
                    flush(&r, &mut window);
                    started = Instant::now();
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "telemetry stream ended");
                break;
            }
        }
    }
    flush(&r, &mut window);
}

#[cfg(test)]
mod tests {
    use fleetbench_proto::agentpb::GpuSample;

    use super::*;

    fn gpu(index: u32, power_w: Option<f64>) -> GpuSample {
        GpuSample {
            index,
            power_w,
            ..Default::default()
        }
    }

    #[test]
    fn a_samples_power_is_summed_over_the_gpus_that_report_it() {
        let s = MetricsSample {
            gpus: vec![gpu(0, Some(310.5)), gpu(1, None), gpu(2, Some(289.5))],
            ..Default::default()
        };
        assert_eq!(sample_power(&s), Some(600.0));
        let none = MetricsSample {
            gpus: vec![gpu(0, None)],
            ..Default::default()
        };
        assert_eq!(sample_power(&none), None);
        assert_eq!(sample_power(&MetricsSample::default()), None);
    }

    #[test]
    fn a_levels_power_is_the_mean_of_the_samples_inside_its_window() {
        // Idle before the level, loaded during it, idle after.
        let samples = [
            (1_000, 100.0),
            (1_500, 100.0),
            (2_000, 600.0),
            (2_500, 700.0),
            (3_000, 800.0),
            (3_500, 120.0),
            (4_000, 100.0),
        ];
        assert_eq!(mean_power(&samples, 2_000, 3_000), Some(700.0));
        assert_eq!(mean_power(&samples, 2_100, 2_900), Some(700.0));
        assert_eq!(mean_power(&samples, 0, 10_000), Some(2520.0 / 7.0));
        // A level shorter than the interval, between two samples: its neighbours.
        assert_eq!(mean_power(&samples, 2_600, 2_700), Some(750.0));
        // Far from every sample, or no samples at all: no power.
        assert_eq!(mean_power(&samples, 10_000, 11_000), None);
        assert_eq!(mean_power(&[], 2_000, 3_000), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_level_waits_for_the_samples_of_its_end_but_not_forever() {
        let log = PowerLog::default();
        log.push(1_000, 200.0);
        log.push(1_500, 400.0);
        // The sample covering the level's end arrives a moment after its result.
        let late = log.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            late.push(2_000, 600.0);
        });
        let got = log.level_mean(1_000, 2_000, Duration::from_secs(2)).await;
        assert_eq!(got, Some(400.0));
        // Nothing more comes: after the wait, what arrived is what counts.
        let t = tokio::time::Instant::now();
        let got = log.level_mean(1_000, 5_000, Duration::from_secs(2)).await;
        assert_eq!(got, Some(400.0));
        assert!(t.elapsed() >= Duration::from_secs(2));
        // A host without power never waits.
        let t = tokio::time::Instant::now();
        let empty = PowerLog::default();
        assert_eq!(
            empty.level_mean(0, 1_000, Duration::from_secs(2)).await,
            None
        );
        assert_eq!(t.elapsed(), Duration::ZERO);
    }
}
