//! Latency distributions as HDR histograms (nanoseconds, 4 significant digits) with an exact
//! sum and extremes: what the load generator records per level, and what a controller merges
//! when one level was loaded by several client agents.
//!
//! A histogram leaves a process as its recorded buckets ([`LatencyHist::buckets`]); recording
//! each bucket's value again in a histogram of the same bounds lands it in the same bucket, so
//! [`LatencyHist::from_parts`] rebuilds it exactly and [`LatencyHist::merge`] adds two without
//! loss: the merged percentiles are those of one histogram that saw every request.

use hdrhistogram::Histogram;

/// Longest latency kept: an hour (larger values are clamped to it).
pub const MAX_NS: u64 = 3_600_000_000_000;
/// Significant digits: ±0.5 µs at 5 ms.
const SIGFIG: u8 = 4;

/// One latency distribution.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    hist: Histogram<u64>,
    sum_ns: f64,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            hist: Histogram::new_with_bounds(1, MAX_NS, SIGFIG)
                .expect("static histogram bounds are valid"),
            sum_ns: 0.0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

/// Why parts sent by another process do not make a histogram.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PartsError {
    #[error("{values} bucket values but {counts} counts")]
    Lengths { values: usize, counts: usize },
    #[error("bucket value {0} ns is outside 1..={MAX_NS}")]
    Value(u64),
}

impl LatencyHist {
    pub fn record(&mut self, ns: u64) {
        self.record_n(ns, 1);
    }

    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let _ = self.hist.record_n(ns.clamp(1, MAX_NS), n);
        self.sum_ns += ns as f64 * n as f64;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Mean in ns (exact: from the sum, not the buckets); 0 when empty.
    pub fn mean_ns(&self) -> f64 {
        match self.count() {
            0 => 0.0,
            n => self.sum_ns / n as f64,
        }
    }

    pub fn sum_ns(&self) -> f64 {
        self.sum_ns
    }

    /// Smallest and largest recorded values (exact); `None` when empty.
    pub fn extremes_ns(&self) -> Option<(u64, u64)> {
        (self.count() > 0).then_some((self.min_ns, self.max_ns))
    }

    /// The value at percentile `p` (0..=100), as the bucket's median equivalent.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        let v = self.hist.value_at_quantile(p / 100.0);
        self.hist.median_equivalent(v)
    }

    /// The recorded buckets: each bucket's lowest equivalent value and its count.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.hist
            .iter_recorded()
            .map(|v| {
                (
                    self.hist.lowest_equivalent(v.value_iterated_to()),
                    v.count_at_value(),
                )
            })
            .collect()
    }

    /// A histogram from [`LatencyHist::buckets`], its exact sum and extremes.
    pub fn from_parts(
        values_ns: &[u64],
        counts: &[u64],
        sum_ns: f64,
        min_ns: u64,
        max_ns: u64,
    ) -> Result<LatencyHist, PartsError> {
        if values_ns.len() != counts.len() {
            return Err(PartsError::Lengths {
                values: values_ns.len(),
                counts: counts.len(),
            });
        }
        let mut h = LatencyHist::default();
        for (&v, &n) in values_ns.iter().zip(counts) {
            if !(1..=MAX_NS).contains(&v) {
                return Err(PartsError::Value(v));
            }
            let _ = h.hist.record_n(v, n);
        }
        if h.count() > 0 {
            h.sum_ns = sum_ns;
            h.min_ns = min_ns;
            h.max_ns = max_ns;
        }
        Ok(h)
    }

    /// Adds every value `other` recorded.
    pub fn merge(&mut self, other: &LatencyHist) {
        if other.count() == 0 {
            return;
        }
        self.hist
            .add(&other.hist)
            .expect("histograms of the same bounds add");
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_rebuild_the_same_histogram_and_merge_without_loss() {
        // Two clients' shares of one level, and the single histogram that saw them all.
        let (mut a, mut b, mut all) = Default::default();
        let mut x: u64 = 12345;
        for i in 0..20_000u64 {
            // A spread of values from 1 µs to ~40 s, deterministic.
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ns = 1_000 + (x >> 28) % 40_000_000_000 / (1 + i % 7);
            let h: &mut LatencyHist = if i % 3 == 0 { &mut a } else { &mut b };
            h.record(ns);
            LatencyHist::record(&mut all, ns);
        }
        let (a, b, all): (LatencyHist, LatencyHist, LatencyHist) = (a, b, all);
        let rebuild = |h: &LatencyHist| {
            let (v, c): (Vec<u64>, Vec<u64>) = h.buckets().into_iter().unzip();
            let (lo, hi) = h.extremes_ns().unwrap();
            LatencyHist::from_parts(&v, &c, h.sum_ns(), lo, hi).unwrap()
        };
        let mut merged = rebuild(&a);
        merged.merge(&rebuild(&b));
        assert_eq!(merged.count(), all.count());
        assert_eq!(merged.buckets(), all.buckets());
        for p in [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            assert_eq!(merged.percentile_ns(p), all.percentile_ns(p), "p{p}");
        }
        assert_eq!(merged.extremes_ns(), all.extremes_ns());
        assert!((merged.mean_ns() - all.mean_ns()).abs() / all.mean_ns() < 1e-12);
    }

    #[test]
    fn bad_parts_are_named() {
        assert_eq!(
            LatencyHist::from_parts(&[5], &[], 0.0, 0, 0).unwrap_err(),
            PartsError::Lengths {
                values: 1,
                counts: 0
            }
        );
        assert_eq!(
            LatencyHist::from_parts(&[0], &[1], 0.0, 0, 0).unwrap_err(),
            PartsError::Value(0)
        );
        let empty = LatencyHist::from_parts(&[], &[], 9.0, 1, 2).unwrap();
        assert_eq!(
            (empty.count(), empty.mean_ns(), empty.extremes_ns()),
            (0, 0.0, None)
        );
    }
}
