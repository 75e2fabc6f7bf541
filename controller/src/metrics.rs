//! Controller metrics: OpenTelemetry instruments and the Prometheus `/metrics` endpoint, with the
//! names the OpenTelemetry collector would give the OTLP series.
//!
//! Every record goes to both paths at once: the OpenTelemetry instrument (exported over OTLP by
//! the meter provider `fleetbench_support::telemetry::init` installs) and the in-process
//! [`registry::Registry`] that [`serve`] exposes. The catalogue of names, units and attribute
//! keys is in [`names`]; `docs/observability.md` lists it for users.
//!
//! [`Metrics::new`] binds to the global meter provider as it is at that moment: build it after
//! telemetry is initialised, or the OTLP side records into a no-op meter (the Prometheus side
//! works either way).

mod expiry;
pub mod names;
pub mod registry;
mod serve;
mod telemetry;

use fleetbench_proto::Word;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use fleetbench_proto::{agentpb, controllerpb};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter};

use names::{Kind, MetricDesc, attr};
use registry::{Labels, Registry};

pub use serve::{ScrapePolicy, serve, serve_until, serve_with};

/// Most observations one histogram gets from one level's summary (bounds the work per level).
const MAX_RECONSTRUCTED: u64 = 1_000_000;

enum Instrument {
    Counter(Counter<f64>),
    Gauge(Gauge<f64>),
    Histogram(Histogram<f64>),
}

/// Every metric the controller records.
pub struct Metrics {
    registry: Registry,
    instruments: HashMap<&'static str, Instrument>,
    /// Last cumulative reading per (host, GPU index, metric): energy (mJ) and XID errors, to
    /// turn the agent's cumulative counts into OpenTelemetry counter increments.
    cumulative: Mutex<HashMap<(String, u32, &'static str), u64>>,
    /// The config series each host shows in `fleetbench.host.config`.
    host_config: Mutex<HashMap<String, Labels>>,
    /// Config names learned from stored levels, for the host-config series.
    config_names: Mutex<HashMap<String, String>>,
    /// How long a job's series stay after it ends ([`Metrics::set_job_series_ttl`]).
    job_ttl: Mutex<std::time::Duration>,
    /// Ended jobs and when their series go.
    ended_jobs: Mutex<Vec<(std::time::Instant, String)>>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("instruments", &self.instruments.len())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::build(opentelemetry::global::meter("fleetbench-controller"))
    }
}

/// The (concurrency, request rate) attribute values of a load level; empty when not set.
pub fn level_dimensions(level: Option<&agentpb::LoadLevel>) -> (String, String) {
    let conc = level
        .and_then(|l| l.concurrency)
        .map(|c| c.to_string())
        .unwrap_or_default();
    let rate = level
        .and_then(|l| l.request_rate)
        .map(|r| format!("{r}"))
        .unwrap_or_default();
    (conc, rate)
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// `/metrics` only, no OpenTelemetry instruments: for a controller that exports no OTLP
    /// metrics, which then builds no OpenTelemetry attribute sets (a few for every series a
    /// telemetry sample sets) only for a no-op meter to drop them.
    pub fn prometheus_only() -> Arc<Self> {
        let mut m = Self::default();
        m.instruments.clear();
        Arc::new(m)
    }

    /// Records through `meter` instead of the global meter provider's.
    pub fn with_meter(meter: Meter) -> Arc<Self> {
        Arc::new(Self::build(meter))
    }

    fn build(meter: Meter) -> Self {
        let instruments = names::all()
            .map(|d| {
                let inst = match d.kind {
                    Kind::Counter => Instrument::Counter(
                        meter
                            .f64_counter(d.name)
                            .with_unit(d.unit)
                            .with_description(d.help)
                            .build(),
                    ),
                    Kind::Gauge => Instrument::Gauge(
                        meter
                            .f64_gauge(d.name)
                            .with_unit(d.unit)
                            .with_description(d.help)
                            .build(),
                    ),
                    Kind::Histogram => Instrument::Histogram(
                        meter
                            .f64_histogram(d.name)
                            .with_unit(d.unit)
                            .with_description(d.help)
                            .with_boundaries(d.buckets.to_vec())
                            .build(),
                    ),
                };
                (d.name, inst)
            })
            .collect();
        Self {
            registry: Registry::default(),
            instruments,
            cumulative: Mutex::default(),
            host_config: Mutex::default(),
            config_names: Mutex::default(),
            job_ttl: Mutex::new(std::time::Duration::from_secs(600)),
            ended_jobs: Mutex::default(),
        }
    }

    fn attrs(labels: &Labels) -> Vec<KeyValue> {
        labels
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| KeyValue::new(*k, v.clone()))
            .collect()
    }

    fn gauge(&self, desc: &'static MetricDesc, labels: Labels, value: f64) {
        if let Some(Instrument::Gauge(g)) = self.instruments.get(desc.name) {
            g.record(value, &Self::attrs(&labels));
        }
        self.registry.set(desc, labels, value);
    }

    /// As [`Metrics::gauge`], with labels already normalised (see `registry::normalise`).
    fn gauge_normalised(&self, desc: &'static MetricDesc, labels: &Labels, value: f64) {
        if let Some(Instrument::Gauge(g)) = self.instruments.get(desc.name) {
            g.record(value, &Self::attrs(labels));
        }
        self.registry.set_normalised(desc, labels, value);
    }

    fn count(&self, desc: &'static MetricDesc, labels: Labels, delta: f64) {
        if let Some(Instrument::Counter(c)) = self.instruments.get(desc.name) {
            c.add(delta, &Self::attrs(&labels));
        }
        self.registry.add(desc, labels, delta);
    }

    fn observe(&self, desc: &'static MetricDesc, labels: Labels, values: &[f64]) {
        if values.is_empty() {
            return;
        }
        if let Some(Instrument::Histogram(h)) = self.instruments.get(desc.name) {
            let kv = Self::attrs(&labels);
            for v in values {
                h.record(*v, &kv);
            }
        }
        self.registry.observe(desc, labels, values);
    }

    /// A job was accepted (`kind`: sweep, tune, regress).
    pub fn job_submitted(&self, kind: &str) {
        self.expire_due();
        self.count(
            &names::JOBS_SUBMITTED,
            vec![(attr::JOB_KIND, kind.to_string())],
            1.0,
        );
    }

    /// Telemetry points dropped because the store fell behind.
    pub fn telemetry_dropped(&self, points: u64) {
        self.count(&names::TELEMETRY_DROPPED, Vec::new(), points as f64);
    }

    /// A job ended (`state`: succeeded, failed, cancelled).
    pub fn job_finished(&self, kind: &str, state: &str) {
        self.count(
            &names::JOBS_FINISHED,
            vec![
                (attr::JOB_KIND, kind.to_string()),
                (attr::JOB_STATE, state.to_string()),
            ],
            1.0,
        );
    }

    /// A trial attempt ended on a host.
    pub fn trial_finished(&self, host: &str, config_name: &str, state: controllerpb::TrialState) {
        self.count(
            &names::TRIALS,
            vec![
                (attr::HOST, host.to_string()),
                (attr::CONFIG_NAME, config_name.to_string()),
                (attr::TRIAL_STATE, state.word()),
            ],
            1.0,
        );
    }

    /// A level result was stored. `engine_kind` and `model` come from the config's spec.
    pub fn level_stored(&self, level: &controllerpb::StoredLevel, engine_kind: &str, model: &str) {
        self.level_stored_as(level, engine_kind, model, agentpb::ApiKind::Unspecified);
    }

    /// [`Metrics::level_stored`], naming the API the load used (the client histograms'
    /// `gen_ai.operation.name`).
    pub fn level_stored_as(
        &self,
        level: &controllerpb::StoredLevel,
        engine_kind: &str,
        model: &str,
        api: agentpb::ApiKind,
    ) {
        let Some(r) = &level.result else {
            return;
        };
        if !level.config_id.is_empty() && !level.config_name.is_empty() {
            lock(&self.config_names).insert(level.config_id.clone(), level.config_name.clone());
        }
        let (conc, rate) = level_dimensions(r.level.as_ref());
        let base: Labels = vec![
            (attr::JOB_ID, level.job_id.clone()),
            (attr::CONFIG_ID, level.config_id.clone()),
            (attr::CONFIG_NAME, level.config_name.clone()),
            (attr::HOST, level.host.clone()),
            (attr::ENGINE_KIND, engine_kind.to_string()),
            (attr::MODEL, model.to_string()),
            (attr::WORKLOAD, level.workload.clone()),
            (attr::CONCURRENCY, conc),
            (attr::REQUEST_RATE, rate),
        ];
        let with = |extra: &[(&'static str, String)]| -> Labels {
            let mut l = base.clone();
            l.extend(extra.iter().cloned());
            l
        };
        let outcome = r.outcome().word();
        let crashed = r.outcome() == agentpb::LevelOutcome::Crashed;
        self.count(&names::LEVELS, with(&[(attr::OUTCOME, outcome)]), 1.0);
        self.count(
            &names::REQUESTS,
            with(&[(attr::OUTCOME, "ok".into())]),
            r.completed as f64,
        );
        self.count(
            &names::REQUESTS,
            with(&[(attr::OUTCOME, "failed".into())]),
            r.failed as f64,
        );
        self.count(
            &names::TOKENS,
            with(&[(attr::TOKEN_TYPE, "input".into())]),
            r.input_tokens as f64,
        );
        self.count(
            &names::TOKENS,
            with(&[(attr::TOKEN_TYPE, "output".into())]),
            r.output_tokens as f64,
        );

        let rep = with(&[(attr::REPEAT, level.repeat.to_string())]);
        self.gauge(
            &names::LEVEL_OUTPUT_TOKENS,
            rep.clone(),
            r.output_tokens_per_s,
        );
        self.gauge(
            &names::LEVEL_TOTAL_TOKENS,
            rep.clone(),
            r.total_tokens_per_s,
        );
        self.gauge(&names::LEVEL_REQUESTS, rep.clone(), r.requests_per_s);
        self.gauge(&names::LEVEL_GOODPUT, rep.clone(), r.goodput_requests_per_s);
        self.gauge(&names::LEVEL_ERRORS, rep.clone(), r.failed as f64);
        let mut all = rep.clone();
        all.push((attr::ERROR_TYPE, "all".into()));
        self.gauge(&names::LEVEL_ERROR_RATE, all, r.error_rate);
        if r.sent > 0 {
            for (kind, n) in &r.failures_by_kind {
                let mut l = rep.clone();
                l.push((attr::ERROR_TYPE, kind.clone()));
                self.gauge(&names::LEVEL_ERROR_RATE, l, *n as f64 / r.sent as f64);
            }
        }
        self.gauge(
            &names::LEVEL_BURST,
            rep.clone(),
            if r.burst { 1.0 } else { 0.0 },
        );
        if let Some(h) = r.prefix_cache.as_ref().and_then(|c| c.hit_rate) {
            self.gauge(&names::LEVEL_PREFIX_CACHE_HIT_RATE, rep.clone(), h);
        }
        self.gauge(
            &names::LEVEL_CRASHED,
            rep.clone(),
            if crashed { 1.0 } else { 0.0 },
        );
        let dists = [
            (&names::LEVEL_TTFT, r.ttft_ms.as_ref()),
            (&names::LEVEL_ITL, r.itl_ms.as_ref()),
            (&names::LEVEL_ITL_CHUNK, r.itl_chunk_ms.as_ref()),
            (&names::LEVEL_TPOT, r.tpot_ms.as_ref()),
            (&names::LEVEL_E2E, r.e2e_ms.as_ref()),
        ];
        for (desc, dist) in dists {
            let Some(d) = dist.filter(|d| d.count > 0) else {
                continue;
            };
            for (q, v) in &d.percentiles {
                let mut l = rep.clone();
                l.push((attr::QUANTILE, q.clone()));
                self.gauge(desc, l, v / 1000.0);
            }
            let mut l = rep.clone();
            l.push((attr::QUANTILE, "mean".into()));
            self.gauge(desc, l, d.mean / 1000.0);
        }

        let operation = match api {
            agentpb::ApiKind::Chat => "chat",
            agentpb::ApiKind::Completions => "text_completion",
            agentpb::ApiKind::Unspecified => "",
        };
        let client = with(&[
            (attr::PROVIDER, engine_kind.to_string()),
            (attr::OPERATION, operation.to_string()),
        ]);
        let hists = [
            (&names::CLIENT_DURATION, r.e2e_ms.as_ref()),
            (&names::CLIENT_TTFC, r.ttft_ms.as_ref()),
            (&names::CLIENT_TPOC, r.itl_ms.as_ref()),
        ];
        for (desc, dist) in hists {
            if let Some(d) = dist {
                self.observe(desc, client.clone(), &reconstruct_seconds(d));
            }
        }
    }

    /// An engine crash (at start or during a level) was classified.
    pub fn crash(&self, host: &str, config_name: &str, class: agentpb::CrashClass) {
        self.count(
            &names::CRASHES,
            vec![
                (attr::HOST, host.to_string()),
                (attr::CONFIG_NAME, config_name.to_string()),
                (attr::CRASH_CLASS, class.word()),
            ],
            1.0,
        );
    }

    /// A regression verdict for one metric at one level of a suite run.
    pub fn regression_verdict(&self, suite: &str, metric: &str, level: &str, regressed: bool) {
        let labels = vec![
            (attr::SUITE, suite.to_string()),
            (attr::METRIC, metric.to_string()),
            (attr::LEVEL, level.to_string()),
        ];
        let mut with_verdict = labels.clone();
        with_verdict.push((
            attr::VERDICT,
            if regressed { "regressed" } else { "pass" }.into(),
        ));
        self.count(&names::REGRESSION_VERDICTS, with_verdict, 1.0);
        self.gauge(
            &names::REGRESSION_REGRESSED,
            labels,
            if regressed { 1.0 } else { 0.0 },
        );
    }

    /// The values behind a regression verdict: this run's and the baseline's, in the metric's
    /// own unit (tokens/s, ms, …).
    pub fn regression_values(
        &self,
        suite: &str,
        metric: &str,
        level: &str,
        current: f64,
        baseline: f64,
    ) {
        let labels = vec![
            (attr::SUITE, suite.to_string()),
            (attr::METRIC, metric.to_string()),
            (attr::LEVEL, level.to_string()),
        ];
        self.gauge(&names::REGRESSION_CURRENT, labels.clone(), current);
        self.gauge(&names::REGRESSION_BASELINE, labels, baseline);
    }

    /// A change point of a suite's check: the series' value is when the new level starts
    /// (Unix ms), its labels say where and how much, so a Grafana annotation query with
    /// "series value as timestamp" marks it on the regression history.
    pub fn regression_change_point(
        &self,
        suite: &str,
        metric: &str,
        level: &str,
        job_id: &str,
        relative: f64,
        start_unix_ms: i64,
    ) {
        let labels = vec![
            (attr::SUITE, suite.to_string()),
            (attr::METRIC, metric.to_string()),
            (attr::LEVEL, level.to_string()),
            (attr::JOB_ID, job_id.to_string()),
            (attr::CHANGE, format!("{:+.1}%", relative * 100.0)),
        ];
        self.gauge(
            &names::REGRESSION_CHANGE_POINT,
            labels,
            start_unix_ms as f64,
        );
    }

    /// The in-process store behind `/metrics` (read back in tests).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition of everything above.
    pub fn render_prometheus(&self) -> String {
        self.expire_due();
        self.registry.render(names::all())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `p50` → 0.5, `p99.9` → 0.999.
fn parse_quantile(key: &str) -> Option<f64> {
    let n: f64 = key.strip_prefix('p')?.parse().ok()?;
    (0.0..=100.0).contains(&n).then_some(n / 100.0)
}

/// The observations of a level's latency distribution for a histogram, in seconds.
///
/// The agent sends each level's summary (count, min, max, mean, percentiles), not every request,
/// so the histogram gets `count` observations placed by interpolating between the reported
/// quantiles: counts are exact, positions within a bucket are as exact as the percentiles are.
fn reconstruct_seconds(d: &agentpb::Distribution) -> Vec<f64> {
    if d.count == 0 {
        return Vec::new();
    }
    let mut points: Vec<(f64, f64)> = vec![(0.0, d.min)];
    points.extend(
        d.percentiles
            .iter()
            .filter_map(|(k, v)| Some((parse_quantile(k)?, *v))),
    );
    points.push((1.0, d.max.max(d.min)));
    points.retain(|(_, v)| v.is_finite());
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Quantile values never decrease; repair rounding in the summary.
    for i in 1..points.len() {
        if points[i].1 < points[i - 1].1 {
            points[i].1 = points[i - 1].1;
        }
    }
    let n = d.count.min(MAX_RECONSTRUCTED) as usize;
    (0..n)
        .map(|i| {
            let q = (i as f64 + 0.5) / n as f64;
            let j = points
                .partition_point(|p| p.0 < q)
                .clamp(1, points.len() - 1);
            let (q0, v0) = points[j - 1];
            let (q1, v1) = points[j];
            let v = if q1 > q0 {
                v0 + (v1 - v0) * (q - q0) / (q1 - q0)
            } else {
                v1
            };
            v / 1000.0
        })
        .collect()
}

#[cfg(test)]
mod tests;
