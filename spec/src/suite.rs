//! `[suite]`: a regression suite, a job spec (configs, workloads, levels, repeats) plus the
//! metrics compared with a baseline, each with its direction and tolerance.
//!
//! ```toml
//! [suite]
//! baseline = "last-passing"      # or "tag:NAME", or "first" (a fixed reference)
//! confidence = 0.95              # the one-sided tests run at 1 - confidence (Holm over the suite)
//! run_spread = 0.03              # optional: how much a run's mean varies run to run with no
//!                                # change (3%), assumed until the history measures it
//! metrics = [
//!   { name = "output_tokens_per_s", tolerance = 0.05 },
//!   { name = "ttft_p99_ms", direction = "lower", tolerance = 0.10 },
//!   { name = "error_rate", tolerance = 0.01 },   # absolute: one point of failed requests
//! ]
//! ```

use fleetbench_proto::agentpb::LevelResult;

use super::walk::{Ctx, Table, as_string, as_table};
use super::{JobSpec, SpecError, parse::parse_ext};

/// Which way a metric gets better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    HigherIsBetter,
    LowerIsBetter,
}

/// A metric of a level result a suite can gate on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    OutputTokensPerS,
    RequestsPerS,
    GoodputRequestsPerS,
    TtftP50Ms,
    TtftP99Ms,
    ItlP50Ms,
    ItlP99Ms,
    E2eP50Ms,
    E2eP99Ms,
    /// failed / (completed + failed); its tolerance is absolute (0.01 = one point).
    ErrorRate,
}

impl Metric {
    /// Every metric with its spec name.
    pub const ALL: &[(Metric, &str)] = &[
        (Metric::OutputTokensPerS, "output_tokens_per_s"),
        (Metric::RequestsPerS, "requests_per_s"),
        (Metric::GoodputRequestsPerS, "goodput_requests_per_s"),
        (Metric::TtftP50Ms, "ttft_p50_ms"),
        (Metric::TtftP99Ms, "ttft_p99_ms"),
        (Metric::ItlP50Ms, "itl_p50_ms"),
        (Metric::ItlP99Ms, "itl_p99_ms"),
        (Metric::E2eP50Ms, "e2e_p50_ms"),
        (Metric::E2eP99Ms, "e2e_p99_ms"),
        (Metric::ErrorRate, "error_rate"),
    ];

    /// The name used in specs, verdicts and metrics labels.
    pub fn name(self) -> &'static str {
        Metric::ALL
            .iter()
            .find(|(m, _)| *m == self)
            .map_or("?", |(_, n)| n)
    }

    /// Throughputs are better higher, latencies lower.
    pub fn natural_direction(self) -> Direction {
        match self {
            Metric::OutputTokensPerS | Metric::RequestsPerS | Metric::GoodputRequestsPerS => {
                Direction::HigherIsBetter
            }
            _ => Direction::LowerIsBetter,
        }
    }

    /// The metric's value in a level result; None when the level has no such value (a
    /// crashed level, an empty distribution).
    pub fn value(self, r: &LevelResult) -> Option<f64> {
        let pct = |d: &Option<fleetbench_proto::agentpb::Distribution>, key: &str| {
            d.as_ref().and_then(|d| d.percentiles.get(key).copied())
        };
        let v = match self {
            Metric::OutputTokensPerS => Some(r.output_tokens_per_s),
            Metric::RequestsPerS => Some(r.requests_per_s),
            Metric::GoodputRequestsPerS => Some(r.goodput_requests_per_s),
            Metric::TtftP50Ms => pct(&r.ttft_ms, "p50"),
            Metric::TtftP99Ms => pct(&r.ttft_ms, "p99"),
            Metric::ItlP50Ms => pct(&r.itl_ms, "p50"),
            Metric::ItlP99Ms => pct(&r.itl_ms, "p99"),
            Metric::E2eP50Ms => pct(&r.e2e_ms, "p50"),
            Metric::E2eP99Ms => pct(&r.e2e_ms, "p99"),
            Metric::ErrorRate => {
                let total = r.completed + r.failed;
                (total > 0).then(|| r.failed as f64 / total as f64)
            }
        };
        v.filter(|v| v.is_finite())
    }
}

/// One gated metric.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricGate {
    pub metric: Metric,
    pub direction: Direction,
    /// Relative change allowed before it counts as a regression (0.05 = 5%).
    pub tolerance: f64,
}

/// What a suite run is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Baseline {
    /// The latest run of the suite marked with this tag (`fleetbench regress --tag NAME`).
    Tag(String),
    /// The latest run of the suite that passed. It ratchets (small slowdowns under the
    /// tolerance add up), so under it a drift over the history's change points fails too.
    LastPassing,
    /// The suite's first recorded run: a fixed reference that never moves.
    First,
}

/// A validated `[suite]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteSpec {
    pub baseline: Baseline,
    /// Confidence of the interval (two-sided); the one-sided "worse" test runs at
    /// alpha = 1 − confidence, Holm-corrected over the suite's checks.
    pub confidence: f64,
    /// Accepted for suite files written for the bootstrap interval; unused since the
    /// t-based interval replaced it.
    pub resamples: u32,
    pub metrics: Vec<MetricGate>,
    /// `run_spread`: the relative run-to-run spread of a check's run mean the suite states
    /// (a prior worth four stored runs); None: checks say "baseline forming" until the history
    /// has two runs.
    pub run_spread: Option<f64>,
}

/// Parses a regression suite: a job spec with a `[suite]` table.
pub fn parse_suite(file_name: &str, text: &str) -> Result<(JobSpec, SuiteSpec), Vec<SpecError>> {
    parse_ext(file_name, text, "suite", |ctx, t| match t {
        Some(t) => suite(ctx, &t),
        None => {
            ctx.error(
                None,
                "suite",
                "missing: a [suite] table with the metrics to gate on",
            );
            None
        }
    })
}

fn suite(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<SuiteSpec> {
    t.check_keys(
        ctx,
        &[
            "baseline",
            "confidence",
            "resamples",
            "metrics",
            "run_spread",
        ],
    );
    let baseline = match t.get("baseline") {
        None => Some(Baseline::LastPassing),
        Some(v) => {
            let s = as_string(ctx, &t.field("baseline"), v)?;
            if s == "last-passing" {
                Some(Baseline::LastPassing)
            } else if s == "first" {
                Some(Baseline::First)
            } else if let Some(tag) = s.strip_prefix("tag:").filter(|x| !x.trim().is_empty()) {
                Some(Baseline::Tag(tag.to_string()))
            } else {
                let msg =
                    format!("expected \"last-passing\", \"first\" or \"tag:NAME\", got {s:?}");
                ctx.error(Some(&v.span()), &t.field("baseline"), msg);
                None
            }
        }
    };
    let confidence = match t.get("confidence") {
        None => Some(0.95),
        Some(v) => match t.f64(ctx, "confidence") {
            Some(c) if c > 0.5 && c < 1.0 => Some(c),
            Some(c) => {
                let msg = format!("a confidence is between 0.5 and 1 (exclusive), got {c}");
                ctx.error(Some(&v.span()), &t.field("confidence"), msg);
                None
            }
            None => None,
        },
    };
    let run_spread = match t.get("run_spread") {
        None => Some(None),
        Some(v) => match t.f64(ctx, "run_spread") {
            Some(x) if x > 0.0 && x < 1.0 => Some(Some(x)),
            Some(x) => {
                let msg = format!(
                    "a run-to-run spread is relative, above 0 and below 1 (0.03 = 3%), got {x}"
                );
                ctx.error(Some(&v.span()), &t.field("run_spread"), msg);
                None
            }
            None => None,
        },
    };
    let resamples = if t.has("resamples") {
        t.u32(ctx, "resamples", 100)
    } else {
        Some(2000)
    };
    let metrics = match t.get("metrics") {
        None => {
            t.missing(
                ctx,
                "metrics",
                "the metrics to gate on: metrics = [{ name = ..., tolerance = ... }]",
            );
            None
        }
        Some(_) => {
            let items = t.list(ctx, "metrics")?;
            let path = t.field("metrics");
            let gates: Vec<Option<MetricGate>> = items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let g = as_table(ctx, &format!("{path}[{i}]"), v)?;
                    gate(ctx, &g)
                })
                .collect();
            gates.into_iter().collect::<Option<Vec<_>>>()
        }
    };
    Some(SuiteSpec {
        baseline: baseline?,
        confidence: confidence?,
        resamples: resamples?,
        metrics: metrics?,
        run_spread: run_spread?,
    })
}

fn gate(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<MetricGate> {
    t.check_keys(ctx, &["name", "direction", "tolerance"]);
    let name_v = t.get("name");
    let metric = match name_v {
        None => {
            t.missing(ctx, "name", "the metric's name");
            None
        }
        Some(v) => {
            let s = as_string(ctx, &t.field("name"), v)?;
            match Metric::ALL.iter().find(|(_, n)| *n == s) {
                Some((m, _)) => Some(*m),
                None => {
                    let names: Vec<&str> = Metric::ALL.iter().map(|(_, n)| *n).collect();
                    let msg = match super::walk::suggest(&s, names.iter().copied()) {
                        Some(g) => format!("unknown metric {s:?} (did you mean {g:?}?)"),
                        None => format!("unknown metric {s:?} (one of: {})", names.join(", ")),
                    };
                    ctx.error(Some(&v.span()), &t.field("name"), msg);
                    None
                }
            }
        }
    };
    let direction = match t.get("direction") {
        None => metric.map(Metric::natural_direction),
        Some(v) => match as_string(ctx, &t.field("direction"), v)?.as_str() {
            "higher" => Some(Direction::HigherIsBetter),
            "lower" => Some(Direction::LowerIsBetter),
            other => {
                let msg = format!("expected \"higher\" or \"lower\" (is better), got {other:?}");
                ctx.error(Some(&v.span()), &t.field("direction"), msg);
                None
            }
        },
    };
    let tolerance = match t.get("tolerance") {
        None => {
            t.missing(
                ctx,
                "tolerance",
                "the relative change allowed, e.g. 0.05 for 5%",
            );
            None
        }
        Some(v) => match t.f64(ctx, "tolerance") {
            Some(x) if (0.0..1.0).contains(&x) => Some(x),
            Some(x) => {
                let msg =
                    format!("a relative tolerance is at least 0 and below 1 (0.05 = 5%), got {x}");
                ctx.error(Some(&v.span()), &t.field("tolerance"), msg);
                None
            }
            None => None,
        },
    };
    Some(MetricGate {
        metric: metric?,
        direction: direction?,
        tolerance: tolerance?,
    })
}

/// The job spec a suite runs: the suite file without its `[suite]` table (so that the
/// scheduler, which knows nothing of suites, runs it as a plain job).
pub fn job_toml(text: &str) -> Result<String, toml::de::Error> {
    let mut doc: toml::Table = toml::from_str(text)?;
    doc.remove("suite");
    Ok(toml::to_string(&doc).unwrap_or_default())
}
