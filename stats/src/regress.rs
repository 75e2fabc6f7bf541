//! A regression verdict's statistics: the change of a metric between a baseline run and the
//! current run, with an interval that keeps its coverage at small n, and the variance between
//! runs learned from the suite's history.
//!
//! Why not the repeats alone: the repeats of one job share a host, a driver, a thermal state
//! and a model load, so their spread says nothing of how much two *runs* differ with no change
//! at all (CI saw 4.5%). A one-way random-effects model of the history (runs as groups, repeats
//! within) separates the two: σ²_between from the spread of run means beyond what the repeats
//! explain, σ²_within from the repeats. The difference of two runs' log means then has variance
//! 2σ²_between + σ²_within (1/n_base + 1/n_cur), and Satterthwaite gives its degrees of
//! freedom. Without a usable history the test is Welch's on the two runs' repeats (and says so).
//!
//! Minimum n: two repeats per side ([`MIN_REPEATS`]), or one with a history of three or more
//! runs (whose spread stands in). Otherwise no spread was measured and no interval is given;
//! a single value is never printed as an interval.

use serde::Serialize;

use crate::dist::{normal_cdf, t_cdf, t_quantile, t_sf};
use crate::two_sample::{Sample, satterthwaite, welch};
use crate::{logs, mean_var};

/// The fewest repeats per side for an interval.
pub const MIN_REPEATS: usize = 2;

/// The variance components of a metric's log values over a suite's history.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunVariance {
    /// σ² between runs (of a run's true mean), on the log scale; 0 when the run means vary no
    /// more than their repeats explain.
    pub between: f64,
    /// σ² within a run (between repeats), pooled over the runs that had two or more.
    pub within: f64,
    /// Runs used.
    pub runs: usize,
    pub df_between: f64,
    pub df_within: f64,
    /// The mean square between runs, MSB = n₀σ²_between + σ²_within in expectation.
    pub msb: f64,
    /// The effective repeats per run (n₀ of an unbalanced one-way layout).
    pub n0: f64,
}

/// Estimates the variance between runs from a history: each element is one run's values (its
/// repeats). Runs without values are skipped; None with fewer than three runs (two run means
/// give one degree of freedom: too little to learn a variance from).
pub fn run_variance(runs: &[Vec<f64>]) -> Option<RunVariance> {
    let groups: Vec<Vec<f64>> = runs
        .iter()
        .filter_map(|r| logs(r))
        .filter(|r| !r.is_empty())
        .collect();
    let k = groups.len();
    if k < 3 {
        return None;
    }
    let n_total: usize = groups.iter().map(Vec::len).sum();
    let grand = groups.iter().flatten().sum::<f64>() / n_total as f64;
    let mut ssb = 0.0;
    let mut ssw = 0.0;
    for g in &groups {
        let (m, v) = mean_var(g);
        ssb += g.len() as f64 * (m - grand).powi(2);
        ssw += v * (g.len() - 1) as f64;
    }
    let df_b = (k - 1) as f64;
    let df_w = (n_total - k) as f64;
    let msb = ssb / df_b;
    if df_w < 1.0 {
        // One value per run: the spread of run values is all there is; count it as between.
        return Some(RunVariance {
            between: msb,
            within: 0.0,
            runs: k,
            df_between: df_b,
            df_within: 0.0,
            msb,
            n0: 1.0,
        });
    }
    let msw = ssw / df_w;
    // n₀: the effective repeats per run of an unbalanced one-way layout.
    let sum_sq: f64 = groups.iter().map(|g| (g.len() * g.len()) as f64).sum();
    let n0 = (n_total as f64 - sum_sq / n_total as f64) / df_b;
    Some(RunVariance {
        between: ((msb - msw) / n0).max(0.0),
        within: msw,
        runs: k,
        df_between: df_b,
        df_within: df_w,
        msb,
        n0,
    })
}

/// Which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Direction {
    HigherIsBetter,
    LowerIsBetter,
}

/// The change of the current run against the baseline run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Change {
    /// A side has fewer than [`MIN_REPEATS`] values: the point change only.
    NoSpread {
        relative: f64,
    },
    Measured(Interval),
}

impl Change {
    /// The relative change of the geometric means (current / baseline − 1).
    pub fn relative(&self) -> f64 {
        match self {
            Change::NoSpread { relative } => *relative,
            Change::Measured(i) => i.relative,
        }
    }
}

/// A measured change with its interval and one-sided tests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// current / baseline − 1 (geometric means).
    pub relative: f64,
    /// The two-sided `confidence` interval of `relative`.
    pub low: f64,
    pub high: f64,
    pub confidence: f64,
    pub df: f64,
    /// One-sided p-value of "worse than the baseline" (H0: not worse).
    pub p_worse: f64,
    /// One-sided p-value of "no worse than the tolerance" (H0: worse by the tolerance or
    /// more): small means the pass is sure, not only that no fail was found.
    pub p_within_tolerance: f64,
    /// Whether the between-run variance of the history was part of the error.
    pub between_runs: bool,
}

/// The log of the relative change at which a metric is `tolerance` worse.
fn tolerance_log(direction: Direction, tolerance: f64) -> f64 {
    match direction {
        Direction::HigherIsBetter => -(1.0 - tolerance.min(0.999_999)).ln(),
        Direction::LowerIsBetter => (1.0 + tolerance).ln(),
    }
}

/// The change of `current` against `baseline` (raw, positive values; one per repeat), with a
/// t interval at `confidence`. `history` adds the between-run variance. None when a side is
/// empty or has a value that is not positive.
pub fn change(
    baseline: &[f64],
    current: &[f64],
    history: Option<&RunVariance>,
    direction: Direction,
    tolerance: f64,
    confidence: f64,
) -> Option<Change> {
    let b = Sample::of(baseline)?;
    let c = Sample::of(current)?;
    let d = c.mean - b.mean;
    // With a history of three or more runs the variance is known from it, and one repeat a
    // side is enough; without one, a side of one repeat measured no spread.
    if (b.n < MIN_REPEATS || c.n < MIN_REPEATS) && history.is_none() {
        return Some(Change::NoSpread {
            relative: d.exp() - 1.0,
        });
    }
    let (se, df, between_runs) = match history {
        Some(h) => {
            // Pool the within-run variance of the history with both runs' own repeats.
            let (ssb, ssc) = (b.var * (b.n - 1) as f64, c.var * (c.n - 1) as f64);
            let df_w = h.df_within + (b.n - 1 + c.n - 1) as f64;
            // No run of the history, nor either side, had two repeats: the spread of the run
            // values (in `between`) is all the variance there is.
            let within = if df_w > 0.0 {
                (h.within * h.df_within + ssb + ssc) / df_w
            } else {
                0.0
            };
            let reps = 1.0 / b.n as f64 + 1.0 / c.n as f64;
            if h.between > 0.0 && h.df_within > 0.0 {
                // V = 2σ²_b + σ²_w·reps with σ²_b = (MSB − MSW)/n₀, written as a sum of the
                // two mean squares so that Satterthwaite sees their own degrees of freedom
                // (in a balanced history with n₀ = n it is exactly 2·MSB/n₀, df = runs − 1).
                let a = 2.0 / h.n0;
                let w = reps - 2.0 / h.n0;
                let v = (a * h.msb + w * within).max(within * reps);
                let df = satterthwaite(&[(a * h.msb, h.df_between), (w * within, df_w)]);
                (v.sqrt(), df, true)
            } else if h.df_within > 0.0 {
                // The runs vary no more than their repeats explain.
                ((within * reps).sqrt(), df_w, true)
            } else {
                // One value per stored run: their spread is the run-to-run variance.
                let v = 2.0 * h.between + within * reps;
                let df = satterthwaite(&[(2.0 * h.between, h.df_between), (within * reps, df_w)]);
                (v.sqrt(), df, true)
            }
        }
        None => {
            let w = welch(&c, &b)?;
            (w.se, w.df, false)
        }
    };
    let worse = match direction {
        Direction::HigherIsBetter => -d,
        Direction::LowerIsBetter => d,
    };
    let (p_worse, p_within) = if se > 0.0 {
        let l = tolerance_log(direction, tolerance);
        (t_sf(worse / se, df), t_cdf((worse - l) / se, df))
    } else {
        let l = tolerance_log(direction, tolerance);
        (
            if worse > 0.0 { 0.0 } else { 1.0 },
            if worse < l { 0.0 } else { 1.0 },
        )
    };
    let q = t_quantile(0.5 + confidence / 2.0, df);
    Some(Change::Measured(Interval {
        relative: d.exp() - 1.0,
        low: (d - q * se).exp() - 1.0,
        high: (d + q * se).exp() - 1.0,
        confidence,
        df,
        p_worse,
        p_within_tolerance: p_within,
        between_runs,
    }))
}

/// A rise of the error rate (failed / (completed + failed)) between two runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateRise {
    pub baseline_rate: f64,
    pub current_rate: f64,
    /// current − baseline (absolute, 0.02 = two points).
    pub rise: f64,
    /// One-sided p-value of "the current rate is higher" (two-proportion z-test, pooled).
    pub p: f64,
}

/// The error-rate rise from `(failed, total)` counts; None when a side made no requests.
pub fn error_rate_rise(baseline: (u64, u64), current: (u64, u64)) -> Option<RateRise> {
    let (bf, bt) = baseline;
    let (cf, ct) = current;
    if bt == 0 || ct == 0 {
        return None;
    }
    let (pb, pc) = (bf as f64 / bt as f64, cf as f64 / ct as f64);
    let pooled = (bf + cf) as f64 / (bt + ct) as f64;
    let se = (pooled * (1.0 - pooled) * (1.0 / bt as f64 + 1.0 / ct as f64)).sqrt();
    let p = if se > 0.0 {
        1.0 - normal_cdf((pc - pb) / se)
    } else {
        1.0
    };
    Some(RateRise {
        baseline_rate: pb,
        current_rate: pc,
        rise: pc - pb,
        p,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_slowdown_has_an_interval_below_zero() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5];
        let cur = [90.0, 91.0, 89.5, 90.5, 90.2];
        let Some(Change::Measured(i)) =
            change(&base, &cur, None, Direction::HigherIsBetter, 0.05, 0.95)
        else {
            panic!("measured")
        };
        assert!((i.relative + 0.096).abs() < 0.01, "{i:?}");
        assert!(
            i.high < 0.0 && i.low < i.relative && i.relative < i.high,
            "{i:?}"
        );
        assert!(i.p_worse < 1e-4 && !i.between_runs);
        // 9.6% worse is not within a 5% tolerance.
        assert!(i.p_within_tolerance > 0.5);
    }

    #[test]
    fn noise_alone_has_an_interval_around_zero_and_a_sure_pass() {
        let base = [100.0, 103.0, 97.0, 101.0, 99.0];
        let cur = [102.0, 98.0, 100.0, 97.5, 101.5];
        let Some(Change::Measured(i)) =
            change(&base, &cur, None, Direction::HigherIsBetter, 0.05, 0.95)
        else {
            panic!("measured")
        };
        assert!(i.low < 0.0 && i.high > 0.0, "{i:?}");
        assert!(i.p_worse > 0.3 && i.p_within_tolerance < 0.01, "{i:?}");
    }

    #[test]
    fn one_repeat_is_a_point_not_an_interval() {
        let c = change(
            &[100.0],
            &[90.0, 91.0],
            None,
            Direction::HigherIsBetter,
            0.05,
            0.95,
        );
        assert!(
            matches!(c, Some(Change::NoSpread { relative }) if (relative + 0.095).abs() < 0.01)
        );
        assert!(change(&[], &[1.0], None, Direction::HigherIsBetter, 0.05, 0.95).is_none());
    }

    #[test]
    fn lower_is_better_reads_a_rise_as_worse() {
        let base = [10.0, 10.1, 9.9];
        let cur = [12.0, 12.1, 11.9];
        let Some(Change::Measured(i)) =
            change(&base, &cur, None, Direction::LowerIsBetter, 0.05, 0.95)
        else {
            panic!("measured")
        };
        assert!(i.p_worse < 0.001 && i.relative > 0.19, "{i:?}");
    }

    #[test]
    fn between_run_variance_is_separated_from_the_repeats() {
        // Run means 0.9, 1.0, 1.1, 1.0 (x 100) with tight repeats: most variance is between.
        let runs: Vec<Vec<f64>> = [90.0, 100.0, 110.0, 100.0]
            .iter()
            .map(|m| vec![m * 0.999, *m, m * 1.001])
            .collect();
        let v = run_variance(&runs).unwrap();
        assert!(v.between > 50.0 * v.within, "{v:?}");
        assert_eq!((v.runs, v.df_between, v.df_within), (4, 3.0, 8.0));
        // A 5% drop is inside that between-run noise once the history is used.
        let base = [100.0, 100.1, 99.9];
        let cur = [95.0, 95.1, 94.9];
        let alone = change(&base, &cur, None, Direction::HigherIsBetter, 0.0, 0.95).unwrap();
        let with = change(&base, &cur, Some(&v), Direction::HigherIsBetter, 0.0, 0.95).unwrap();
        let (Change::Measured(a), Change::Measured(w)) = (alone, with) else {
            panic!("measured")
        };
        assert!(a.p_worse < 1e-4 && w.p_worse > 0.1, "{a:?} {w:?}");
        assert!(w.between_runs && w.high - w.low > 5.0 * (a.high - a.low));
        assert!(run_variance(&runs[..2]).is_none());
    }

    #[test]
    fn error_rate_rise_is_tested_on_counts() {
        let r = error_rate_rise((2, 1000), (40, 1000)).unwrap();
        assert!((r.rise - 0.038).abs() < 1e-12 && r.p < 1e-6, "{r:?}");
        let same = error_rate_rise((5, 1000), (6, 1000)).unwrap();
        assert!(same.p > 0.3, "{same:?}");
        let none = error_rate_rise((0, 100), (0, 100)).unwrap();
        assert_eq!(none.p, 1.0);
        assert!(error_rate_rise((0, 0), (1, 10)).is_none());
    }
}
