//! The decisions built from the tests, shared by the controller and the calibration tests (so
//! that what is calibrated is what runs):
//!
//! - [`compare_family`]: a job's comparison, winner against runner-up at every workload ×
//!   level, as the design allows (paired within repeat blocks, two samples, or through a
//!   config two jobs share), variances moderated over the job, a two-sided t, Holm over the
//!   family, and the interval Holm implies; [`compare_family_with_history`] lets earlier jobs'
//!   contrasts join the moderation when their spread agrees with the job's.
//! - [`confirm`]: a tuning search's confirmation round: is the best finalist really ahead of
//!   every other one?
//! - [`regressions`]: a suite's checks, Holm over the one-sided "worse" p-values, and a check
//!   regresses only when it is also worse than its tolerance.

use serde::Serialize;

use crate::contrast::{Contrast, Design};
use crate::dist::{t_quantile, t_two_sided};
use crate::moderated::{MIN_FEATURES, Prior, fit_prior, history_agrees, pooled};
use crate::multiple::{holm, holm_local_level};
use crate::power::detectable_lambda;
use crate::two_sample::{Effect, Sample, effect};

/// The test of one level: winner against runner-up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum LevelTest {
    /// No spread was measured (one block, or one repeat on a side of an unpaired design), or a
    /// value is not positive.
    NoSpread,
    Tested(Tested),
}

/// A tested level: the contrast, the moderated variance it was tested with, and the interval
/// the test implies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tested {
    pub contrast: Contrast,
    /// The variance and degrees of freedom the test used (moderated when `prior_d0` is set).
    pub var: f64,
    pub df: f64,
    /// The prior's degrees of freedom when the variance was moderated (may be infinite).
    pub prior_d0: Option<f64>,
    /// Levels the prior was fitted to.
    pub prior_features: usize,
    /// Of those, earlier jobs' levels ([`compare_family_with_history`]).
    pub prior_history: usize,
    pub se: f64,
    pub t: f64,
    /// exp(diff): the ratio of A's to B's geometric mean (or of their ratios to the reference).
    pub ratio: f64,
    /// The interval of the ratio at the level the Holm procedure tested this comparison at:
    /// it excludes 1 exactly when the level is significant.
    pub low: f64,
    pub high: f64,
    /// That level's confidence (1 − alpha·p / p_adjusted).
    pub confidence: f64,
    /// The level of the first Holm step (alpha / tests), at which [`Tested::mde`] is read.
    pub first_step_alpha: f64,
}

impl Tested {
    /// The ratio as a relative change (0.071 for "7.1% higher").
    pub fn relative(&self) -> f64 {
        self.ratio - 1.0
    }

    /// The relative effect this test detects with 80% power at the first Holm step, with this
    /// standard error and these degrees of freedom (exact noncentral t); None without spread.
    /// Computed on demand: it integrates, and Monte Carlo runs of the test need none.
    ///
    /// The standard error is an estimate, below the true one more often than not (the median
    /// of χ²_ν/ν is under 1), which would make the printed effect too small for the power it
    /// claims; it is scaled by that median (Wilson–Hilferty), so that the effect printed is
    /// median-unbiased for the one the true spread implies.
    pub fn mde(&self) -> Option<f64> {
        let lambda = detectable_lambda(self.df, self.first_step_alpha, 0.8);
        // The median is taken at the level's own degrees of freedom, not the moderated ones:
        // the test never uses less than the level's own variance, so how far the standard
        // error falls below the true one is that of the level's own estimate (with the
        // moderated degrees of freedom the effect printed had 71-76% power in 8-level jobs;
        // with these, 78-83% in every setting of the power bench).
        let df_var = self.contrast.df.min(self.df);
        let median = (1.0 - 2.0 / (9.0 * df_var)).powi(3).max(0.05);
        let se = self.se / median.sqrt();
        (se > 0.0 && lambda.is_finite()).then(|| (lambda * se).exp() - 1.0)
    }
}

/// A comparison's contrast with the variance and degrees of freedom its test uses, and the
/// prior they came from with the number of earlier jobs' contrasts in it.
type Moderated = (Contrast, f64, f64, Option<(Prior, usize)>);

/// One level's verdict within its family.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LevelCall {
    pub test: LevelTest,
    /// Two-sided p-value (NaN when not tested).
    pub p: f64,
    /// Holm-adjusted over the family (NaN when not tested).
    pub p_adjusted: f64,
    pub significant: bool,
}

/// Degrees of freedom are capped here (a t with more is a normal).
const MAX_DF: f64 = 1e6;

/// Tests every comparison of a job (A is the winner, B the runner-up) at `alpha`: each
/// design's contrast, its variance moderated over the job's contrasts of the same variance
/// family (`crate::moderated`), a two-sided t, Holm over those that could be tested, and the
/// interval at the level Holm tested each at.
pub fn compare_family(designs: &[Design<'_>], alpha: f64) -> Vec<LevelCall> {
    compare_family_with_history(designs, alpha, &[])
}

/// [`compare_family`] with the contrasts of earlier jobs (same comparison, same kind of
/// design) in the prior. Each variance family's prior takes the history's contrasts of that
/// family when the job's own pooled variance is not significantly larger than theirs
/// (`crate::moderated::history_agrees`): with the job's own levels when they are enough for a
/// prior, alone when not; otherwise, or with no history, the prior is [`compare_family`]'s. The history is never tested itself: it lends its spread.
pub fn compare_family_with_history(
    designs: &[Design<'_>],
    alpha: f64,
    history: &[Contrast],
) -> Vec<LevelCall> {
    let contrasts: Vec<Option<Contrast>> = designs.iter().map(Design::contrast).collect();
    let prior_of = |family: u8| {
        let vars_of = |cs: &mut dyn Iterator<Item = &Contrast>| -> Vec<(f64, f64)> {
            cs.filter(|c| c.kind.variance_family() == family)
                .map(|c| (c.var, c.df))
                .collect()
        };
        let vars = vars_of(&mut contrasts.iter().flatten());
        let past = vars_of(&mut history.iter());
        let lent = match (pooled(&vars), pooled(&past)) {
            (Some(own), Some(p)) if history_agrees(own, p) => past.len(),
            _ => 0,
        };
        if lent == 0 {
            return fit_prior(&vars).map(|p| (p, 0));
        }
        // A job with levels enough for a prior of its own (MIN_FEATURES) fits it to its
        // levels and the history's together. One with fewer fits it to the history alone: fitted
        // to one level and three earlier jobs' together, the moment fit has too few features
        // and follows the job's own variance (one-level A/A jobs with a like history made
        // 7.0-7.7% false calls at 2 and 3 repeats; fitted to the history, 3.3-4.8%,
        // `stats/tests/calibration/history.rs`). The job's own degrees of freedom count in the
        // cap either way.
        let own_df: f64 = vars.iter().map(|(_, d)| d).sum();
        let fitted = if vars.len() >= MIN_FEATURES {
            fit_prior(&[vars, past].concat())
        } else {
            fit_prior(&past).map(|mut p| {
                p.df_pooled += own_df;
                p
            })
        };
        fitted.map(|p| (p, lent))
    };
    let priors = [prior_of(0), prior_of(1)];
    // (contrast, variance, df, prior) of each testable comparison.
    let tests: Vec<Option<Moderated>> = contrasts
        .iter()
        .map(|c| {
            let c = (*c)?;
            let prior = priors[c.kind.variance_family() as usize];
            let (var, df) = match prior {
                Some((p, _)) => {
                    let post = p.posterior(c.var, c.df);
                    (post.var.max(c.var), post.df)
                }
                None => (c.var, c.df),
            };
            Some((c, var, df.min(MAX_DF), prior))
        })
        .collect();
    let stat = |c: &Contrast, var: f64, df: f64| {
        let se = (c.scale * var).sqrt();
        let t = if se > 0.0 {
            c.diff / se
        } else if c.diff == 0.0 {
            0.0
        } else {
            c.diff.signum() * f64::INFINITY
        };
        (se, t, t_two_sided(t, df))
    };
    let p: Vec<f64> = tests
        .iter()
        .map(|t| t.map_or(f64::NAN, |(c, v, df, _)| stat(&c, v, df).2))
        .collect();
    let adj = holm(&p);
    let m = p.iter().filter(|x| !x.is_nan()).count().max(1);
    tests
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let Some((c, var, df, prior)) = *t else {
                return LevelCall {
                    test: LevelTest::NoSpread,
                    p: f64::NAN,
                    p_adjusted: f64::NAN,
                    significant: false,
                };
            };
            let (se, tstat, _) = stat(&c, var, df);
            // The level Holm tested this comparison at: its interval excludes 0 exactly when
            // p_adj ≤ alpha.
            let local = holm_local_level(alpha, p[i], adj[i], m);
            let q = t_quantile(1.0 - local / 2.0, df);
            LevelCall {
                test: LevelTest::Tested(Tested {
                    contrast: c,
                    var,
                    df,
                    prior_d0: prior.map(|(p, _)| p.d0),
                    prior_features: prior.map_or(0, |(p, _)| p.features),
                    prior_history: prior.map_or(0, |(_, h)| h),
                    se,
                    t: tstat,
                    ratio: c.diff.exp(),
                    low: (c.diff - q * se).exp(),
                    high: (c.diff + q * se).exp(),
                    confidence: 1.0 - local,
                    first_step_alpha: alpha / m as f64,
                }),
                p: p[i],
                p_adjusted: adj[i],
                significant: adj[i] <= alpha,
            }
        })
        .collect()
}

/// A confirmation round's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Confirmation {
    /// Index of the best finalist (highest geometric mean in this round).
    pub winner: usize,
    /// Index of the second best.
    pub runner_up: Option<usize>,
    /// Winner against runner-up.
    pub effect: Option<Effect>,
    /// The largest Holm-adjusted two-sided p-value of the winner against each other finalist.
    pub p: f64,
    /// 1 − p: see [`confirm`].
    pub confidence: f64,
    /// p ≤ alpha: the winner beats every other finalist.
    pub confirmed: bool,
}

/// The confirmation of a search's finalists from a fresh round (each finalist's values, one per
/// repeat). The winner is confirmed when its two-sided Welch tests against every other
/// finalist, Holm-adjusted, all have p ≤ `alpha`; "confidence" is 1 − the largest of those
/// adjusted p-values. Testing two-sided although the direction was picked from the data keeps
/// the chance of confirming a winner among equals at `alpha` or below. None when no finalist
/// has a value; a lone finalist is its own winner, unconfirmed.
pub fn confirm(finalists: &[&[f64]], alpha: f64) -> Option<Confirmation> {
    let samples: Vec<Option<Sample>> = finalists.iter().map(|f| Sample::of(f)).collect();
    let mut order: Vec<usize> = (0..finalists.len())
        .filter(|&i| samples[i].is_some())
        .collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (samples[a].map(|s| s.mean), samples[b].map(|s| s.mean));
        y.unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&x.unwrap_or(f64::NEG_INFINITY))
            .then(a.cmp(&b))
    });
    let winner = *order.first()?;
    let ws = samples[winner]?;
    let others: Vec<usize> = order[1..].to_vec();
    let effects: Vec<Option<Effect>> = others
        .iter()
        .map(|&o| samples[o].and_then(|s| effect(&ws, &s, alpha)))
        .collect();
    let p: Vec<f64> = effects
        .iter()
        .map(|e| e.map_or(1.0, |e| e.test.p))
        .collect();
    let worst = holm(&p).into_iter().fold(f64::NAN, f64::max);
    let worst = if others.is_empty() { 1.0 } else { worst };
    Some(Confirmation {
        winner,
        runner_up: others.first().copied(),
        effect: effects.first().copied().flatten(),
        p: worst,
        confidence: 1.0 - worst,
        confirmed: !others.is_empty() && worst <= alpha,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_is_corrected_and_one_block_is_left_out() {
        let a: &[(f64, f64)] = &[(110.0, 100.0), (111.0, 101.0), (109.0, 99.0)];
        let flat: &[(f64, f64)] = &[(100.0, 100.0), (102.0, 101.0), (98.0, 99.0)];
        let one: &[(f64, f64)] = &[(120.0, 100.0)];
        let calls = compare_family(
            &[Design::Paired(a), Design::Paired(flat), Design::Paired(one)],
            0.05,
        );
        assert!(calls[0].significant && !calls[1].significant && !calls[2].significant);
        assert_eq!(calls[2].test, LevelTest::NoSpread);
        assert!(calls[2].p.is_nan());
        // Two tests in the family: the smaller p is doubled.
        assert!((calls[0].p_adjusted - (2.0 * calls[0].p).min(1.0)).abs() < 1e-12);
        for c in &calls[..2] {
            let LevelTest::Tested(t) = c.test else {
                panic!("tested")
            };
            // One statement: the interval excludes 1 exactly when the level is significant.
            assert_eq!(t.low > 1.0 || t.high < 1.0, c.significant, "{c:?}");
            assert!(t.mde().is_some_and(|m| m > 0.0));
        }
    }

    #[test]
    fn moderation_borrows_the_spread_of_the_other_levels() {
        // Eight levels of 2 blocks: alone, each difference has 1 degree of freedom; with the
        // prior fitted to all eight, the 15% effect at 1% noise is called.
        let mk = |k: f64| {
            vec![
                (115.0 * (1.0 + 0.01 * k), 100.0),
                (115.0, 100.0 * (1.0 + 0.01 * k)),
            ]
        };
        let data: Vec<Vec<(f64, f64)>> = (0..8).map(|i| mk(0.5 + 0.1 * i as f64)).collect();
        let designs: Vec<Design<'_>> = data.iter().map(|d| Design::Paired(d)).collect();
        let calls = compare_family(&designs, 0.05);
        let LevelTest::Tested(t) = calls[0].test else {
            panic!("tested")
        };
        assert!(t.prior_d0.is_some() && t.df > 2.0, "{t:?}");
        assert!(calls[0].significant, "{calls:?}");
        let alone = compare_family(&designs[..1], 0.05);
        let LevelTest::Tested(a) = alone[0].test else {
            panic!("tested")
        };
        assert!(a.prior_d0.is_none() && a.df == 1.0 && a.df < t.df, "{a:?}");
    }

    #[test]
    fn confirmation_picks_the_best_and_tests_it_against_every_other() {
        let best: &[f64] = &[120.0, 121.0, 119.0];
        let mid: &[f64] = &[100.0, 101.0, 99.0];
        let low: &[f64] = &[90.0, 91.0, 89.0];
        let c = confirm(&[mid, best, low], 0.05).unwrap();
        assert_eq!((c.winner, c.runner_up), (1, Some(0)));
        assert!(c.confirmed && c.confidence > 0.95, "{c:?}");
        let close: &[f64] = &[100.5, 99.0, 101.5];
        let c = confirm(&[mid, close], 0.05).unwrap();
        assert!(!c.confirmed, "{c:?}");
        let alone = confirm(&[mid], 0.05).unwrap();
        assert!(!alone.confirmed && alone.runner_up.is_none());
    }
}
