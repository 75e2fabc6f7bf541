//! Change points over a metric's history: E-divisive means (Matteson & James, JASA 2014) with
//! the significance test Hunter / Apache Otava use instead of permutations (Fleming et al.,
//! ICPE 2023): deterministic, and fast enough for every check of every suite.
//!
//! The method, as published:
//! 1. For a segment, every split τ (leaving at least `min_segment` points on each side) is
//!    scored by the energy statistic
//!    Q̂(τ) = m·n/(m+n) · (2/(mn) Σ|xᵢ−yⱼ| − 1/C(m,2) Σ|xᵢ−xₖ| − 1/C(n,2) Σ|yⱼ−yₗ|),
//!    the divergence between the points before and after τ; the best split is its maximum.
//! 2. The candidate is kept when a two-sample Student's t-test (Welch) of the points before
//!    against the points after it, within the segment bounded by the neighbouring change
//!    points, gives p < `max_p`. The series is bisected again around it (hierarchically) until
//!    no segment has a significant split.
//! 3. Every change point is tested again against its final neighbours; the weakest that is no
//!    longer significant is dropped until all are.
//!
//! Because the split is chosen as the best of many, its p-value understates the chance of a
//! false change point; a strict `max_p` (0.001 by default) keeps false alarms rare (the
//! calibration test measures the rate on 30-run histories without a step).

use serde::Serialize;

use crate::mean_var;
use crate::regress::Direction;
use crate::two_sample::{Sample, welch};

/// Detection settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Options {
    /// The p-value a change point must stay below.
    pub max_p: f64,
    /// The fewest points a segment may have.
    pub min_segment: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_p: 0.001,
            min_segment: 3,
        }
    }
}

/// A change point: the series' level changes from `index` on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ChangePoint {
    /// The first point of the new segment (0-based).
    pub index: usize,
    /// Means of the segments before and after.
    pub before: f64,
    pub after: f64,
    /// after / before − 1.
    pub relative: f64,
    /// The t-test's p-value between the two segments.
    pub p: f64,
}

/// Sums of |xᵢ − xⱼ| over rectangles of the distance matrix, in O(1) each.
struct Distances {
    n: usize,
    /// (n + 1)² prefix sums.
    s: Vec<f64>,
}

impl Distances {
    fn new(xs: &[f64]) -> Distances {
        let n = xs.len();
        let w = n + 1;
        let mut s = vec![0.0; w * w];
        for i in 0..n {
            for j in 0..n {
                s[(i + 1) * w + j + 1] =
                    (xs[i] - xs[j]).abs() + s[i * w + j + 1] + s[(i + 1) * w + j] - s[i * w + j];
            }
        }
        Distances { n, s }
    }

    /// Σ |x_a − x_b| for a in [a0, a1), b in [b0, b1).
    fn block(&self, a0: usize, a1: usize, b0: usize, b1: usize) -> f64 {
        let w = self.n + 1;
        self.s[a1 * w + b1] - self.s[a0 * w + b1] - self.s[a1 * w + b0] + self.s[a0 * w + b0]
    }

    /// Q̂ of splitting [s, e) at τ.
    fn q_hat(&self, s: usize, tau: usize, e: usize) -> f64 {
        let (m, n) = ((tau - s) as f64, (e - tau) as f64);
        let between = 2.0 * self.block(s, tau, tau, e) / (m * n);
        // The block over X × X counts every pair twice: Σ_{i<k} = block / 2, over C(m, 2).
        let within_x = self.block(s, tau, s, tau) / (m * (m - 1.0));
        let within_y = self.block(tau, e, tau, e) / (n * (n - 1.0));
        m * n / (m + n) * (between - within_x - within_y)
    }
}

fn raw_sample(xs: &[f64]) -> Sample {
    let (mean, var) = mean_var(xs);
    Sample {
        n: xs.len(),
        mean,
        var,
    }
}

/// Welch's two-sided p-value between two stretches of the series.
fn p_between(left: &[f64], right: &[f64]) -> f64 {
    welch(&raw_sample(left), &raw_sample(right)).map_or(1.0, |w| w.p)
}

/// The change points of `series` (oldest first), in order.
pub fn change_points(series: &[f64], opts: &Options) -> Vec<ChangePoint> {
    let min = opts.min_segment.max(2);
    let n = series.len();
    if n < 2 * min || series.iter().any(|x| !x.is_finite()) {
        return Vec::new();
    }
    let d = Distances::new(series);
    let mut cps: Vec<usize> = Vec::new();
    // Segments already found to hold no significant split.
    let mut settled: Vec<(usize, usize)> = Vec::new();
    loop {
        let mut bounds = vec![0];
        bounds.extend(&cps);
        bounds.push(n);
        let mut best: Option<(f64, usize)> = None;
        for w in bounds.windows(2) {
            let (s, e) = (w[0], w[1]);
            if e - s < 2 * min || settled.contains(&(s, e)) {
                continue;
            }
            let tau = (s + min..=e - min)
                .max_by(|&a, &b| d.q_hat(s, a, e).total_cmp(&d.q_hat(s, b, e)))
                .expect("a segment of 2 * min points has a split");
            let p = p_between(&series[s..tau], &series[tau..e]);
            if p < opts.max_p {
                if best.is_none_or(|(bp, _)| p < bp) {
                    best = Some((p, tau));
                }
            } else {
                settled.push((s, e));
            }
        }
        match best {
            Some((_, tau)) => {
                cps.push(tau);
                cps.sort_unstable();
            }
            None => break,
        }
    }
    // Re-test each against its final neighbours; drop the weakest until all hold.
    loop {
        let found = describe(series, &cps);
        match found
            .iter()
            .enumerate()
            .filter(|(_, c)| c.p >= opts.max_p)
            .max_by(|a, b| a.1.p.total_cmp(&b.1.p))
        {
            Some((i, _)) => {
                cps.remove(i);
            }
            None => return found,
        }
    }
}

/// The change points at `cps` with their neighbouring segments' means and p-values.
fn describe(series: &[f64], cps: &[usize]) -> Vec<ChangePoint> {
    let mut bounds = vec![0];
    bounds.extend(cps);
    bounds.push(series.len());
    bounds
        .windows(3)
        .map(|w| {
            let (left, right) = (&series[w[0]..w[1]], &series[w[1]..w[2]]);
            let (before, after) = (mean_var(left).0, mean_var(right).0);
            ChangePoint {
                index: w[1],
                before,
                after,
                relative: if before != 0.0 {
                    after / before - 1.0
                } else {
                    f64::NAN
                },
                p: p_between(left, right),
            }
        })
        .collect()
}

/// Successive changes for the worse that end in the latest segment: the ratchet a
/// "last passing" baseline cannot see (four 4% slowdowns under a 5% tolerance each pass).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Drift {
    /// Change points in the run of worsening steps.
    pub steps: usize,
    /// The first point of the segment before the first worsening step.
    pub reference_start: usize,
    /// The first point of the latest segment.
    pub current_start: usize,
    pub reference_mean: f64,
    pub current_mean: f64,
    /// current / reference − 1.
    pub relative: f64,
    /// Welch's p-value between the reference segment and the latest.
    pub p: f64,
}

/// The drift of the latest segment from the last segment before an unbroken run of
/// worsening change points; None when the latest change point (if any) was for the better.
pub fn drift(series: &[f64], cps: &[ChangePoint], direction: Direction) -> Option<Drift> {
    let worse = |c: &ChangePoint| match direction {
        Direction::HigherIsBetter => c.after < c.before,
        Direction::LowerIsBetter => c.after > c.before,
    };
    let steps = cps.iter().rev().take_while(|c| worse(c)).count();
    if steps == 0 {
        return None;
    }
    let first = cps.len() - steps;
    let reference_start = if first == 0 { 0 } else { cps[first - 1].index };
    let reference_end = cps[first].index;
    let current_start = cps.last()?.index;
    let (r, c) = (
        &series[reference_start..reference_end],
        &series[current_start..],
    );
    let (rm, cm) = (mean_var(r).0, mean_var(c).0);
    Some(Drift {
        steps,
        reference_start,
        current_start,
        reference_mean: rm,
        current_mean: cm,
        relative: cm / rm - 1.0,
        p: p_between(r, c),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_step_is_found_exactly() {
        let mut xs = vec![100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1];
        xs.extend([90.0, 91.0, 89.0, 90.5, 89.5, 90.2, 89.8]);
        let cps = change_points(&xs, &Options::default());
        assert_eq!(cps.len(), 1, "{cps:?}");
        assert_eq!(cps[0].index, 8);
        assert!((cps[0].relative + 0.1).abs() < 0.01);
    }

    #[test]
    fn q_hat_matches_the_definition() {
        let xs = [1.0, 2.0, 4.0, 8.0, 3.0];
        let d = Distances::new(&xs);
        let (x, y) = (&xs[..2], &xs[2..]);
        let mut between = 0.0;
        for a in x {
            for b in y {
                between += (a - b).abs();
            }
        }
        let pairs = |v: &[f64]| {
            let mut s = 0.0;
            for i in 0..v.len() {
                for k in i + 1..v.len() {
                    s += (v[i] - v[k]).abs();
                }
            }
            s / (v.len() * (v.len() - 1) / 2) as f64
        };
        let want = 2.0 * 3.0 / 5.0 * (2.0 * between / 6.0 - pairs(x) - pairs(y));
        assert!((d.q_hat(0, 2, 5) - want).abs() < 1e-12);
    }

    #[test]
    fn short_or_flat_series_have_none() {
        assert!(change_points(&[1.0, 2.0, 3.0], &Options::default()).is_empty());
        assert!(change_points(&[5.0; 20], &Options::default()).is_empty());
    }

    #[test]
    fn drift_follows_only_an_unbroken_run_of_worse_steps() {
        let cp = |index, before, after| ChangePoint {
            index,
            before,
            after,
            relative: after / before - 1.0,
            p: 0.0,
        };
        let series: Vec<f64> = (0..12).map(|i| 100.0 - 4.0 * (i / 3) as f64).collect();
        let cps = [cp(3, 100.0, 96.0), cp(6, 96.0, 92.0), cp(9, 92.0, 88.0)];
        let d = drift(&series, &cps, Direction::HigherIsBetter).unwrap();
        assert_eq!((d.steps, d.reference_start, d.current_start), (3, 0, 9));
        assert!((d.relative + 0.12).abs() < 1e-12);
        assert!(drift(&series, &cps, Direction::LowerIsBetter).is_none());
    }
}
