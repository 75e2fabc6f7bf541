//! Telemetry during a trial: the agent's `StreamMetrics` samples go to the metrics (every
//! sample) and to the store as points averaged over a window (the store keeps a downsampled
//! history for reports, not every sample).
//!
//! Stored series: `hw.gpu.utilization` (0..1), `hw.gpu.memory.usage` (bytes), `hw.power` (W),
//! `hw.temperature` (°C), per GPU; `engine.running_requests`, `engine.queued_requests`,
//! `engine.kv_cache_usage` (0..1), `engine.generation_tokens_per_s`; `process.cpu_pct`,
//! `process.rss_bytes`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::{MetricsSample, StreamMetricsRequest};
use fleetbench_proto::controllerpb::TelemetryPoint;
use fleetbench_proto::now_unix_ms;
use tokio_util::sync::CancellationToken;

use crate::agents::AgentClient;
use crate::metrics::Metrics;
use crate::store::Store;

/// Samples are averaged over this window before they are stored.
const WINDOW: Duration = Duration::from_secs(2);
const SAMPLE_INTERVAL_MS: u32 = 500;

pub(crate) struct Relay {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub client: AgentClient,
    pub job_id: String,
    pub run_id: String,
    pub host: String,
    pub config_id: String,
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

async fn flush(r: &Relay, w: &mut Window) {
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
    if let Err(e) = r.store.put_telemetry(&r.job_id, &points).await {
        tracing::warn!(error = %e, "telemetry points not stored");
    }
}

/// Relays until `cancel` or the stream ends; a missing or failing stream only loses telemetry.
pub(crate) async fn relay(r: Relay, cancel: CancellationToken) {
    let mut client = r.client.clone();
    let req = StreamMetricsRequest {
        interval_ms: SAMPLE_INTERVAL_MS,
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
                accumulate(&mut window, &sample);
                if started.elapsed() >= WINDOW {
                    flush(&r, &mut window).await;
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
    flush(&r, &mut window).await;
}
