//! The decisions built from the tests, shared by the controller and the calibration tests (so
//! that what is calibrated is what runs):
//!
//! - [`compare_family`]: a job's comparison, winner against runner-up at every workload ×
//!   level, two-sided Welch on log throughput, Holm over the family.
//! - [`confirm`]: a tuning search's confirmation round: is the best finalist really ahead of
//!   every other one?
//! - [`regressions`]: a suite's checks, Holm over the one-sided "worse" p-values, and a check
//!   regresses only when it is also worse than its tolerance.

use serde::Serialize;

use crate::multiple::holm;
use crate::two_sample::{Effect, Sample, effect, min_detectable_effect, pooled_sd};

/// The test of one level: winner against runner-up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum LevelTest {
    /// A side has one repeat (or a value that is not positive): no spread was measured.
    NoSpread,
    Tested {
        /// Winner against runner-up, interval at the family's alpha (unadjusted).
        effect: Effect,
        /// The minimum detectable effect at 80% power, at the first Holm step's level
        /// (alpha / family size), with these repeats and the pooled spread.
        mde: Option<f64>,
    },
}

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

/// Tests every (winner, runner-up) pair of a job at `alpha`, Holm over those that could be
/// tested. Each pair is the repeats' values (positive, e.g. output tokens/s).
pub fn compare_family(pairs: &[(&[f64], &[f64])], alpha: f64) -> Vec<LevelCall> {
    let tests: Vec<LevelTest> = pairs
        .iter()
        .map(|(w, r)| match (Sample::of(w), Sample::of(r)) {
            (Some(a), Some(b)) => match effect(&a, &b, alpha) {
                Some(e) => LevelTest::Tested {
                    effect: e,
                    mde: None,
                },
                None => LevelTest::NoSpread,
            },
            _ => LevelTest::NoSpread,
        })
        .collect();
    let family = tests
        .iter()
        .filter(|t| matches!(t, LevelTest::Tested { .. }))
        .count()
        .max(1);
    let p: Vec<f64> = tests
        .iter()
        .map(|t| match t {
            LevelTest::Tested { effect, .. } => effect.test.p,
            LevelTest::NoSpread => f64::NAN,
        })
        .collect();
    let adj = holm(&p);
    tests
        .into_iter()
        .zip(pairs)
        .enumerate()
        .map(|(i, (t, (w, r)))| {
            let t = match t {
                LevelTest::Tested { effect, .. } => {
                    let sd = Sample::of(w)
                        .zip(Sample::of(r))
                        .and_then(|(a, b)| pooled_sd(&a, &b));
                    let mde = sd.and_then(|sd| {
                        min_detectable_effect(w.len(), r.len(), sd, alpha / family as f64, 0.8)
                    });
                    LevelTest::Tested { effect, mde }
                }
                other => other,
            };
            LevelCall {
                test: t,
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

/// One check of a suite for [`regressions`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// The point change is worse than the check's tolerance.
    pub beyond_tolerance: bool,
    /// One-sided p-value of "worse" (NaN: not tested, e.g. one repeat).
    pub p_worse: f64,
}

/// Which checks regress: worse than tolerance, and worse at `alpha` after Holm over the
/// suite's tested checks. Returns the adjusted p-values too.
pub fn regressions(checks: &[Check], alpha: f64) -> Vec<(bool, f64)> {
    let p: Vec<f64> = checks.iter().map(|c| c.p_worse).collect();
    holm(&p)
        .into_iter()
        .zip(checks)
        .map(|(adj, c)| (c.beyond_tolerance && adj <= alpha, adj))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_is_corrected_and_one_repeat_is_left_out() {
        let a: &[f64] = &[110.0, 111.0, 109.0];
        let b: &[f64] = &[100.0, 101.0, 99.0];
        let flat_a: &[f64] = &[100.0, 102.0, 98.0];
        let one: &[f64] = &[120.0];
        let calls = compare_family(&[(a, b), (flat_a, b), (one, b)], 0.05);
        assert!(calls[0].significant && !calls[1].significant && !calls[2].significant);
        assert_eq!(calls[2].test, LevelTest::NoSpread);
        assert!(calls[2].p.is_nan());
        // Two tests in the family: the smaller p is doubled.
        assert!((calls[0].p_adjusted - (2.0 * calls[0].p).min(1.0)).abs() < 1e-12);
        let LevelTest::Tested { mde: Some(mde), .. } = calls[0].test else {
            panic!("tested with an MDE")
        };
        assert!(mde > 0.0 && mde < 0.1, "{mde}");
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

    #[test]
    fn a_regression_needs_both_the_tolerance_and_the_test() {
        let r = regressions(
            &[
                Check {
                    beyond_tolerance: true,
                    p_worse: 0.001,
                },
                Check {
                    beyond_tolerance: false,
                    p_worse: 0.0001,
                },
                Check {
                    beyond_tolerance: true,
                    p_worse: 0.2,
                },
                Check {
                    beyond_tolerance: true,
                    p_worse: f64::NAN,
                },
            ],
            0.05,
        );
        let called: Vec<bool> = r.iter().map(|x| x.0).collect();
        assert_eq!(called, [true, false, false, false]);
    }
}
