//! Per-level statistics: HDR histograms of latencies in nanoseconds, reduced to [`Stats`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Summary of one latency distribution in milliseconds. Percentile keys are `p50`, `p90`,
/// `p99`, `p99.9`, ... as configured.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Stats {
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    #[serde(flatten)]
    pub percentiles: BTreeMap<String, f64>,
}

impl Stats {
    /// The value of a percentile key such as `"p99"`, if it was computed.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.percentiles.get(key).copied()
    }
}

/// The key of a percentile: `50.0` → `"p50"`, `99.9` → `"p99.9"`.
pub fn percentile_key(p: f64) -> String {
    let s = format!("{p:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("p{s}")
}

/// A latency histogram (nanoseconds, 4 significant digits: ±0.5 µs at 5 ms) with an exact sum:
/// the statistics crate's, so that a controller merging several agents' levels reads the same
/// buckets.
pub(crate) type Dist = fleetbench_stats::latency::LatencyHist;

/// A distribution's summary in milliseconds at `percentiles`.
pub(crate) fn summary(d: &Dist, percentiles: &[f64]) -> Stats {
    let Some((min, max)) = d.extremes_ns() else {
        return Stats::default();
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    Stats {
        count: d.count(),
        mean: d.mean_ns() / 1e6,
        min: ms(min),
        max: ms(max),
        percentiles: percentiles
            .iter()
            .map(|p| (percentile_key(*p), ms(d.percentile_ns(*p))))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_percentiles() {
        assert_eq!(percentile_key(50.0), "p50");
        assert_eq!(percentile_key(99.9), "p99.9");
        assert_eq!(percentile_key(99.99), "p99.99");
        let mut d = Dist::default();
        for i in 1..=1000u64 {
            d.record(i * 1_000_000); // 1..1000 ms
        }
        let s = summary(&d, &[50.0, 99.0, 99.9]);
        assert_eq!(s.count, 1000);
        assert!((s.mean - 500.5).abs() < 1e-9);
        assert!((s.get("p50").unwrap() - 500.0).abs() < 0.1, "{s:?}");
        assert!((s.get("p99").unwrap() - 990.0).abs() < 0.2, "{s:?}");
        assert!((999.0..=1000.0).contains(&s.get("p99.9").unwrap()), "{s:?}");
        assert!((s.min - 1.0).abs() < 1e-3 && s.max == 1000.0);
        let json = serde_json::to_value(&s).unwrap();
        assert!(json.get("p99.9").is_some() && json.get("mean").is_some());
    }

    #[test]
    fn resolution_is_finer_than_ten_microseconds_at_5ms() {
        let mut d = Dist::default();
        d.record_n(5_003_000, 10);
        let s = summary(&d, &[50.0]);
        assert!((s.get("p50").unwrap() - 5.003).abs() < 0.001, "{s:?}");
    }
}
