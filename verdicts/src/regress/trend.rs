//! The trend of each check over the suite's stored history: the runs' values (whose spread
//! run to run the repeats of one job cannot show) and the change points of the per-run means
//! (E-divisive means with a t-test, `fleetbench_stats::changepoint`), mapped back to the runs
//! they start at.

use fleetbench_proto::agentpb::LevelResult;
use fleetbench_stats::changepoint::{self, Drift, Options};
use fleetbench_stats::regress::Direction as StatsDirection;

use super::PastRun;
use fleetbench_spec::suite::Direction;

/// A change point of a check's history.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendPoint {
    /// The run the new level starts at (the current run has an empty id until recorded).
    pub job_id: String,
    /// When that run was recorded (0: the current run).
    pub created_unix_ms: i64,
    /// Its position in the series (0 = the oldest run read).
    pub index: usize,
    /// Mean after / mean before − 1.
    pub relative: f64,
    pub p: f64,
}

/// What the history says of one check.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trend {
    /// Runs with a value for the check (the current run not included).
    pub runs: usize,
    /// Each of those runs' values (one per repeat), oldest first: the run-to-run variance of
    /// the check is learned from them.
    pub history: Vec<Vec<f64>>,
    pub change_points: Vec<TrendPoint>,
    /// Successive worsening change points ending in the latest segment.
    pub drift: Option<Drift>,
}

pub(super) fn stats_direction(d: Direction) -> StatsDirection {
    match d {
        Direction::HigherIsBetter => StatsDirection::HigherIsBetter,
        Direction::LowerIsBetter => StatsDirection::LowerIsBetter,
    }
}

/// The trend of one check: `values` reads a run's values of it (one per repeat); `current` is
/// the run being judged (appended last to the series).
pub(super) fn trend(
    past: &[PastRun],
    key: &(String, String, String),
    values: impl Fn(&[LevelResult]) -> Vec<f64>,
    current: &[f64],
    direction: Direction,
    tolerance: f64,
) -> Trend {
    let runs: Vec<(&PastRun, Vec<f64>)> = past
        .iter()
        .filter_map(|r| r.levels.get(key).map(|rs| (r, values(rs))))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let per_run: Vec<Vec<f64>> = runs.iter().map(|(_, v)| v.clone()).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let mut series: Vec<f64> = per_run.iter().map(|v| mean(v)).collect();
    if !current.is_empty() {
        series.push(mean(current));
    }
    let cps = changepoint::change_points(&series, &Options::default());
    let drift = changepoint::drift(&series, &cps, stats_direction(direction), tolerance);
    Trend {
        runs: per_run.len(),
        change_points: cps
            .iter()
            .map(|c| {
                let run = runs.get(c.index).map(|(r, _)| *r);
                TrendPoint {
                    job_id: run.map_or_else(String::new, |r| r.job_id.clone()),
                    created_unix_ms: run.map_or(0, |r| r.created_unix_ms),
                    index: c.index,
                    relative: c.relative,
                    p: c.p,
                }
            })
            .collect(),
        drift,
        history: per_run,
    }
}

/// A change point in words: `run 0193… (2026-12-01 19:20): -5.1% (p 0.0003)`.
pub fn describe(p: &TrendPoint) -> String {
    let run = if p.job_id.is_empty() {
        "this run".to_string()
    } else {
        format!("run {}", p.job_id.chars().take(12).collect::<String>())
    };
    let when = chrono::DateTime::from_timestamp_millis(p.created_unix_ms)
        .filter(|_| p.created_unix_ms > 0)
        .map(|t| format!(" ({})", t.format("%Y-%m-%d %H:%M")))
        .unwrap_or_default();
    format!("{run}{when}: {:+.1}% (p {:.1e})", p.relative * 100.0, p.p)
}
