//! One comparison of two configs at one level, as the job's design allows it to be made.
//!
//! - [`Design::Paired`]: a blocked job runs every config once per (repeat, workload) block, on
//!   one host in one sitting. The difference of the two configs' log values within a block
//!   cancels the host, the model load and the hour; the test is on those differences
//!   (n − 1 degrees of freedom of their own).
//! - [`Design::Unpaired`]: interleaved or sequential jobs, or blocks split over hosts: the two
//!   configs' log values as two samples with a pooled variance (n_a + n_b − 2). Host and drift
//!   effects stay in the noise, and drift between configs run apart is not corrected.
//! - [`Design::Referenced`]: two configs from different jobs. A job effect (another day,
//!   driver, host state) moves every config of a job alike, so it cannot be told from a config
//!   effect without a config both jobs ran; with one, each job's configs are read relative to
//!   that shared reference, and the test is on the difference of those ratios.
//!
//! Each design yields a [`Contrast`]: an estimate on the log scale, a unit variance with its
//! degrees of freedom, and the factor that makes it a standard error. The variances of a job's
//! contrasts are then moderated together (`crate::moderated`).

use serde::Serialize;

use crate::{logs, mean_var};

/// The values of one comparison (positive raw values, e.g. output tokens/s), A against B.
#[derive(Debug, Clone, Copy)]
pub enum Design<'a> {
    /// (A, B) of each complete block.
    Paired(&'a [(f64, f64)]),
    Unpaired {
        a: &'a [f64],
        b: &'a [f64],
    },
    /// (config, shared reference) of each block of A's job, and of B's job.
    Referenced {
        a: &'a [(f64, f64)],
        b: &'a [(f64, f64)],
    },
}

/// Which design a contrast came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Kind {
    Paired,
    Unpaired,
    Referenced,
}

impl Kind {
    /// Contrasts whose unit variances estimate the same thing: a difference of two log values
    /// (paired, referenced), or one log value (unpaired).
    pub(crate) fn variance_family(self) -> u8 {
        match self {
            Kind::Paired | Kind::Referenced => 0,
            Kind::Unpaired => 1,
        }
    }

    /// The test in words, for verdicts and reports.
    pub fn words(self) -> &'static str {
        match self {
            Kind::Paired => "paired t on log ratios within repeat blocks",
            Kind::Unpaired => "two-sample t on log values (pooled variance)",
            Kind::Referenced => "t on the difference of each job's log ratio to the shared config",
        }
    }
}

/// A comparison on the log scale: A − B = `diff`, standard error √(`scale`·`var`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Contrast {
    pub kind: Kind,
    pub diff: f64,
    /// The unit variance (of a block's difference, or of one value) and its degrees of freedom.
    pub var: f64,
    pub df: f64,
    pub scale: f64,
    /// Values (blocks) on each side.
    pub n_a: usize,
    pub n_b: usize,
}

impl Design<'_> {
    /// The contrast; None when no spread can be measured (fewer than two blocks, or a side of
    /// an unpaired design with one value) or a value is not positive.
    pub fn contrast(&self) -> Option<Contrast> {
        match *self {
            Design::Paired(pairs) => {
                let d = log_ratios(pairs)?;
                let n = d.len();
                if n < 2 {
                    return None;
                }
                let (m, v) = mean_var(&d);
                Some(Contrast {
                    kind: Kind::Paired,
                    diff: m,
                    var: v,
                    df: (n - 1) as f64,
                    scale: 1.0 / n as f64,
                    n_a: n,
                    n_b: n,
                })
            }
            Design::Unpaired { a, b } => {
                let (la, lb) = (logs(a)?, logs(b)?);
                two_sample(&la, &lb, Kind::Unpaired)
            }
            Design::Referenced { a, b } => {
                let (da, db) = (log_ratios(a)?, log_ratios(b)?);
                two_sample(&da, &db, Kind::Referenced)
            }
        }
    }
}

fn log_ratios(pairs: &[(f64, f64)]) -> Option<Vec<f64>> {
    pairs
        .iter()
        .map(|&(x, y)| {
            (x.is_finite() && x > 0.0 && y.is_finite() && y > 0.0).then(|| x.ln() - y.ln())
        })
        .collect()
}

/// Difference of means with the pooled variance; both sides need two values (one value per
/// side would measure no spread of its own).
fn two_sample(a: &[f64], b: &[f64], kind: Kind) -> Option<Contrast> {
    let (na, nb) = (a.len(), b.len());
    let need = if kind == Kind::Referenced { 1 } else { 2 };
    if na < need || nb < need || na + nb < 3 {
        return None;
    }
    let (ma, va) = mean_var(a);
    let (mb, vb) = mean_var(b);
    let df = (na + nb - 2) as f64;
    let var = (va * (na - 1) as f64 + vb * (nb - 1) as f64) / df;
    Some(Contrast {
        kind,
        diff: ma - mb,
        var,
        df,
        scale: 1.0 / na as f64 + 1.0 / nb as f64,
        n_a: na,
        n_b: nb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paired_design_cancels_the_block_effect() {
        // Blocks at 100, 130, 80 (a host effect of ±30%), A always 10% above B.
        let pairs = [(110.0, 100.0), (143.0, 130.0), (88.0, 80.0)];
        let c = Design::Paired(&pairs).contrast().unwrap();
        assert!(
            (c.diff - 1.1f64.ln()).abs() < 1e-12 && c.var < 1e-20,
            "{c:?}"
        );
        assert_eq!((c.df, c.n_a), (2.0, 3));
        let (a, b): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        let u = Design::Unpaired { a: &a, b: &b }.contrast().unwrap();
        assert!((u.diff - c.diff).abs() < 1e-12 && u.var > 0.01, "{u:?}");
        assert_eq!(u.df, 4.0);
        assert!(Design::Paired(&pairs[..1]).contrast().is_none());
        assert!(
            Design::Paired(&[(1.0, 0.0), (1.0, 1.0)])
                .contrast()
                .is_none()
        );
    }

    #[test]
    fn a_reference_removes_the_job_effect() {
        // Job 1 ran 20% slower than job 2 (everything); A and B are equal relative to R.
        let a = [(80.0, 80.0), (81.0, 80.5)];
        let b = [(100.0, 100.0), (100.5, 101.0)];
        let c = Design::Referenced { a: &a, b: &b }.contrast().unwrap();
        assert!(c.diff.abs() < 0.01, "{c:?}");
        assert_eq!((c.kind, c.df), (Kind::Referenced, 2.0));
        assert_eq!(c.kind.variance_family(), Kind::Paired.variance_family());
    }
}
