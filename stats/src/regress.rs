//! Regression verdicts: a suite run's checks against the baseline run, with error rates that
//! hold at every history length.
//!
//! Why the repeats alone cannot judge a run: the repeats of one job share a host, a driver, a
//! thermal state and a model load, so their spread says nothing of how much two *runs* differ
//! with no change at all (CI saw 4.5%). What a check's verdict needs is the variance of a
//! run's mean, run to run. The stored history gives it directly: the spread of the stored
//! runs' means (log scale) estimates σ²_run = σ²_between + σ²_within / n with K − 1 degrees of
//! freedom for K runs, with no subtraction that could come out negative (a truncated estimate
//! of σ²_between left the within-run spread alone in charge and cried wolf in new suites).
//! The checks of a suite with the same metric share a prior for it (`crate::moderated`), so a
//! young suite borrows strength across its levels and configs.
//!
//! - With fewer than [`MIN_HISTORY_RUNS`] stored runs no run-to-run variance exists: the check
//!   says "baseline forming" and passes; its error rate is 0 by construction.
//! - The tolerance is tested, not compared with the point estimate: a check regresses when
//!   the one-sided test of H0 "worse by at most the tolerance" rejects at alpha after Holm's
//!   correction over the suite. A true slowdown of exactly the tolerance then fails at most
//!   alpha of suites; a smaller one less often.
//! - The interval printed is the one the test implies: two-sided at 1 − 2·(Holm's level for
//!   this check), so its worse end lies beyond the tolerance exactly when the check regresses.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::dist::{normal_cdf, t_quantile, t_sf};
use crate::moderated::{Prior, fit_prior};
use crate::multiple::{holm, holm_local_level};
use crate::{logs, mean_var};

/// The one-sided level of the drift rule (a drift beyond the tolerance); its error rate over
/// the life of a flat history is measured by the calibration suite (docs/tuning.md).
pub const DRIFT_ALPHA: f64 = 0.01;

/// Stored runs with a value needed before a check can regress (two run means give the first
/// degree of freedom of the run-to-run variance).
pub const MIN_HISTORY_RUNS: usize = 2;

/// Which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Direction {
    HigherIsBetter,
    LowerIsBetter,
}

/// The log of the relative change at which a metric is `tolerance` worse (positive).
pub(crate) fn tolerance_log(direction: Direction, tolerance: f64) -> f64 {
    match direction {
        Direction::HigherIsBetter => -(1.0 - tolerance.min(0.999_999)).ln(),
        Direction::LowerIsBetter => (1.0 + tolerance).ln(),
    }
}

/// One check of a suite: a metric at a level of a config.
#[derive(Debug, Clone, Copy)]
pub struct CheckInput<'a> {
    /// The baseline run's values (one per repeat) and the current run's.
    pub baseline: &'a [f64],
    pub current: &'a [f64],
    /// Every stored run's values of this check, the baseline's run among them (the current
    /// run not: it may be the change).
    pub history: &'a [Vec<f64>],
    pub direction: Direction,
    /// Relative (0.05 = 5% worse allowed).
    pub tolerance: f64,
    /// Checks of one group share a variance prior (the suite passes the metric).
    pub group: u32,
}

/// What a check's test found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tested {
    /// current / baseline − 1 (geometric means).
    pub relative: f64,
    /// The interval of `relative` at `confidence` (see the module docs).
    pub low: f64,
    pub high: f64,
    pub confidence: f64,
    /// The run-to-run variance used (log scale) and its degrees of freedom.
    pub var: f64,
    pub df: f64,
    /// Stored runs it was learned from, and the prior's d0 when it was moderated.
    pub runs: usize,
    pub prior_d0: Option<f64>,
    /// One-sided p of "worse than the tolerance", and Holm-adjusted over the suite.
    pub p_beyond: f64,
    pub p_adjusted: f64,
    pub regressed: bool,
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Outcome {
    /// A side has no value, or a value is not positive.
    NoValue,
    /// Too little history for a run-to-run variance: `runs` of `needed` stored runs.
    Forming {
        relative: f64,
        runs: usize,
        needed: usize,
    },
    Tested(Tested),
}

/// The statistic of one check before the suite's correction.
struct Stat {
    diff: f64,
    worse: f64,
    limit: f64,
    var: f64,
    df: f64,
    runs: usize,
    prior: Option<Prior>,
}

fn run_means(history: &[Vec<f64>]) -> Vec<f64> {
    history
        .iter()
        .filter_map(|r| logs(r))
        .filter(|r| !r.is_empty())
        .map(|r| mean_var(&r).0)
        .collect()
}

/// Judges a suite's checks at `alpha`, with `others` (one-sided p-values of checks tested
/// elsewhere, e.g. error-rate rises) in the same Holm family; returns the checks' outcomes
/// and the others' adjusted p-values. `stated` is a prior the suite states for the run-to-run
/// variance (its `run_spread`): it replaces the fitted one, and a check with fewer than
/// [`MIN_HISTORY_RUNS`] stored runs is then tested on it alone instead of forming.
pub fn judge(
    checks: &[CheckInput<'_>],
    others: &[f64],
    stated: Option<Prior>,
    alpha: f64,
) -> (Vec<Outcome>, Vec<f64>) {
    // Each check's points and its run-to-run variance before moderation.
    // (difference of log means, stored runs' log means, the runs' own variance floor)
    let raw: Vec<Option<(f64, Vec<f64>, f64)>> = checks
        .iter()
        .map(|c| {
            let (b, cur) = (logs(c.baseline)?, logs(c.current)?);
            if b.is_empty() || cur.is_empty() {
                return None;
            }
            // The two runs' own repeats give a floor for their difference's variance: a run
            // noisier than the history is not judged by the history's calm.
            let ((mb, vb), (mc, vc)) = (mean_var(&b), mean_var(&cur));
            let floor = vb / b.len() as f64 + vc / cur.len() as f64;
            Some((mc - mb, run_means(c.history), floor))
        })
        .collect();
    // Each metric group's fitted prior, fitted once (none when the suite states its own).
    let mut fitted: BTreeMap<u32, Option<Prior>> = BTreeMap::new();
    if stated.is_none() {
        for group in checks.iter().map(|c| c.group) {
            fitted.entry(group).or_insert_with(|| {
                let vars: Vec<(f64, f64)> = checks
                    .iter()
                    .zip(&raw)
                    .filter(|(c, r)| c.group == group && r.as_ref().is_some_and(|r| r.1.len() >= 2))
                    .filter_map(|(_, r)| r.as_ref())
                    .map(|(_, means, _)| (mean_var(means).1, (means.len() - 1) as f64))
                    .collect();
                fit_prior(&vars)
            });
        }
    }
    let stats: Vec<Option<Stat>> = checks
        .iter()
        .zip(&raw)
        .map(|(c, r)| {
            let (diff, means, floor) = r.as_ref()?;
            if means.len() < MIN_HISTORY_RUNS && stated.is_none() {
                return None;
            }
            let (_, s2) = mean_var(means);
            let df = means.len().saturating_sub(1) as f64;
            let (var, df, prior) = match (stated, fitted.get(&c.group).copied().flatten()) {
                // The suite's own statement: a plain posterior (its error rate is right when
                // the stated spread is, conservative when it is larger).
                (Some(p), _) => {
                    let post = p.posterior(s2, df);
                    (post.var, post.df, Some(p))
                }
                // The fitted prior, never below the check's own spread (the levels' spreads
                // may differ more than a few features can show).
                (None, Some(p)) => {
                    let post = p.posterior(s2, df);
                    (post.var.max(s2), post.df, Some(p))
                }
                (None, None) => (s2, df, None),
            };
            let worse = match c.direction {
                Direction::HigherIsBetter => -diff,
                Direction::LowerIsBetter => *diff,
            };
            Some(Stat {
                diff: *diff,
                worse,
                limit: tolerance_log(c.direction, c.tolerance),
                // Var(current − baseline) = 2·σ²_run, never below the runs' own repeats.
                var: var.max(floor / 2.0),
                df,
                runs: means.len(),
                prior,
            })
        })
        .collect();
    // Current and baseline are two runs: their difference has twice a run mean's variance.
    let se = |s: &Stat| (2.0 * s.var).sqrt();
    let p_of = |s: &Stat| {
        let excess = s.worse - s.limit;
        match se(s) {
            e if e > 0.0 => t_sf(excess / e, s.df),
            _ => f64::from(u8::from(excess <= 0.0)),
        }
    };
    let mut p: Vec<f64> = stats
        .iter()
        .map(|s| s.as_ref().map_or(f64::NAN, p_of))
        .collect();
    p.extend_from_slice(others);
    let adj = holm(&p);
    let m = p.iter().filter(|x| !x.is_nan()).count().max(1);
    let outcomes = raw
        .iter()
        .zip(&stats)
        .enumerate()
        .map(|(i, (r, s))| match (r, s) {
            (None, _) => Outcome::NoValue,
            (Some((diff, means, _)), None) => Outcome::Forming {
                relative: diff.exp() - 1.0,
                runs: means.len(),
                needed: MIN_HISTORY_RUNS,
            },
            (Some(_), Some(s)) => {
                let local = holm_local_level(alpha, p[i], adj[i], m);
                let q = t_quantile(1.0 - local, s.df);
                let e = se(s);
                Outcome::Tested(Tested {
                    relative: s.diff.exp() - 1.0,
                    low: (s.diff - q * e).exp() - 1.0,
                    high: (s.diff + q * e).exp() - 1.0,
                    confidence: 1.0 - 2.0 * local,
                    var: s.var,
                    df: s.df,
                    runs: s.runs,
                    prior_d0: s.prior.map(|p| p.d0),
                    p_beyond: p[i],
                    p_adjusted: adj[i],
                    regressed: adj[i] <= alpha,
                })
            }
        })
        .collect();
    (outcomes, adj[checks.len()..].to_vec())
}

/// A rise of the error rate (failed / (completed + failed)) between two runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateRise {
    pub baseline_rate: f64,
    pub current_rate: f64,
    /// current − baseline (absolute, 0.02 = two points).
    pub rise: f64,
    /// One-sided p-value of "the rise exceeds the tolerance" (z-test on the counts).
    pub p: f64,
}

/// The error-rate rise from `(failed, total)` counts, tested against an absolute `tolerance`
/// (0.01 = one point); None when a side made no requests.
pub fn error_rate_rise(
    baseline: (u64, u64),
    current: (u64, u64),
    tolerance: f64,
) -> Option<RateRise> {
    let (bf, bt) = baseline;
    let (cf, ct) = current;
    if bt == 0 || ct == 0 {
        return None;
    }
    let (pb, pc) = (bf as f64 / bt as f64, cf as f64 / ct as f64);
    let excess = pc - pb - tolerance;
    // At a tolerance of 0 the pooled rate is the null's; beyond it each side's own.
    let se = if tolerance == 0.0 {
        let pooled = (bf + cf) as f64 / (bt + ct) as f64;
        (pooled * (1.0 - pooled) * (1.0 / bt as f64 + 1.0 / ct as f64)).sqrt()
    } else {
        (pb * (1.0 - pb) / bt as f64 + pc * (1.0 - pc) / ct as f64).sqrt()
    };
    let p = if se > 0.0 {
        1.0 - normal_cdf(excess / se)
    } else {
        f64::from(u8::from(excess <= 0.0))
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

    fn check<'a>(base: &'a [f64], cur: &'a [f64], history: &'a [Vec<f64>]) -> CheckInput<'a> {
        CheckInput {
            baseline: base,
            current: cur,
            history,
            direction: Direction::HigherIsBetter,
            tolerance: 0.05,
            group: 0,
        }
    }

    #[test]
    fn a_young_suite_says_its_baseline_is_forming() {
        let base = [100.0, 101.0];
        let history = vec![base.to_vec()];
        let (o, _) = judge(&[check(&base, &[80.0, 81.0], &history)], &[], None, 0.05);
        assert!(
            matches!(o[0], Outcome::Forming { runs: 1, needed: 2, relative } if relative < -0.19),
            "{o:?}"
        );
        let (o, _) = judge(&[check(&[], &[80.0], &history)], &[], None, 0.05);
        assert_eq!(o[0], Outcome::NoValue);
    }

    #[test]
    fn the_tolerance_is_tested_and_the_interval_agrees() {
        // Runs at 100 ± 1%: a 20% drop is beyond a 5% tolerance; a 3% drop is not shown to be.
        let history: Vec<Vec<f64>> = [100.0, 101.0, 99.0, 100.5, 99.5]
            .iter()
            .map(|m| vec![*m])
            .collect();
        let base = [99.5];
        let (o, _) = judge(&[check(&base, &[80.0], &history)], &[], None, 0.05);
        let Outcome::Tested(t) = o[0] else {
            panic!("{o:?}")
        };
        assert!(t.regressed && t.high < -0.05 && t.runs == 5, "{t:?}");
        let (o, _) = judge(&[check(&base, &[96.5], &history)], &[], None, 0.05);
        let Outcome::Tested(t) = o[0] else {
            panic!("{o:?}")
        };
        assert!(!t.regressed && t.high >= -0.05, "{t:?}");
        // Lower is better: a rise is worse.
        let lat: Vec<Vec<f64>> = [10.0, 10.1, 9.9].iter().map(|m| vec![*m]).collect();
        let c = CheckInput {
            direction: Direction::LowerIsBetter,
            ..check(&[10.0], &[13.0], &lat)
        };
        let (o, _) = judge(&[c], &[], None, 0.05);
        assert!(matches!(o[0], Outcome::Tested(t) if t.regressed), "{o:?}");
    }

    #[test]
    fn other_tests_share_the_holm_family() {
        let history: Vec<Vec<f64>> = [100.0, 101.0, 99.0].iter().map(|m| vec![*m]).collect();
        let (_, others) = judge(&[check(&[100.0], &[100.0], &history)], &[0.03], None, 0.05);
        assert!((others[0] - 0.06).abs() < 1e-12, "{others:?}");
    }

    #[test]
    fn error_rate_rise_is_tested_against_its_tolerance() {
        let r = error_rate_rise((2, 1000), (40, 1000), 0.0).unwrap();
        assert!((r.rise - 0.038).abs() < 1e-12 && r.p < 1e-6, "{r:?}");
        let within = error_rate_rise((2, 1000), (40, 1000), 0.05).unwrap();
        assert!(within.p > 0.9, "{within:?}");
        let same = error_rate_rise((5, 1000), (6, 1000), 0.0).unwrap();
        assert!(same.p > 0.3, "{same:?}");
        assert_eq!(error_rate_rise((0, 100), (0, 100), 0.0).unwrap().p, 1.0);
        assert!(error_rate_rise((0, 0), (1, 10), 0.0).is_none());
    }
}
