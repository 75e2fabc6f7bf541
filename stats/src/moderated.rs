//! Moderated variances (empirical Bayes, Smyth 2004, "Linear models and empirical Bayes
//! methods for assessing differential expression in microarray experiments"): a job measures
//! many levels with 2–3 repeats each, and each level's own variance estimate has one or two
//! degrees of freedom: a t-test on it is calibrated but nearly powerless (its t quantile at one
//! degree of freedom is 12.7). The levels' log-scale spreads are alike, so their variances are
//! read as draws around a common prior (scaled inverse χ² with d0 degrees of freedom around
//! s0²), fitted to the sample variances by the method of moments on their logs. Each level's
//! posterior variance (d0·s0² + d·s²) / (d0 + d) then has d0 + d degrees of freedom, capped at
//! the pooled degrees of freedom of every feature (as limma does): a t-test on it is exact
//! when the prior holds, and reverts to the level's own t-test when the spreads disagree (d0
//! is then estimated small).
//!
//! With fewer than [`MIN_FEATURES`] features no prior is fitted: nothing to borrow from.
//!
//! Earlier jobs (`compare --history`) measured the same comparison: the prior is fitted to
//! their contrasts' variances (`crate::decide::compare_family_with_history`), which makes it
//! independent of the variances it moderates and lets a job of one or two levels borrow at
//! all. They are used only when this job's spread is not significantly larger than theirs
//! ([`history_agrees`]): a history quieter than the job would shrink its variances below the
//! truth and make its tests anti-conservative, while a noisier history only costs power.

use serde::Serialize;

/// How many standard errors above its estimate the prior's spread of log variances is read
/// (see [`fit_prior`]); chosen by the calibration suite (`stats/tests/calibration`): at 0.75
/// an A/A job of 8 or 16 levels whose spreads differ by up to 5× keeps its family-wise error
/// at or below 5.9% at 2, 3 and 5 repeats (0 gave up to 7.1%, 0.5 up to 6.1%). The price is
/// borrowing: with 1 or 2 degrees of freedom per level the moment estimate is so noisy that
/// even identical spreads give d0 of only 1–3 (the t-test's degrees of freedom grow from
/// 1–2 to 2–5, not to the pooled 8–16).
pub const HETEROGENEITY_MARGIN: f64 = 0.75;

/// The fewest features (variances) a prior is fitted to.
pub const MIN_FEATURES: usize = 3;

/// The one-sided level of the F-test that keeps a history out of the prior when the job's own
/// pooled variance is larger than the history's ([`history_agrees`]). Measured in the
/// calibration suite (`stats/tests/calibration/history.rs`): with 3 earlier jobs 0.7× as
/// noisy as the job, an 8-level A/A job at 3 repeats makes 6.5% false calls with no gate, 3.6%
/// at 0.05 and 3.1% at 0.10. A one-level job's own variance has 1-2 degrees of freedom, too
/// few for the gate to see much: there a quieter history costs the error rates
/// docs/tuning.md states (5.8-6.2% at 0.7×, 7.8-8.0% at 0.5×).
pub const HISTORY_GATE: f64 = 0.10;

/// Whether a history's variances may join this job's prior: `own` and `past` are pooled
/// variances with their degrees of freedom, (variance, df). False when the job's is larger at
/// the one-sided level [`HISTORY_GATE`] (F-test), or when either has no degrees of freedom.
pub fn history_agrees(own: (f64, f64), past: (f64, f64)) -> bool {
    let ((v1, d1), (v2, d2)) = (own, past);
    if !(d1 > 0.0 && d2 > 0.0 && v1.is_finite() && v2.is_finite() && v1 >= 0.0) || v2 <= 0.0 {
        return false;
    }
    let f = v1 / v2;
    // P(F(d1, d2) > f) = I_{d2 / (d2 + d1 f)}(d2/2, d1/2).
    let p = crate::dist::inc_beta(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f));
    p > HISTORY_GATE
}

/// The pooled variance and degrees of freedom of (variance, df) pairs; None without degrees of
/// freedom.
pub fn pooled(vars: &[(f64, f64)]) -> Option<(f64, f64)> {
    let used = vars
        .iter()
        .filter(|(v, d)| v.is_finite() && *v >= 0.0 && d.is_finite() && *d > 0.0);
    let (sum, df) = used.fold((0.0, 0.0), |(s, n), (v, d)| (s + v * d, n + d));
    (df > 0.0).then(|| (sum / df, df))
}

/// The prior of the variances: d0 degrees of freedom around s0² (d0 may be infinite: the
/// variances vary no more than their own sampling explains).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prior {
    pub d0: f64,
    pub s0_sq: f64,
    /// Features it was fitted to, and the sum of their degrees of freedom (the cap of a
    /// posterior's degrees of freedom).
    pub features: usize,
    pub df_pooled: f64,
}

/// A variance and its degrees of freedom after moderation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Posterior {
    pub var: f64,
    pub df: f64,
}

/// Fits the prior to sample variances given as (variance, degrees of freedom). Features with
/// no degrees of freedom or a variance that is not positive and finite are left out; None
/// with fewer than [`MIN_FEATURES`] left.
pub fn fit_prior(vars: &[(f64, f64)]) -> Option<Prior> {
    let used: Vec<(f64, f64)> = vars
        .iter()
        .copied()
        .filter(|(v, d)| v.is_finite() && *v > 0.0 && d.is_finite() && *d > 0.0)
        .collect();
    let g = used.len();
    if g < MIN_FEATURES {
        return None;
    }
    // e_g = log s²_g − ψ(d_g/2) + log(d_g/2) has mean log s0² − ψ(d0/2) + log(d0/2) and
    // variance ψ'(d_g/2) + ψ'(d0/2).
    let e: Vec<f64> = used
        .iter()
        .map(|(v, d)| v.ln() - digamma(d / 2.0) + (d / 2.0).ln())
        .collect();
    let mean = e.iter().sum::<f64>() / g as f64;
    let excess = used
        .iter()
        .zip(&e)
        .map(|((_, d), x)| (x - mean).powi(2) * g as f64 / (g - 1) as f64 - trigamma(d / 2.0))
        .sum::<f64>()
        / g as f64;
    let df_pooled: f64 = used.iter().map(|(_, d)| d).sum();
    // The moment estimate of ψ'(d0/2) is itself noisy (with 4-8 features of 1-2 degrees of
    // freedom its standard error is larger than the heterogeneity it must detect): it is
    // read HETEROGENEITY_MARGIN standard errors (under equal variances) above the estimate,
    // so that spreads that differ between levels are less often taken for a common one.
    let se0 = (used
        .iter()
        .map(|(_, d)| {
            2.0 * trigamma(d / 2.0).powi(2) / (g - 1) as f64 + pentagamma(d / 2.0) / g as f64
        })
        .sum::<f64>()
        / g as f64)
        .sqrt();
    let excess = excess.max(0.0) + HETEROGENEITY_MARGIN * se0;
    let (d0, s0_sq) = if excess > 0.0 {
        let d0 = 2.0 * trigamma_inverse(excess);
        (d0, (mean + digamma(d0 / 2.0) - (d0 / 2.0).ln()).exp())
    } else {
        // The spreads vary no more than sampling explains: one common variance, estimated by
        // the pooled (arithmetic) variance, which is exactly σ²·χ²/df under that assumption
        // (the bias-corrected geometric mean of the logs is not, and is noisier at df 1).
        let pooled = used.iter().map(|(v, d)| v * d).sum::<f64>() / df_pooled;
        (f64::INFINITY, pooled)
    };
    Some(Prior {
        d0,
        s0_sq,
        features: g,
        df_pooled,
    })
}

impl Prior {
    /// The posterior of a feature's variance `var` on `df` degrees of freedom.
    pub fn posterior(&self, var: f64, df: f64) -> Posterior {
        let df_total = (self.d0 + df).min(self.df_pooled);
        if df == 0.0 {
            return Posterior {
                var: self.s0_sq,
                df: df_total,
            };
        }
        let v = if self.d0.is_infinite() {
            self.s0_sq
        } else {
            (self.d0 * self.s0_sq + df * var) / (self.d0 + df)
        };
        Posterior {
            var: v,
            df: df_total,
        }
    }
}

/// ψ(x), the digamma function, for x > 0: the recurrence up to x ≥ 12, then the asymptotic
/// series (error below 1e-12 there).
pub fn digamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 12.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let x2 = 1.0 / (x * x);
    acc + x.ln()
        - 0.5 / x
        - x2 * (1.0 / 12.0 - x2 * (1.0 / 120.0 - x2 * (1.0 / 252.0 - x2 * (1.0 / 240.0))))
}

/// ψ'(x), the trigamma function, for x > 0.
pub fn trigamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 12.0 {
        acc += 1.0 / (x * x);
        x += 1.0;
    }
    let x2 = 1.0 / (x * x);
    acc + 1.0 / x
        + x2 / 2.0
        + x2 / x * (1.0 / 6.0 - x2 * (1.0 / 30.0 - x2 * (1.0 / 42.0 - x2 / 30.0)))
}

/// ψ'''(x), the fourth cumulant of a log-gamma variable (the spread of the estimate above).
fn pentagamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 12.0 {
        acc += 6.0 / x.powi(4);
        x += 1.0;
    }
    let x2 = 1.0 / (x * x);
    acc + x2 / x * (2.0 + 3.0 / x + x2 * (2.0 - x2 * (1.0 - x2 * (4.0 / 3.0))))
}

/// ψ''(x), for Newton's steps in [`trigamma_inverse`].
fn tetragamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 12.0 {
        acc -= 2.0 / (x * x * x);
        x += 1.0;
    }
    let x2 = 1.0 / (x * x);
    acc - x2 - x2 / x - x2 * x2 * (0.5 - x2 * (1.0 / 6.0 - x2 * (1.0 / 6.0 - x2 * 0.3)))
}

/// The x > 0 with ψ'(x) = y (y > 0), by Newton's method on 1/ψ' (Smyth 2004, appendix),
/// which is nearly linear and converges from the start below.
pub fn trigamma_inverse(y: f64) -> f64 {
    if y > 1e7 {
        return 1.0 / y.sqrt();
    }
    if y < 1e-6 {
        return 1.0 / y;
    }
    let mut x = 0.5 + 1.0 / y;
    for _ in 0..50 {
        let tri = trigamma(x);
        let step = tri * (1.0 - tri / y) / tetragamma(x);
        x += step;
        if -step / x < 1e-10 {
            break;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_is_refused_only_when_the_job_is_significantly_noisier() {
        // F(2, 2) has P(F > f) = 1 / (1 + f): the gate at 0.10 is at f = 9.
        assert!(history_agrees((8.0, 2.0), (1.0, 2.0)));
        assert!(!history_agrees((10.0, 2.0), (1.0, 2.0)));
        // A noisier history always agrees; no degrees of freedom never does.
        assert!(history_agrees((1.0, 2.0), (50.0, 2.0)));
        assert!(!history_agrees((1.0, 0.0), (1.0, 2.0)));
        assert!(!history_agrees((1.0, 2.0), (0.0, 2.0)));
        assert_eq!(pooled(&[(1.0, 1.0), (4.0, 3.0)]), Some((3.25, 4.0)));
        assert_eq!(pooled(&[(1.0, 0.0)]), None);
    }

    #[test]
    fn special_functions_match_known_values() {
        // ψ(1) = −γ, ψ(1/2) = −γ − 2 ln 2, ψ'(1) = π²/6, ψ'(1/2) = π²/2, ψ''(1) = −2 ζ(3).
        let gamma = 0.577_215_664_901_532_9;
        assert!((digamma(1.0) + gamma).abs() < 1e-12);
        assert!((digamma(0.5) + gamma + 2.0 * 2f64.ln()).abs() < 1e-12);
        let pi2 = std::f64::consts::PI.powi(2);
        assert!((trigamma(1.0) - pi2 / 6.0).abs() < 1e-12);
        assert!((trigamma(0.5) - pi2 / 2.0).abs() < 1e-12);
        assert!((tetragamma(1.0) + 2.0 * 1.202_056_903_159_594).abs() < 1e-11);
        for x in [0.05, 0.5, 1.0, 3.7, 40.0, 5e4] {
            let y = trigamma(x);
            assert!((trigamma_inverse(y) - x).abs() < 1e-8 * x.max(1.0), "{x}");
        }
    }

    #[test]
    fn equal_variances_give_a_heavy_prior_capped_at_the_pooled_df() {
        // Sample variances with no spread at all: the prior weighs more than one feature's own
        // degrees of freedom (the margin keeps d0 finite), a far-off variance is pulled
        // towards the common one, and the posterior's degrees of freedom are capped by the
        // pooled ones.
        let p = fit_prior(&[(1.0, 2.0); 8]).unwrap();
        assert!(p.d0.is_finite() && p.d0 > 2.0, "{p:?}");
        let post = p.posterior(4.0, 2.0);
        assert!((post.df - (p.d0 + 2.0)).abs() < 1e-12, "{post:?}");
        assert!(post.var > 1.5 && post.var < 3.0, "{post:?}");
        let capped = fit_prior(&[(1.0, 1.0); 3]).unwrap();
        assert_eq!(
            capped.posterior(1.0, 1.0).df,
            capped.df_pooled.min(capped.d0 + 1.0)
        );
    }

    #[test]
    fn wildly_different_variances_give_a_small_prior_weight() {
        let p = fit_prior(&[
            (1e-6, 2.0),
            (1.0, 2.0),
            (1e-3, 2.0),
            (10.0, 2.0),
            (1e-5, 2.0),
        ])
        .unwrap();
        assert!(p.d0 < 1.0, "{p:?}");
        let post = p.posterior(10.0, 2.0);
        assert!(post.var > 5.0 && post.df < 3.0, "{post:?}");
        assert!(fit_prior(&[(1.0, 2.0), (2.0, 2.0)]).is_none());
        assert!(fit_prior(&[(1.0, 2.0), (0.0, 2.0), (2.0, 0.0), (1.0, 1.0)]).is_none());
    }
}
