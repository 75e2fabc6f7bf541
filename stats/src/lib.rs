//! The statistics behind fleetbench's verdicts, kept apart from the controller so that the
//! controller and the CLI use one implementation and so that it can be tested against
//! synthetic truth in seconds (no runtime, no protocol types).
//!
//! - [`dist`]: Student's t (CDF and quantile, via the regularized incomplete beta) and the
//!   normal distribution.
//! - [`two_sample`]: Welch's t-test on log values, the effect as a ratio of geometric means
//!   with its interval.
//! - [`contrast`]: one comparison as the job's design allows it (paired within repeat blocks,
//!   two samples, or through a config two jobs share).
//! - [`moderated`]: empirical-Bayes variances shared across a job's levels (Smyth 2004).
//! - [`latency`]: latency distributions as HDR histograms that cross processes and merge
//!   exactly (one level loaded by several client agents).
//! - [`power`]: exact power of a t-test and the detectable effect it implies.
//! - [`multiple`]: Holm and Benjamini–Hochberg adjusted p-values.
//! - [`regress`]: the regression interval (t-based, between-run variance from the history
//!   pooled in), one-sided tests against zero and against a tolerance, error-rate rises.
//! - [`decide`]: the decisions of compare, tune and regress built from those tests.
//! - [`changepoint`]: E-divisive means over a series with a Student's t significance test
//!   (the method of Hunter / Apache Otava), and the ratchet that successive small steps make.
//!
//! Everything works on the logarithm of the measured values: throughput and latency are
//! positive, their noise is roughly proportional to their size, and a change is read as a
//! ratio ("5% slower"), which on the log scale is a difference.

pub mod changepoint;
pub mod contrast;
pub mod decide;
pub mod dist;
pub mod latency;
pub mod moderated;
pub mod multiple;
pub mod power;
pub mod regress;
pub mod two_sample;

/// The default significance level of every test (two-sided for compare, one-sided for a
/// regression).
pub const DEFAULT_ALPHA: f64 = 0.05;

/// Mean and sample variance (n − 1) of values; variance 0 for fewer than two values.
pub(crate) fn mean_var(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, 0.0);
    }
    let m = xs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (m, 0.0);
    }
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    (m, v)
}

/// Natural logs of positive, finite values; None when any value is not (a throughput of 0
/// or a missing latency cannot be compared as a ratio).
pub fn logs(xs: &[f64]) -> Option<Vec<f64>> {
    xs.iter()
        .map(|&x| (x.is_finite() && x > 0.0).then(|| x.ln()))
        .collect()
}
