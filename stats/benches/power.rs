//! Power and error rates of fleetbench's verdicts, by Monte Carlo over synthetic data with a
//! fixed seed (docs/tuning.md quotes the output):
//!
//! ```sh
//! cargo bench -p fleetbench-stats --bench power
//! ```
//!
//! - compare: the chance that a true 10% throughput difference at 5% run-to-run spread is
//!   called significant, with 3 and 5 repeats, alone and in a job of 8 levels (Holm);
//! - regress: the chance that a 10% slowdown fails a 5%-tolerance check at the same spread;
//! - tune: the confirmation round's false-winner rate (a winner confirmed among equal
//!   finalists), and how often it confirms a truly 5% better finalist.

use fleetbench_stats::decide::{Check, compare_family, confirm, regressions};
use fleetbench_stats::regress::{Change, Direction, change};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

const TRIALS: usize = 20_000;
const ALPHA: f64 = 0.05;

fn repeats(rng: &mut StdRng, level: f64, sd: f64, n: usize) -> Vec<f64> {
    let z = Normal::new(0.0, 1.0).expect("normal");
    (0..n).map(|_| level * (sd * z.sample(rng)).exp()).collect()
}

fn rate(mut hit: impl FnMut() -> bool) -> f64 {
    (0..TRIALS).filter(|_| hit()).count() as f64 / TRIALS as f64
}

fn main() {
    let mut rng = StdRng::seed_from_u64(2026);
    println!("{TRIALS} trials per figure, alpha {ALPHA}, seed 2026");
    println!();
    println!("compare: power for a true 10% difference at 5% run-to-run spread");
    for n in [3, 5] {
        let alone = rate(|| {
            let a = repeats(&mut rng, 1100.0, 0.05, n);
            let b = repeats(&mut rng, 1000.0, 0.05, n);
            compare_family(&[(&a, &b)], ALPHA)[0].significant
        });
        // The same level inside a job of 8 levels with no other difference (Holm over 8).
        let in_job = rate(|| {
            let a = repeats(&mut rng, 1100.0, 0.05, n);
            let b = repeats(&mut rng, 1000.0, 0.05, n);
            let mut data = vec![(a, b)];
            for _ in 0..7 {
                data.push((
                    repeats(&mut rng, 1000.0, 0.05, n),
                    repeats(&mut rng, 1000.0, 0.05, n),
                ));
            }
            let pairs: Vec<(&[f64], &[f64])> = data.iter().map(|(a, b)| (&a[..], &b[..])).collect();
            compare_family(&pairs, ALPHA)[0].significant
        });
        println!("  n={n}: one level {alone:.3}; one level of 8 (Holm) {in_job:.3}");
    }
    println!();
    println!("regress: a 10% slowdown at 5% spread against a 5% tolerance (no history)");
    for n in [3, 5] {
        let p = rate(|| {
            let base = repeats(&mut rng, 1000.0, 0.05, n);
            let cur = repeats(&mut rng, 1000.0 / 1.1, 0.05, n);
            let Some(Change::Measured(i)) =
                change(&base, &cur, None, Direction::HigherIsBetter, 0.05, 0.95)
            else {
                return false;
            };
            let check = Check {
                beyond_tolerance: i.relative < -0.05,
                p_worse: i.p_worse,
            };
            regressions(&[check], ALPHA)[0].0
        });
        println!("  n={n}: fails {p:.3}");
    }
    println!();
    println!("tune: confirmation round (fresh repeats of the finalists, 5% spread)");
    for (k, n) in [(2, 3), (3, 3), (2, 5), (3, 5)] {
        let false_winner = rate(|| {
            let f: Vec<Vec<f64>> = (0..k).map(|_| repeats(&mut rng, 1000.0, 0.05, n)).collect();
            let refs: Vec<&[f64]> = f.iter().map(|v| &v[..]).collect();
            confirm(&refs, ALPHA).is_some_and(|c| c.confirmed)
        });
        // One finalist truly 10% better: how often it is confirmed, and a wrong one confirmed.
        let (mut right, mut wrong) = (0, 0);
        for _ in 0..TRIALS {
            let f: Vec<Vec<f64>> = (0..k)
                .map(|i| repeats(&mut rng, if i == 0 { 1100.0 } else { 1000.0 }, 0.05, n))
                .collect();
            let refs: Vec<&[f64]> = f.iter().map(|v| &v[..]).collect();
            if let Some(c) = confirm(&refs, ALPHA).filter(|c| c.confirmed) {
                if c.winner == 0 {
                    right += 1;
                } else {
                    wrong += 1;
                }
            }
        }
        println!(
            "  {k} finalists, n={n}: false winner among equals {false_winner:.3}; \
             10% better one confirmed {:.3}, a wrong one {:.4}",
            right as f64 / TRIALS as f64,
            wrong as f64 / TRIALS as f64
        );
    }
    // Keep the generator's last state observable so the loop above cannot be optimised away.
    let tail: u32 = rng.random_range(0..10);
    println!();
    println!("(done; rng tail {tail})");
}
