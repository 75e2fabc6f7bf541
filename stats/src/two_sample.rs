//! Two configs at one load level: Welch's t-test on log values, the effect as a ratio of
//! geometric means with its confidence interval. Used where samples are not paired: the
//! tuning search's confirmation round and the change-point segments.
//!
//! Welch's test does not assume equal variances (two engine configs rarely have the same
//! noise); its degrees of freedom come from the Welch–Satterthwaite equation. On log values a
//! difference of means is the log of the ratio of geometric means, so the effect reads
//! "B is 7.1% faster than A [3.2% .. 11.2%]".

use serde::Serialize;

use crate::dist::{t_quantile, t_sf, t_two_sided};
use crate::{logs, mean_var};

/// Summary of one side's log values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub n: usize,
    /// Mean of the logs.
    pub mean: f64,
    /// Sample variance of the logs (n − 1); 0 when n < 2.
    pub var: f64,
}

impl Sample {
    /// From positive values (logged here); None when empty or a value is not positive.
    pub fn of(values: &[f64]) -> Option<Sample> {
        if values.is_empty() {
            return None;
        }
        let l = logs(values)?;
        let (mean, var) = mean_var(&l);
        Some(Sample {
            n: l.len(),
            mean,
            var,
        })
    }

    /// The geometric mean of the values.
    pub fn geo_mean(&self) -> f64 {
        self.mean.exp()
    }
}

/// Welch's test of `a` against `b`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Welch {
    /// mean(log a) − mean(log b).
    pub diff: f64,
    /// Its standard error.
    pub se: f64,
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// One-sided p-value of "a is above b".
    pub p_greater: f64,
}

/// Welch's t-test; None when either side has fewer than two values (no spread measured).
pub fn welch(a: &Sample, b: &Sample) -> Option<Welch> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let (va, vb) = (a.var / a.n as f64, b.var / b.n as f64);
    let se2 = va + vb;
    let diff = a.mean - b.mean;
    if se2 <= 0.0 {
        // No spread at all on either side: identical values are no evidence, any difference
        // between two constant series is (a degenerate but honest answer).
        let df = (a.n + b.n - 2) as f64;
        let (t, p, pg) = if diff == 0.0 {
            (0.0, 1.0, 0.5)
        } else {
            (
                diff.signum() * f64::INFINITY,
                0.0,
                if diff > 0.0 { 0.0 } else { 1.0 },
            )
        };
        return Some(Welch {
            diff,
            se: 0.0,
            t,
            df,
            p,
            p_greater: pg,
        });
    }
    let se = se2.sqrt();
    let df = satterthwaite(&[(va, (a.n - 1) as f64), (vb, (b.n - 1) as f64)]);
    let t = diff / se;
    Some(Welch {
        diff,
        se,
        t,
        df,
        p: t_two_sided(t, df),
        p_greater: t_sf(t, df),
    })
}

/// Welch–Satterthwaite degrees of freedom of a sum of variance components, each given as
/// (its value, its own degrees of freedom).
pub fn satterthwaite(components: &[(f64, f64)]) -> f64 {
    let num: f64 = components.iter().map(|(v, _)| v).sum::<f64>().powi(2);
    let den: f64 = components
        .iter()
        .filter(|(v, df)| *v != 0.0 && *df > 0.0)
        .map(|(v, df)| v * v / df)
        .sum();
    if den <= 0.0 {
        return components.iter().map(|(_, df)| df).sum::<f64>().max(1.0);
    }
    (num / den).max(1.0)
}

/// The effect of `a` against `b`: the ratio of their geometric means with a two-sided
/// `1 − alpha` confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Effect {
    /// geo_mean(a) / geo_mean(b).
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    pub test: Welch,
}

impl Effect {
    /// The ratio as a relative change (0.071 for "7.1% higher").
    pub fn relative(&self) -> f64 {
        self.ratio - 1.0
    }
}

/// The effect of `a` against `b` at `alpha` (two-sided); None when a side has n < 2.
pub fn effect(a: &Sample, b: &Sample, alpha: f64) -> Option<Effect> {
    let w = welch(a, b)?;
    let q = t_quantile(1.0 - alpha / 2.0, w.df);
    Some(Effect {
        ratio: w.diff.exp(),
        low: (w.diff - q * w.se).exp(),
        high: (w.diff + q * w.se).exp(),
        test: w,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_matches_a_worked_example() {
        // Logs chosen directly: a = [1, 2, 3] (var 1), b = [4, 6, 8, 10] (var 20/3).
        let a = Sample {
            n: 3,
            mean: 2.0,
            var: 1.0,
        };
        let b = Sample {
            n: 4,
            mean: 7.0,
            var: 20.0 / 3.0,
        };
        let w = welch(&a, &b).unwrap();
        let (va, vb) = (1.0 / 3.0, 20.0 / 12.0);
        let se = f64::sqrt(va + vb);
        assert!((w.t - (-5.0 / se)).abs() < 1e-12);
        let df = (va + vb).powi(2) / (va * va / 2.0 + vb * vb / 3.0);
        assert!((w.df - df).abs() < 1e-12, "{} vs {df}", w.df);
        // t = -5 / sqrt(2), df = 4.0755; p by numerical integration of the t density: 0.023377.
        assert!((w.t + 3.535_534).abs() < 1e-5, "{}", w.t);
        assert!((w.p - 0.023_377).abs() < 1e-5, "{}", w.p);
    }

    #[test]
    fn effect_is_a_ratio_of_geometric_means_with_an_interval_around_it() {
        let a = Sample::of(&[110.0, 112.0, 108.0]).unwrap();
        let b = Sample::of(&[100.0, 101.0, 99.0]).unwrap();
        let e = effect(&a, &b, 0.05).unwrap();
        assert!((e.ratio - a.geo_mean() / b.geo_mean()).abs() < 1e-12);
        assert!(e.low < e.ratio && e.ratio < e.high);
        assert!(
            e.low > 1.0,
            "a 10% lead with 1-2% noise is significant: {e:?}"
        );
        assert!(e.test.p < 0.01);
    }

    #[test]
    fn one_repeat_measures_no_spread() {
        let a = Sample::of(&[110.0]).unwrap();
        let b = Sample::of(&[100.0, 101.0]).unwrap();
        assert!(welch(&a, &b).is_none());
        assert!(effect(&a, &b, 0.05).is_none());
        assert!(Sample::of(&[1.0, 0.0]).is_none());
    }
}
