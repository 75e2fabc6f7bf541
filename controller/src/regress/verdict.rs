//! Verdicts: a suite run's results against its baseline's, per config, workload, level and
//! metric, using every repeat on both sides and the suite's stored history.
//!
//! A check regresses when its change is worse than the tolerance AND the one-sided test of
//! "worse" holds at alpha = 1 − confidence after Holm's correction over the suite's tested
//! checks (`fleetbench_stats::decide::regressions`). The test is Welch's t on log values, or,
//! with three or more stored runs, a t-test whose error includes the variance between runs
//! learned from the history (`fleetbench_stats::regress`). Under the `last-passing` baseline a
//! drift also fails: successive worsening change points in the history that add up to more
//! than the tolerance, which a baseline that follows every passing run cannot see.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fleetbench_proto::agentpb::{LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::StoredLevel;
use fleetbench_stats::decide::{Check, regressions};
use fleetbench_stats::regress::{Change, Interval, change, error_rate_rise};

use super::history::PastRun;
use super::trend::{Trend, stats_direction, trend};
use crate::metrics::Metrics;
use crate::spec::level_label;
use crate::spec::suite::{Baseline, Direction, Metric, MetricGate, SuiteSpec};

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Within the tolerance, or not shown to be worse.
    Pass,
    /// Worse than the tolerance and shown worse by the test (or crashed / no result where the
    /// baseline had one, or a drift over the history beyond the tolerance).
    Regressed,
    /// Nothing to compare with (first run, or a level the baseline lacks): passes.
    NoBaseline,
}

/// One check: a metric at a level of a config on a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub config: String,
    pub workload: String,
    pub level: String,
    pub metric: Metric,
    pub direction: Direction,
    pub tolerance: f64,
    /// One value per repeat that produced one.
    pub baseline: Vec<f64>,
    pub current: Vec<f64>,
    /// The measured change with its interval (None: not measured, e.g. one repeat).
    pub change: Option<Interval>,
    /// The point change: relative (current / baseline − 1), or for `error_rate` the rise in
    /// absolute terms.
    pub relative: Option<f64>,
    /// The one-sided "worse" p-value, and Holm-adjusted over the suite (None: not tested).
    pub p_worse: Option<f64>,
    pub p_adjusted: Option<f64>,
    /// The check's history: between-run variance, change points, drift.
    pub trend: Trend,
    pub status: Status,
    /// Why, in words.
    pub detail: String,
}

impl Verdict {
    /// `config/workload/level`, the row label of tables and JUnit test cases.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.config, self.workload, self.level)
    }
}

/// Level results by `(config, workload, level label)`, in repeat order.
pub type Grouped = BTreeMap<(String, String, String), Vec<LevelResult>>;

/// Groups stored levels for comparison.
pub fn group(levels: &[StoredLevel]) -> Grouped {
    let mut out: Grouped = BTreeMap::new();
    let mut sorted: Vec<&StoredLevel> = levels.iter().collect();
    sorted.sort_by_key(|l| l.repeat);
    for l in sorted {
        let Some(r) = &l.result else { continue };
        let label = level_label(&r.level.unwrap_or_default());
        out.entry((l.config_name.clone(), l.workload.clone(), label))
            .or_default()
            .push(r.clone());
    }
    out
}

fn crashed(r: &LevelResult) -> bool {
    r.outcome == LevelOutcome::Crashed as i32
}

/// A gate's values in level results: one per repeat that has one (crashed levels have none).
fn values(gate: &MetricGate, rs: &[LevelResult]) -> Vec<f64> {
    rs.iter()
        .filter(|r| !crashed(r))
        .filter_map(|r| gate.metric.value(r))
        .collect()
}

/// Failed and total requests over level results.
fn counts(rs: &[LevelResult]) -> (u64, u64) {
    let failed: u64 = rs.iter().map(|r| r.failed).sum();
    (failed, failed + rs.iter().map(|r| r.completed).sum::<u64>())
}

/// Compares a run with its baseline (None: no baseline yet, everything passes), without a
/// history.
pub fn verdicts(suite: &SuiteSpec, baseline: Option<&Grouped>, current: &Grouped) -> Vec<Verdict> {
    verdicts_with_history(suite, baseline, current, &[])
}

/// Compares a run with its baseline, with the suite's stored runs (oldest first) for the
/// between-run variance and the change points.
pub fn verdicts_with_history(
    suite: &SuiteSpec,
    baseline: Option<&Grouped>,
    current: &Grouped,
    past: &[PastRun],
) -> Vec<Verdict> {
    let alpha = 1.0 - suite.confidence;
    let mut out = Vec::new();
    // Per verdict: the check for the Holm family (None: decided without a test).
    let mut family: Vec<Option<Check>> = Vec::new();
    for (key, runs) in current {
        let (config, workload, level) = key;
        let base_runs = baseline.and_then(|b| b.get(key));
        for gate in &suite.metrics {
            let cur = values(gate, runs);
            let base = base_runs.map(|b| values(gate, b)).unwrap_or_default();
            let cur_crashes = runs.iter().filter(|r| crashed(r)).count();
            let base_crashes = base_runs.map_or(0, |b| b.iter().filter(|r| crashed(r)).count());
            let mut v = Verdict {
                config: config.clone(),
                workload: workload.clone(),
                level: level.clone(),
                metric: gate.metric,
                direction: gate.direction,
                tolerance: gate.tolerance,
                baseline: base.clone(),
                current: cur.clone(),
                change: None,
                relative: None,
                p_worse: None,
                p_adjusted: None,
                trend: trend(past, key, |rs| values(gate, rs), &cur, gate.direction),
                status: Status::Pass,
                detail: String::new(),
            };
            let mut check = None;
            if base.is_empty() {
                v.status = Status::NoBaseline;
                v.detail = "no baseline value".into();
            } else if cur_crashes > base_crashes {
                v.status = Status::Regressed;
                v.detail = format!(
                    "crashed in {cur_crashes} of {} repeats (baseline: {base_crashes})",
                    runs.len()
                );
            } else if cur.is_empty() {
                v.status = Status::Regressed;
                v.detail = "no result where the baseline had one".into();
            } else if gate.metric == Metric::ErrorRate {
                check = error_rate_check(&mut v, gate, base_runs.map_or(&[][..], |b| b), runs);
            } else {
                check = measured_check(&mut v, gate, suite.confidence);
            }
            family.push(check);
            out.push(v);
        }
    }
    // Holm over the tested checks; a check decided without a test keeps its status.
    let tested: Vec<usize> = (0..family.len()).filter(|&i| family[i].is_some()).collect();
    let checks: Vec<Check> = tested.iter().filter_map(|&i| family[i]).collect();
    for (&i, (regressed, adj)) in tested.iter().zip(regressions(&checks, alpha)) {
        let v = &mut out[i];
        v.p_adjusted = Some(adj);
        let beyond = checks_beyond(&family[i]);
        v.detail = if regressed {
            v.status = Status::Regressed;
            format!(
                "{}: worse than the {} tolerance (Holm p {:.2e})",
                v.detail,
                tolerance_words(v),
                adj
            )
        } else if beyond {
            format!(
                "{}: worse than the tolerance but not shown (Holm p {adj:.3})",
                v.detail
            )
        } else {
            format!("{}: within the {} tolerance", v.detail, tolerance_words(v))
        };
    }
    if suite.baseline == Baseline::LastPassing {
        for v in &mut out {
            drift_check(v);
        }
    }
    out
}

fn checks_beyond(c: &Option<Check>) -> bool {
    c.is_some_and(|c| c.beyond_tolerance)
}

fn tolerance_words(v: &Verdict) -> String {
    if v.metric == Metric::ErrorRate {
        format!("{:.1}-point", v.tolerance * 100.0)
    } else {
        format!("{:.1}%", v.tolerance * 100.0)
    }
}

/// A throughput or latency check: the t interval (with the history's between-run variance
/// when it has three or more runs) and the one-sided test.
fn measured_check(v: &mut Verdict, gate: &MetricGate, confidence: f64) -> Option<Check> {
    let variance = v.trend.variance;
    let dir = stats_direction(gate.direction);
    let Some(c) = change(
        &v.baseline,
        &v.current,
        variance.as_ref(),
        dir,
        gate.tolerance,
        confidence,
    ) else {
        v.status = Status::NoBaseline;
        v.detail = "a value is 0 or negative: no relative change".into();
        return None;
    };
    let pct = |x: f64| format!("{:+.1}%", x * 100.0);
    match c {
        Change::NoSpread { relative } => {
            v.relative = Some(relative);
            v.detail = format!(
                "{}: no spread measured (one repeat, and fewer than 3 stored runs): untested",
                pct(relative)
            );
            None
        }
        Change::Measured(i) => {
            v.relative = Some(i.relative);
            v.change = Some(i);
            v.p_worse = Some(i.p_worse);
            let source = if i.between_runs {
                format!(
                    "with the between-run variance of {} stored runs",
                    v.trend.runs
                )
            } else {
                "from the repeats only".to_string()
            };
            v.detail = format!(
                "{} [{} .. {}] at {:.0}% ({source}), p(worse) {:.2e}",
                pct(i.relative),
                pct(i.low),
                pct(i.high),
                i.confidence * 100.0,
                i.p_worse
            );
            let beyond = match gate.direction {
                Direction::HigherIsBetter => i.relative < -gate.tolerance,
                Direction::LowerIsBetter => i.relative > gate.tolerance,
            };
            Some(Check {
                beyond_tolerance: beyond,
                p_worse: i.p_worse,
            })
        }
    }
}

/// The error-rate check: the rise of failed / (completed + failed) against an absolute
/// tolerance, tested on the request counts (one-sided two-proportion z-test).
fn error_rate_check(
    v: &mut Verdict,
    gate: &MetricGate,
    base: &[LevelResult],
    cur: &[LevelResult],
) -> Option<Check> {
    let r = error_rate_rise(counts(base), counts(cur))?;
    v.relative = Some(r.rise);
    v.p_worse = Some(r.p);
    v.detail = format!(
        "error rate {:.2}% -> {:.2}% ({:+.2} points), p(worse) {:.2e}",
        r.baseline_rate * 100.0,
        r.current_rate * 100.0,
        r.rise * 100.0,
        r.p
    );
    Some(Check {
        beyond_tolerance: r.rise > gate.tolerance,
        p_worse: r.p,
    })
}

/// Under `last-passing`: a drift beyond the tolerance over successive worsening change points
/// fails the check even when this run is within the tolerance of its (ratcheted) baseline.
fn drift_check(v: &mut Verdict) {
    let Some(d) = v.trend.drift else { return };
    if v.status != Status::Pass || v.metric == Metric::ErrorRate {
        return;
    }
    let beyond = match v.direction {
        Direction::HigherIsBetter => d.relative < -v.tolerance,
        Direction::LowerIsBetter => d.relative > v.tolerance,
    };
    if beyond && d.p < fleetbench_stats::changepoint::Options::default().max_p {
        v.status = Status::Regressed;
        v.detail = format!(
            "{}; DRIFT: {} successive worse change point(s) in the history add up to {:+.1}% \
             (p {:.1e}), beyond the {:.1}% tolerance",
            v.detail,
            d.steps,
            d.relative * 100.0,
            d.p,
            v.tolerance * 100.0
        );
    }
}

/// Whether every verdict passes.
pub fn passed(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| v.status != Status::Regressed)
}

/// Exports the verdicts as the regression dashboard's metrics.
pub fn export(metrics: &Metrics, suite_name: &str, job_id: &str, verdicts: &[Verdict]) {
    let run = fleetbench_proto::controllerpb::SuiteRun {
        suite: suite_name.to_string(),
        job_id: job_id.to_string(),
        checks: super::history::checks(verdicts),
        ..Default::default()
    };
    super::history::export_checks(metrics, &run);
}

/// The verdicts as a plain-text table, one line per check.
pub fn render(verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    let width = verdicts.iter().map(|v| v.key().len()).max().unwrap_or(0);
    for v in verdicts {
        let word = match v.status {
            Status::Pass => "pass",
            Status::Regressed => "REGRESSED",
            Status::NoBaseline => "new",
        };
        let _ = writeln!(
            out,
            "{:<9} {:<width$}  {:<22} {}",
            word,
            v.key(),
            v.metric.name(),
            v.detail
        );
    }
    let with_points: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| !v.trend.change_points.is_empty())
        .collect();
    if !with_points.is_empty() {
        let _ = writeln!(
            out,
            "change points over the stored history (E-divisive means, t-test p < 0.001):"
        );
        for v in with_points {
            let points: Vec<String> = v
                .trend
                .change_points
                .iter()
                .map(super::trend::describe)
                .collect();
            let _ = writeln!(
                out,
                "  {:<width$}  {:<22} {}",
                v.key(),
                v.metric.name(),
                points.join("; ")
            );
        }
    }
    out
}
