//! Every metric the controller records, its attribute keys, and the translation of OpenTelemetry
//! names to the Prometheus names the OpenTelemetry collector produces (and `/metrics` serves).
//!
//! The translation follows the collector's `pkg/translator/prometheus` ("classic" names with
//! suffixes, the default of the collector's Prometheus exporters and of Prometheus' own OTLP
//! receiver): characters outside `[a-zA-Z0-9_:]` become `_`, runs of `_` collapse, the unit
//! becomes a suffix (`s` → `_seconds`, `By` → `_bytes`, `{token}/s` → `_per_second`, a gauge
//! with unit `1` → `_ratio`), monotonic sums end in `_total`.

mod host;
pub use host::*;

/// Instrument kind, as OpenTelemetry and Prometheus see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic sum; Prometheus `counter` with `_total`.
    Counter,
    /// Last value; Prometheus `gauge`.
    Gauge,
    /// Explicit-bucket histogram; Prometheus `_bucket`/`_sum`/`_count`.
    Histogram,
}

/// One metric: its OpenTelemetry name, unit, kind, description and (histograms) bucket bounds.
#[derive(Debug)]
pub struct MetricDesc {
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub buckets: &'static [f64],
}

impl MetricDesc {
    /// The name of this metric in Prometheus (without `_bucket`/`_sum`/`_count`).
    pub fn prometheus_name(&self) -> String {
        prometheus_name(self.name, self.unit, self.kind)
    }
}

/// Attribute keys (span attributes use the same keys). On Prometheus, dots become underscores.
pub mod attr {
    pub const JOB_ID: &str = "fleetbench.job.id";
    pub const JOB_KIND: &str = "fleetbench.job.kind";
    pub const JOB_STATE: &str = "fleetbench.job.state";
    pub const TRIAL_STATE: &str = "fleetbench.trial.state";
    /// The agent's host name as the controller's inventory knows it.
    pub const HOST: &str = "fleetbench.host";
    pub const CONFIG_ID: &str = "fleetbench.config.id";
    pub const CONFIG_NAME: &str = "fleetbench.config.name";
    pub const ENGINE_KIND: &str = "fleetbench.engine.kind";
    pub const WORKLOAD: &str = "fleetbench.workload";
    pub const REPEAT: &str = "fleetbench.repeat";
    /// Closed-loop concurrency (or an open-loop run's cap); empty for pure rate levels.
    pub const CONCURRENCY: &str = "fleetbench.concurrency";
    /// Open-loop request rate per second; empty for closed-loop levels.
    pub const REQUEST_RATE: &str = "fleetbench.request_rate";
    /// `p50`, `p90`, `p99`, `mean`, … of a level's latency distribution.
    pub const QUANTILE: &str = "fleetbench.quantile";
    /// `ok`, `failed`, `crashed` for levels; `ok`, `failed` for requests.
    pub const OUTCOME: &str = "fleetbench.outcome";
    /// A failed request's kind (`http_500`, `timeout`, ...), as OpenTelemetry names it.
    pub const ERROR_TYPE: &str = "error.type";
    pub const CRASH_CLASS: &str = "fleetbench.crash.class";
    pub const GPU_INDEX: &str = "fleetbench.gpu.index";
    /// One NVML clocks event reason (`sw_power_cap`, `hw_slowdown`, ...).
    pub const THROTTLE_REASON: &str = "fleetbench.gpu.throttle_reason";
    // dcgm-exporter's label names, on every GPU series so that they join its series
    // (`* on (UUID) group_left DCGM_FI_DEV_...`).
    /// The GPU's UUID (`GPU-…`), as dcgm-exporter's `UUID`.
    pub const DCGM_UUID: &str = "UUID";
    /// The GPU's index on its host, as dcgm-exporter's `gpu`.
    pub const DCGM_GPU: &str = "gpu";
    /// The host's name as dcgm-exporter's `Hostname` (the agent's OS host name, or
    /// dcgm-exporter's own label when the figures come from it).
    pub const DCGM_HOSTNAME: &str = "Hostname";
    pub const SUITE: &str = "fleetbench.suite";
    pub const METRIC: &str = "fleetbench.metric";
    /// A regression check's load level, as the suite names it (`c64`, `r2.5`).
    pub const LEVEL: &str = "fleetbench.level.label";
    pub const VERDICT: &str = "fleetbench.verdict";
    /// A change point's size in words, e.g. `-5.1%`.
    pub const CHANGE: &str = "fleetbench.change";
    // Semantic-convention keys.
    pub const MODEL: &str = "gen_ai.request.model";
    pub const PROVIDER: &str = "gen_ai.provider.name";
    /// `chat` or `text_completion`, after the API the load generator used.
    pub const OPERATION: &str = "gen_ai.operation.name";
    pub const TOKEN_TYPE: &str = "gen_ai.token.type";
    pub const HW_ID: &str = "hw.id";
    pub const HW_TYPE: &str = "hw.type";
    pub const IO_DIRECTION: &str = "network.io.direction";
}

const fn counter(name: &'static str, unit: &'static str, help: &'static str) -> MetricDesc {
    MetricDesc {
        name,
        unit,
        kind: Kind::Counter,
        help,
        buckets: &[],
    }
}
const fn gauge(name: &'static str, unit: &'static str, help: &'static str) -> MetricDesc {
    MetricDesc {
        name,
        unit,
        kind: Kind::Gauge,
        help,
        buckets: &[],
    }
}

/// Latency buckets in seconds: the GenAI conventions' doubling series, with finer steps below
/// 10 ms where inter-token latencies of small models live.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
    40.96, 81.92,
];

// --- jobs, trials, levels, crashes -----------------------------------------------------------
pub const JOBS_SUBMITTED: MetricDesc = counter(
    "fleetbench.jobs.submitted",
    "{job}",
    "Jobs accepted, by kind.",
);
pub const TELEMETRY_DROPPED: MetricDesc = counter(
    "fleetbench.telemetry.dropped",
    "{point}",
    "Telemetry points relayed from agents but not stored: the store fell behind.",
);
pub const JOBS_FINISHED: MetricDesc = counter(
    "fleetbench.jobs.finished",
    "{job}",
    "Jobs that ended, by kind and final state.",
);
pub const TRIALS: MetricDesc = counter(
    "fleetbench.trials",
    "{trial}",
    "Trial attempts that ended, by host, config and state.",
);
pub const LEVELS: MetricDesc = counter(
    "fleetbench.levels",
    "{level}",
    "Load levels stored, by config and outcome.",
);
pub const CRASHES: MetricDesc = counter(
    "fleetbench.engine.crashes",
    "{crash}",
    "Engine crashes (at start or during a level), by host, config and class.",
);
pub const REQUESTS: MetricDesc = counter(
    "fleetbench.requests",
    "{request}",
    "Benchmark requests sent, by outcome.",
);
pub const TOKENS: MetricDesc = counter(
    "fleetbench.tokens",
    "{token}",
    "Tokens processed by benchmark requests, by gen_ai.token.type (input, output).",
);

// --- per-level results (gauges: the level's last stored value) ------------------------------
pub const LEVEL_OUTPUT_TOKENS: MetricDesc = gauge(
    "fleetbench.level.output_tokens",
    "{token}/s",
    "Output tokens per second of a level.",
);
pub const LEVEL_TOTAL_TOKENS: MetricDesc = gauge(
    "fleetbench.level.total_tokens",
    "{token}/s",
    "Input plus output tokens per second of a level.",
);
pub const LEVEL_REQUESTS: MetricDesc = gauge(
    "fleetbench.level.requests",
    "{request}/s",
    "Completed requests per second of a level.",
);
pub const LEVEL_GOODPUT: MetricDesc = gauge(
    "fleetbench.level.goodput",
    "{request}/s",
    "Requests per second that met the SLO of a level.",
);
pub const LEVEL_TTFT: MetricDesc = gauge(
    "fleetbench.level.time_to_first_token",
    "s",
    "Time to first token of a level, by fleetbench.quantile.",
);
pub const LEVEL_ITL: MetricDesc = gauge(
    "fleetbench.level.inter_token_latency",
    "s",
    "Inter-token latency of a level, by fleetbench.quantile.",
);
pub const LEVEL_TPOT: MetricDesc = gauge(
    "fleetbench.level.time_per_output_token",
    "s",
    "Time per output token of a level, by fleetbench.quantile.",
);
pub const LEVEL_E2E: MetricDesc = gauge(
    "fleetbench.level.request_duration",
    "s",
    "End-to-end request latency of a level, by fleetbench.quantile.",
);
pub const LEVEL_ERRORS: MetricDesc = gauge(
    "fleetbench.level.errors",
    "{request}",
    "Failed requests of a level.",
);
pub const LEVEL_ERROR_RATE: MetricDesc = gauge(
    "fleetbench.level.error_rate",
    "1",
    "Failed over sent requests of a level, by error.type (all kinds: error.type=\"all\").",
);
pub const LEVEL_ITL_CHUNK: MetricDesc = gauge(
    "fleetbench.level.inter_chunk_latency",
    "s",
    "Inter-token latency per chunk (one gap per SSE event) of a level, by fleetbench.quantile.",
);
pub const LEVEL_PREFIX_CACHE_HIT_RATE: MetricDesc = gauge(
    "fleetbench.level.prefix_cache.hit_rate",
    "1",
    "Fraction of a level's prompt tokens the engine served from its prefix cache (its own metrics).",
);
pub const LEVEL_BURST: MetricDesc = gauge(
    "fleetbench.level.burst",
    "",
    "1 when a closed-loop level had fewer than 4 x concurrency measured requests, else 0.",
);
pub const LEVEL_CRASHED: MetricDesc = gauge(
    "fleetbench.level.crashed",
    "",
    "1 when the engine crashed during the level, else 0.",
);

// --- client-side request latency, GenAI semantic conventions -------------------------------
pub const CLIENT_DURATION: MetricDesc = MetricDesc {
    name: "gen_ai.client.operation.duration",
    unit: "s",
    kind: Kind::Histogram,
    help: "End-to-end request latency measured by the load generator.",
    buckets: LATENCY_BUCKETS,
};
pub const CLIENT_TTFC: MetricDesc = MetricDesc {
    name: "gen_ai.client.operation.time_to_first_chunk",
    unit: "s",
    kind: Kind::Histogram,
    help: "Time to the first streamed token measured by the load generator.",
    buckets: LATENCY_BUCKETS,
};
pub const CLIENT_TPOC: MetricDesc = MetricDesc {
    name: "gen_ai.client.operation.time_per_output_chunk",
    unit: "s",
    kind: Kind::Histogram,
    help: "Time between streamed tokens measured by the load generator.",
    buckets: LATENCY_BUCKETS,
};

// --- regression suites ------------------------------------------------------------------------
pub const REGRESSION_VERDICTS: MetricDesc = counter(
    "fleetbench.regression.verdicts",
    "{verdict}",
    "Regression checks, by suite, metric, level and verdict (pass, regressed).",
);
pub const REGRESSION_REGRESSED: MetricDesc = gauge(
    "fleetbench.regression.regressed",
    "",
    "1 when the last run of a suite regressed on a metric at a level, else 0.",
);
pub const REGRESSION_CURRENT: MetricDesc = gauge(
    "fleetbench.regression.current",
    "",
    "The last run's value of a suite's metric at a level (the metric's own unit).",
);
pub const REGRESSION_BASELINE: MetricDesc = gauge(
    "fleetbench.regression.baseline",
    "",
    "The baseline value the last run was compared against.",
);

pub const REGRESSION_CHANGE_POINT: MetricDesc = gauge(
    "fleetbench.regression.change_point",
    "ms",
    "Change points of a suite's check over its history: one series per change point, its value \
     the Unix time (ms) of the first run at the new level (for Grafana annotations).",
);

/// The controller's own metrics: not about one job or one host.
pub const CONTROLLER: &[&MetricDesc] = &[
    &JOBS_SUBMITTED,
    &JOBS_FINISHED,
    &TELEMETRY_DROPPED,
    &TRIALS,
    &CRASHES,
];

/// A regression suite's verdicts and history.
pub const REGRESSION: &[&MetricDesc] = &[
    &REGRESSION_VERDICTS,
    &REGRESSION_REGRESSED,
    &REGRESSION_CURRENT,
    &REGRESSION_BASELINE,
    &REGRESSION_CHANGE_POINT,
];

/// Every metric by group, in the order `/metrics` lists them.
pub const ALL: &[&[&MetricDesc]] = &[CONTROLLER, PER_JOB, PER_HOST, REGRESSION];

/// Every metric, one by one.
pub fn all() -> impl Iterator<Item = &'static MetricDesc> {
    ALL.iter().flat_map(|group| group.iter().copied())
}

/// Metrics whose series carry `fleetbench.job.id` and live only while the job is recent (they
/// go a grace period after it ends; the store keeps its results). Change points are kept: one
/// series per change in a suite's history, few and not about one job's progress.
pub const PER_JOB: &[&MetricDesc] = &[
    &LEVELS,
    &REQUESTS,
    &TOKENS,
    &LEVEL_OUTPUT_TOKENS,
    &LEVEL_TOTAL_TOKENS,
    &LEVEL_REQUESTS,
    &LEVEL_GOODPUT,
    &LEVEL_TTFT,
    &LEVEL_ITL,
    &LEVEL_TPOT,
    &LEVEL_E2E,
    &LEVEL_ERRORS,
    &LEVEL_ERROR_RATE,
    &LEVEL_ITL_CHUNK,
    &LEVEL_PREFIX_CACHE_HIT_RATE,
    &LEVEL_BURST,
    &LEVEL_CRASHED,
    &CLIENT_DURATION,
    &CLIENT_TTFC,
    &CLIENT_TPOC,
];

fn unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        _ => return None,
    })
}

fn per_unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

/// Removes `{…}` annotations from a UCUM unit (`{token}/s` → `/s`).
fn strip_annotations(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut depth = 0u32;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

fn tokens_of(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// The Prometheus name the OpenTelemetry collector gives an OTLP metric.
pub fn prometheus_name(name: &str, unit: &str, kind: Kind) -> String {
    let mut tokens = tokens_of(name);
    let unit = strip_annotations(unit);
    let (main, per) = match unit.split_once('/') {
        Some((m, p)) => (m.trim(), Some(p.trim())),
        None => (unit.trim(), None),
    };
    if !main.is_empty() {
        let word = if main == "1" {
            (kind == Kind::Gauge).then(|| "ratio".to_string())
        } else {
            Some(
                unit_word(main)
                    .map(str::to_string)
                    .unwrap_or_else(|| sanitize(main)),
            )
        };
        if let Some(word) = word
            && !word.is_empty()
            && !tokens.contains(&word)
        {
            tokens.push(word);
        }
    }
    if let Some(per) = per.filter(|p| !p.is_empty()) {
        let word = per_unit_word(per)
            .map(str::to_string)
            .unwrap_or_else(|| sanitize(per));
        if !tokens.iter().any(|t| t == &word) {
            tokens.push("per".into());
            tokens.push(word);
        }
    }
    if kind == Kind::Counter {
        tokens.retain(|t| t != "total");
        tokens.push("total".into());
    }
    let mut out = tokens.join("_");
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn sanitize(s: &str) -> String {
    tokens_of(s).join("_")
}

/// The Prometheus label name of an attribute key (`gen_ai.request.model` → `gen_ai_request_model`).
pub fn prometheus_label(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out = format!("key_{out}");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out = format!("key{out}");
    }
    out
}

#[cfg(test)]
mod tests;
