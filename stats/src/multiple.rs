//! Multiple comparisons: a job's sweep is many tests (levels × workloads, a suite's checks),
//! and at α = 0.05 each, twenty true-null tests give one false "significant" on average.
//!
//! - Holm (1979) controls the family-wise error rate (the chance of any false call) and is
//!   never less powerful than Bonferroni. Used by compare and regress.
//! - Benjamini–Hochberg (1995) controls the false discovery rate (the expected share of false
//!   calls among the calls); more power when many effects are real.
//!
//! Both return adjusted p-values in the input order: a test is called at level α when its
//! adjusted p-value is ≤ α. NaN inputs (no test possible) stay NaN and do not count as tests.

fn order(p: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    idx.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    idx
}

/// Holm's step-down adjusted p-values.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let idx = order(p);
    let m = idx.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0.0_f64;
    for (rank, &i) in idx.iter().enumerate() {
        let adj = ((m - rank) as f64 * p[i]).min(1.0);
        running = running.max(adj);
        out[i] = running;
    }
    out
}

/// The level at which Holm tested a test with p-value `p` and adjusted p-value `adjusted` in
/// a family of `m` tests: α·p/p_adj (α / (m − k + 1) at its step, or the level of the step that
/// carried it). An interval at this level excludes the null exactly when `adjusted` ≤ α, which
/// is how verdicts print one statement; with a p of 0 (or an adjusted 0) it is α / m.
pub fn holm_local_level(alpha: f64, p: f64, adjusted: f64, m: usize) -> f64 {
    if adjusted > 0.0 && p > 0.0 {
        alpha * p / adjusted
    } else {
        alpha / m.max(1) as f64
    }
}

/// Benjamini–Hochberg step-up adjusted p-values (q-values).
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let idx = order(p);
    let m = idx.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 1.0_f64;
    for (rank, &i) in idx.iter().enumerate().rev() {
        let adj = (m as f64 / (rank + 1) as f64 * p[i]).min(1.0);
        running = running.min(adj);
        out[i] = running;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn holm_matches_a_hand_computation() {
        // Sorted: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06).
        let adj = holm(&[0.03, 0.01, 0.04, 0.02]);
        assert!(close(&adj, &[0.06, 0.04, 0.06, 0.06]), "{adj:?}");
        assert_eq!(holm(&[0.5, 0.9]), vec![1.0, 1.0]);
    }

    #[test]
    fn bh_matches_a_hand_computation() {
        // m = 4: 0.01*4/1 = 0.04, 0.02*4/2 = 0.04, 0.03*4/3 = 0.04, 0.04*4/4 = 0.04.
        let adj = benjamini_hochberg(&[0.03, 0.01, 0.04, 0.02]);
        assert!(close(&adj, &[0.04, 0.04, 0.04, 0.04]), "{adj:?}");
        let adj = benjamini_hochberg(&[0.001, 0.2, 0.9]);
        assert!(close(&adj, &[0.003, 0.3, 0.9]), "{adj:?}");
    }

    #[test]
    fn untestable_entries_are_left_out_of_the_family() {
        let adj = holm(&[f64::NAN, 0.02, 0.03]);
        assert!(adj[0].is_nan());
        assert!(close(&adj[1..], &[0.04, 0.04]), "{adj:?}");
    }
}
