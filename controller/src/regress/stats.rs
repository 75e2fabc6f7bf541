//! The noise test of a regression verdict: a percentile bootstrap confidence interval of the
//! relative change of the mean over the repeats (docs/tuning.md says why a bootstrap).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The relative change of the current mean against the baseline mean, with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// (mean(current) - mean(baseline)) / mean(baseline).
    pub relative: f64,
    /// Lower and upper bound of the bootstrap interval of `relative`.
    pub low: f64,
    pub high: f64,
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The relative change with a `confidence` interval from `resamples` bootstrap resamples of
/// both sides (each resampled with replacement, independently). Seeded: the same inputs give
/// the same interval, so a verdict can be re-derived from the stored results. None when a
/// side is empty or the baseline mean is 0.
pub fn relative_change(
    baseline: &[f64],
    current: &[f64],
    confidence: f64,
    resamples: u32,
    seed: u64,
) -> Option<Change> {
    if baseline.is_empty() || current.is_empty() {
        return None;
    }
    let base = mean(baseline);
    if base == 0.0 || !base.is_finite() {
        return None;
    }
    let relative = (mean(current) - base) / base;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut draws: Vec<f64> = Vec::with_capacity(resamples as usize);
    let resample = |rng: &mut StdRng, xs: &[f64]| -> f64 {
        let n = xs.len();
        (0..n).map(|_| xs[rng.random_range(0..n)]).sum::<f64>() / n as f64
    };
    for _ in 0..resamples.max(1) {
        let b = resample(&mut rng, baseline);
        let c = resample(&mut rng, current);
        if b != 0.0 {
            draws.push((c - b) / b);
        }
    }
    draws.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let at = |q: f64| {
        let i = ((draws.len() - 1) as f64 * q).round() as usize;
        draws[i.min(draws.len() - 1)]
    };
    Some(Change {
        relative,
        low: at(tail),
        high: at(1.0 - tail),
    })
}

/// The share of bootstrap resamples in which the mean of `a` beats (is above) the mean of
/// `b`: the confidence that `a` is really the better one.
pub fn prob_above(a: &[f64], b: &[f64], resamples: u32, seed: u64) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let resample = |rng: &mut StdRng, xs: &[f64]| -> f64 {
        let n = xs.len();
        (0..n).map(|_| xs[rng.random_range(0..n)]).sum::<f64>() / n as f64
    };
    let wins = (0..resamples.max(1))
        .filter(|_| resample(&mut rng, a) > resample(&mut rng, b))
        .count();
    Some(wins as f64 / f64::from(resamples.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_shift_has_an_interval_that_excludes_zero() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5];
        let cur = [90.0, 91.0, 89.5, 90.5, 90.2];
        let c = relative_change(&base, &cur, 0.95, 2000, 1).unwrap();
        assert!((c.relative + 0.096).abs() < 0.01, "{c:?}");
        assert!(
            c.high < 0.0 && c.low < c.relative && c.relative < c.high,
            "{c:?}"
        );
    }

    #[test]
    fn noise_alone_has_an_interval_around_zero() {
        let base = [100.0, 103.0, 97.0, 101.0, 99.0];
        let cur = [102.0, 98.0, 100.0, 97.5, 101.5];
        let c = relative_change(&base, &cur, 0.95, 2000, 1).unwrap();
        assert!(c.low < 0.0 && c.high > 0.0, "{c:?}");
    }

    #[test]
    fn empty_sides_give_nothing() {
        assert!(relative_change(&[], &[1.0], 0.95, 100, 1).is_none());
        assert!(relative_change(&[0.0], &[1.0], 0.95, 100, 1).is_none());
    }
}
