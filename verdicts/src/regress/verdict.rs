//! Verdicts: a suite run's results against its baseline's, per config, workload, level and
//! metric, using every repeat on both sides and the suite's stored history.
//!
//! A check regresses when the one-sided test of "worse than the tolerance" rejects at
//! alpha = 1 − confidence after Holm's correction over the suite's tested checks
//! (`fleetbench_stats::regress::judge`). Its error is the run-to-run variance learned from the
//! suite's stored runs (moderated over the suite's checks of the same metric), or the
//! suite's stated `run_spread` until the history has it; with neither, the check says
//! "baseline forming" and passes. Error rates are tested on request counts. Under the
//! `last-passing` baseline a drift also fails: successive worsening change points in the
//! history whose sum is beyond the tolerance at p < `DRIFT_ALPHA`, which a baseline that
//! follows every passing run cannot see.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fleetbench_proto::agentpb::{LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::StoredLevel;
use fleetbench_stats::moderated::Prior;
use fleetbench_stats::regress::{CheckInput, DRIFT_ALPHA, Outcome, Tested, error_rate_rise, judge};

use super::PastRun;
use super::trend::{Trend, stats_direction, trend};
use fleetbench_spec::level_label;
use fleetbench_spec::suite::{Baseline, Direction, Metric, MetricGate, SuiteSpec};

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Within the tolerance, or not shown to be worse than it.
    Pass,
    /// Too few stored runs to know how much runs differ with no change: passes, and says so.
    Forming,
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
    /// The test of the change against the tolerance, with its interval (None: not tested).
    pub test: Option<Tested>,
    /// The point change: relative (current / baseline − 1), or for `error_rate` the rise in
    /// absolute terms.
    pub relative: Option<f64>,
    /// The one-sided p-value of "worse than the tolerance", and Holm-adjusted over the suite
    /// (None: not tested).
    pub p_beyond: Option<f64>,
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

/// How a verdict is decided before the suite's correction.
enum Pending {
    /// Decided without a test (no baseline value, a crash, no result).
    Done,
    /// A throughput or latency check for `judge`.
    Measured(usize),
    /// An error-rate check with its one-sided p against the tolerance.
    Rate(f64),
}

/// Compares a run with its baseline, with the suite's stored runs (oldest first) for the
/// run-to-run variance and the change points.
pub fn verdicts_with_history(
    suite: &SuiteSpec,
    baseline: Option<&Grouped>,
    current: &Grouped,
    past: &[PastRun],
) -> Vec<Verdict> {
    let alpha = 1.0 - suite.confidence;
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut measured: Vec<usize> = Vec::new();
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
                test: None,
                relative: None,
                p_beyond: None,
                p_adjusted: None,
                trend: trend(
                    past,
                    key,
                    |rs| values(gate, rs),
                    &cur,
                    gate.direction,
                    gate.tolerance,
                ),
                status: Status::Pass,
                detail: String::new(),
            };
            let p = if base.is_empty() {
                v.status = Status::NoBaseline;
                v.detail = "no baseline value".into();
                Pending::Done
            } else if cur_crashes > base_crashes {
                v.status = Status::Regressed;
                v.detail = format!(
                    "crashed in {cur_crashes} of {} repeats (baseline: {base_crashes})",
                    runs.len()
                );
                Pending::Done
            } else if cur.is_empty() {
                v.status = Status::Regressed;
                v.detail = "no result where the baseline had one".into();
                Pending::Done
            } else if gate.metric == Metric::ErrorRate {
                error_rate_check(&mut v, base_runs.map_or(&[][..], |b| b), runs)
            } else {
                measured.push(out.len());
                Pending::Measured(measured.len() - 1)
            };
            pending.push(p);
            out.push(v);
        }
    }
    let inputs: Vec<CheckInput<'_>> = measured
        .iter()
        .map(|&i| {
            let v = &out[i];
            CheckInput {
                baseline: &v.baseline,
                current: &v.current,
                history: &v.trend.history,
                direction: stats_direction(v.direction),
                tolerance: v.tolerance,
                group: v.metric as u32,
            }
        })
        .collect();
    let rates: Vec<f64> = pending
        .iter()
        .filter_map(|p| match p {
            Pending::Rate(p) => Some(*p),
            _ => None,
        })
        .collect();
    let stated = suite.run_spread.map(stated_prior);
    let (outcomes, rate_adj) = judge(&inputs, &rates, stated, alpha);
    let mut rate_adj = rate_adj.into_iter();
    for (v, p) in out.iter_mut().zip(&pending) {
        match p {
            Pending::Done => {}
            Pending::Measured(k) => measured_verdict(v, outcomes[*k]),
            Pending::Rate(_) => {
                let adj = rate_adj.next().unwrap_or(f64::NAN);
                v.p_adjusted = Some(adj);
                if adj <= alpha {
                    v.status = Status::Regressed;
                    v.detail = format!(
                        "{}: beyond the {} tolerance (Holm p {adj:.2e})",
                        v.detail,
                        tolerance_words(v)
                    );
                } else {
                    v.detail = format!(
                        "{}: not shown beyond the {} tolerance (Holm p {adj:.3})",
                        v.detail,
                        tolerance_words(v)
                    );
                }
            }
        }
    }
    if suite.baseline == Baseline::LastPassing {
        for v in &mut out {
            drift_check(v);
        }
    }
    out
}

/// Degrees of freedom a suite's stated `run_spread` counts for: as much as four stored runs.
pub const RUN_SPREAD_DF: f64 = 4.0;

/// The prior a suite's `run_spread` states: a run mean varies by that much (relative) run to
/// run, as if learned from [`RUN_SPREAD_DF`] degrees of freedom.
fn stated_prior(spread: f64) -> Prior {
    Prior {
        d0: RUN_SPREAD_DF,
        s0_sq: (1.0 + spread).ln().powi(2),
        features: 0,
        df_pooled: f64::INFINITY,
    }
}

fn tolerance_words(v: &Verdict) -> String {
    if v.metric == Metric::ErrorRate {
        format!("{:.1}-point", v.tolerance * 100.0)
    } else {
        format!("{:.1}%", v.tolerance * 100.0)
    }
}

/// A throughput or latency verdict from its test.
fn measured_verdict(v: &mut Verdict, outcome: Outcome) {
    // An interval on 1 degree of freedom can reach ratios of 10^12: past ±1000% the digits
    // say nothing, so the bound is printed as a bound.
    let pct = |x: f64| {
        if x * 100.0 > 1000.0 {
            ">+1000%".to_string()
        } else {
            format!("{:+.1}%", x * 100.0)
        }
    };
    match outcome {
        Outcome::NoValue => {
            v.status = Status::NoBaseline;
            v.detail = "a value is 0 or negative: no relative change".into();
        }
        Outcome::Forming {
            relative,
            runs,
            needed,
        } => {
            v.relative = Some(relative);
            v.status = Status::Forming;
            v.detail = format!(
                "{}: baseline forming ({runs} of {needed} stored runs: how much runs differ \
                 with no change is not known yet), untested",
                pct(relative)
            );
        }
        Outcome::Tested(t) => {
            v.relative = Some(t.relative);
            v.test = Some(t);
            v.p_beyond = Some(t.p_beyond);
            v.p_adjusted = Some(t.p_adjusted);
            let source = match (t.runs, t.prior_d0) {
                (r, Some(d0)) if r < 2 => format!("the suite's stated run_spread ({d0:.0} df)"),
                (r, Some(_)) => format!("the spread of {r} stored runs, moderated over the suite"),
                (r, None) => format!("the spread of {r} stored runs"),
            };
            let words = tolerance_words(v);
            let head = format!(
                "{} [{} .. {}] at {:.2}% (Holm's level; run-to-run error from {source}, {:.1} df)",
                pct(t.relative),
                pct(t.low),
                pct(t.high),
                t.confidence * 100.0,
                t.df
            );
            if t.regressed {
                v.status = Status::Regressed;
                v.detail = format!(
                    "{head}: worse than the {words} tolerance (p {:.2e}, Holm {:.2e})",
                    t.p_beyond, t.p_adjusted
                );
            } else {
                v.detail = format!(
                    "{head}: not shown worse than the {words} tolerance (p {:.3}, Holm {:.3})",
                    t.p_beyond, t.p_adjusted
                );
            }
        }
    }
}

/// The error-rate check: the rise of failed / (completed + failed), tested against its
/// absolute tolerance on the request counts (one-sided z-test).
fn error_rate_check(v: &mut Verdict, base: &[LevelResult], cur: &[LevelResult]) -> Pending {
    let Some(r) = error_rate_rise(counts(base), counts(cur), v.tolerance) else {
        v.status = Status::NoBaseline;
        v.detail = "no requests on a side".into();
        return Pending::Done;
    };
    v.relative = Some(r.rise);
    v.p_beyond = Some(r.p);
    v.detail = format!(
        "error rate {:.2}% -> {:.2}% ({:+.2} points), p(beyond tolerance) {:.2e}",
        r.baseline_rate * 100.0,
        r.current_rate * 100.0,
        r.rise * 100.0,
        r.p
    );
    Pending::Rate(r.p)
}

/// Under `last-passing`: a drift beyond the tolerance over successive worsening change points
/// fails the check even when this run is within the tolerance of its (ratcheted) baseline.
fn drift_check(v: &mut Verdict) {
    let Some(d) = v.trend.drift else { return };
    if !matches!(v.status, Status::Pass | Status::Forming) || v.metric == Metric::ErrorRate {
        return;
    }
    if d.p_beyond_tolerance < DRIFT_ALPHA {
        v.status = Status::Regressed;
        v.detail = format!(
            "{}; DRIFT: {} successive worse change point(s) in the history add up to {:+.1}%, \
             beyond the {:.1}% tolerance (one-sided p {:.1e} < {DRIFT_ALPHA})",
            v.detail,
            d.steps,
            d.relative * 100.0,
            d.p_beyond_tolerance,
            v.tolerance * 100.0
        );
    }
}

/// Whether every verdict passes.
pub fn passed(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| v.status != Status::Regressed)
}

/// The verdicts as a plain-text table, one line per check.
pub fn render(verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    let width = verdicts.iter().map(|v| v.key().len()).max().unwrap_or(0);
    for v in verdicts {
        let word = match v.status {
            Status::Pass => "pass",
            Status::Forming => "forming",
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
            "change points over the stored history (E-divisive means, Otava's split and merge, t-test p < {}):",
            fleetbench_stats::changepoint::Options::default().max_p
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
