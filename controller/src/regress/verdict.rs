//! Verdicts: a suite run's results against its baseline's, per config, workload, level and
//! metric, using every repeat on both sides.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fleetbench_proto::agentpb::{LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::StoredLevel;

use super::stats::{Change, relative_change};
use crate::metrics::Metrics;
use crate::spec::level_label;
use crate::spec::suite::{Direction, Metric, SuiteSpec};

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Within the tolerance, or inside the noise.
    Pass,
    /// Worse than the tolerance and outside the noise (or crashed / no result where the
    /// baseline had one).
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
    pub change: Option<Change>,
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

fn seed(parts: &[&str]) -> u64 {
    // FNV-1a: a stable seed per check, so a verdict is the same when computed again.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Compares a run with its baseline (None: no baseline yet, everything passes).
pub fn verdicts(suite: &SuiteSpec, baseline: Option<&Grouped>, current: &Grouped) -> Vec<Verdict> {
    let mut out = Vec::new();
    for ((config, workload, level), runs) in current {
        let base_runs =
            baseline.and_then(|b| b.get(&(config.clone(), workload.clone(), level.clone())));
        for gate in &suite.metrics {
            let values = |rs: &[LevelResult]| -> Vec<f64> {
                rs.iter()
                    .filter(|r| !crashed(r))
                    .filter_map(|r| gate.metric.value(r))
                    .collect()
            };
            let cur = values(runs);
            let base = base_runs.map(|b| values(b)).unwrap_or_default();
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
                status: Status::Pass,
                detail: String::new(),
            };
            if base.is_empty() {
                v.status = Status::NoBaseline;
                v.detail = "no baseline value".into();
                out.push(v);
                continue;
            }
            if cur_crashes > base_crashes {
                v.status = Status::Regressed;
                v.detail = format!(
                    "crashed in {cur_crashes} of {} repeats (baseline: {base_crashes})",
                    runs.len()
                );
                out.push(v);
                continue;
            }
            if cur.is_empty() {
                v.status = Status::Regressed;
                v.detail = "no result where the baseline had one".into();
                out.push(v);
                continue;
            }
            let s = seed(&[config, workload, level, gate.metric.name()]);
            let change = relative_change(&base, &cur, suite.confidence, suite.resamples, s);
            v.change = change;
            let Some(c) = change else {
                v.status = Status::NoBaseline;
                v.detail = "baseline mean is 0".into();
                out.push(v);
                continue;
            };
            // A regression is worse than the tolerance AND outside the noise: the whole
            // interval lies on the worse side of zero.
            let (worse_than_tolerance, outside_noise) = match gate.direction {
                Direction::HigherIsBetter => (c.relative < -gate.tolerance, c.high < 0.0),
                Direction::LowerIsBetter => (c.relative > gate.tolerance, c.low > 0.0),
            };
            let pct = |x: f64| format!("{:+.1}%", x * 100.0);
            let ci = format!(
                "{} [{} .. {}] at {:.0}%",
                pct(c.relative),
                pct(c.low),
                pct(c.high),
                suite.confidence * 100.0
            );
            if worse_than_tolerance && outside_noise {
                v.status = Status::Regressed;
                v.detail = format!(
                    "{ci}: worse than the {:.1}% tolerance",
                    gate.tolerance * 100.0
                );
            } else if worse_than_tolerance {
                v.detail = format!("{ci}: worse than the tolerance but inside the noise");
            } else {
                v.detail = format!("{ci}: within the {:.1}% tolerance", gate.tolerance * 100.0);
            }
            out.push(v);
        }
    }
    out
}

/// Whether every verdict passes.
pub fn passed(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| v.status != Status::Regressed)
}

/// Exports the verdicts as the regression dashboard's metrics.
pub fn export(metrics: &Metrics, suite_name: &str, verdicts: &[Verdict]) {
    let run = fleetbench_proto::controllerpb::SuiteRun {
        suite: suite_name.to_string(),
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
    out
}
