//! Power and error rates of fleetbench's verdicts, by Monte Carlo over synthetic data with a
//! fixed seed (docs/tuning.md quotes the output):
//!
//! ```sh
//! cargo bench -p fleetbench-stats --bench power
//! ```
//!
//! - compare: the chance that a true 10% throughput difference at one level of a job is called
//!   significant, today's test (Welch per level, Holm) against the design-aware moderated test,
//!   at 2, 3 and 5 repeats, in three settings of the "5% spread" a report shows; beside it the
//!   ceiling no calibrated two-sided test can pass (a z-test with the variance known); and
//!   the moderated test with 3 earlier jobs of the same setting lending their spread
//!   (`compare --history`), drawn from a generator of their own so the other figures stay;
//! - the detectable effect each verdict prints, against the power it really has;
//! - regress: a 10% slowdown against a 5% tolerance, and a 4% slowdown under it;
//! - tune: the confirmation round's false-winner rate and power.

use fleetbench_stats::contrast::Contrast;
use fleetbench_stats::contrast::Design;
use fleetbench_stats::decide::{LevelTest, compare_family, compare_family_with_history, confirm};
use fleetbench_stats::dist::normal_cdf;
use fleetbench_stats::multiple::holm;
use fleetbench_stats::two_sample::{Sample, welch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

const TRIALS: usize = 5_000;
const ALPHA: f64 = 0.05;

fn normal(rng: &mut StdRng, sd: f64) -> f64 {
    sd * Normal::new(0.0, 1.0).expect("normal").sample(rng)
}

/// How a job's "5% spread" is made: a block (host, sitting) effect shared by the configs of
/// a repeat block, and run noise of each config in it.
#[derive(Clone, Copy)]
struct Setting {
    name: &'static str,
    levels: usize,
    block: f64,
    run: f64,
}

/// One job: per level, (A, B) per block; level 0 has A truly `effect` times B.
fn job(rng: &mut StdRng, s: &Setting, n: usize, effect: f64) -> Vec<Vec<(f64, f64)>> {
    let blocks: Vec<f64> = (0..n).map(|_| normal(rng, s.block)).collect();
    (0..s.levels)
        .map(|level| {
            let a_level = if level == 0 { effect } else { 1.0 };
            blocks
                .iter()
                .map(|h| {
                    let a = 1000.0 * a_level * (h + normal(rng, s.run)).exp();
                    let b = 1000.0 * (h + normal(rng, s.run)).exp();
                    (a, b)
                })
                .collect()
        })
        .collect()
}

/// Today's test (before the design-aware one): Welch per level on the two configs' values,
/// Holm over the job. Whether level 0 is called.
fn welch_calls_level_0(data: &[Vec<(f64, f64)>]) -> bool {
    let p: Vec<f64> = data
        .iter()
        .map(|pairs| {
            let (a, b): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
            match (Sample::of(&a), Sample::of(&b)) {
                (Some(x), Some(y)) => welch(&x, &y).map_or(f64::NAN, |w| w.p),
                _ => f64::NAN,
            }
        })
        .collect();
    holm(&p)[0] <= ALPHA
}

/// The design-aware test: whether level 0 is called, and the detectable effect it printed.
fn new_calls_level_0(data: &[Vec<(f64, f64)>]) -> (bool, Option<f64>) {
    let designs: Vec<Design<'_>> = data.iter().map(|d| Design::Paired(d)).collect();
    let c = compare_family(&designs, ALPHA);
    let mde = match c[0].test {
        LevelTest::Tested(t) => t.mde(),
        LevelTest::NoSpread => None,
    };
    (c[0].significant, mde)
}

/// The moderated test with the contrasts of 3 earlier jobs of the same setting as its prior:
/// whether level 0 is called.
fn history_calls_level_0(
    history: &mut StdRng,
    s: &Setting,
    n: usize,
    data: &[Vec<(f64, f64)>],
) -> bool {
    let past: Vec<Contrast> = (0..3)
        .flat_map(|_| job(history, s, n, 1.0))
        .filter_map(|pairs| Design::Paired(&pairs).contrast())
        .collect();
    let designs: Vec<Design<'_>> = data.iter().map(|d| Design::Paired(d)).collect();
    compare_family_with_history(&designs, ALPHA, &past)[0].significant
}

fn rate(hits: usize, trials: usize) -> f64 {
    hits as f64 / trials as f64
}

/// The power of a two-sided z-test at alpha / levels (Holm's first step) on the paired
/// difference with the run variance known: what no calibrated test can beat.
fn ceiling(s: &Setting, n: usize, effect: f64) -> f64 {
    let se = s.run * (2.0 / n as f64).sqrt();
    let lambda = effect.ln() / se;
    let z = fleetbench_stats::dist::normal_quantile(1.0 - ALPHA / s.levels as f64 / 2.0);
    normal_cdf(lambda - z) + normal_cdf(-lambda - z)
}

fn compare_power(rng: &mut StdRng) {
    println!("compare: power for a true 10% difference at one level, 5% spread per config");
    println!("  (Welch = the test before this change; paired+moderated = today's)");
    let settings = [
        Setting {
            name: "one level, 5% run noise, no block effect",
            levels: 1,
            block: 0.0,
            run: 0.05,
        },
        Setting {
            name: "8 levels, 5% run noise, no block effect",
            levels: 8,
            block: 0.0,
            run: 0.05,
        },
        Setting {
            name: "8 levels, 4% block effect + 3% run noise",
            levels: 8,
            block: 0.04,
            run: 0.03,
        },
        Setting {
            name: "one level, 4% block effect + 3% run noise",
            levels: 1,
            block: 0.04,
            run: 0.03,
        },
    ];
    let mut history = StdRng::seed_from_u64(7);
    for s in &settings {
        println!("  {}:", s.name);
        for n in [2, 3, 5] {
            let (mut old, mut new, mut with) = (0, 0, 0);
            let mut mdes = Vec::new();
            for _ in 0..TRIALS {
                let data = job(rng, s, n, 1.10);
                old += usize::from(welch_calls_level_0(&data));
                let (called, mde) = new_calls_level_0(&data);
                new += usize::from(called);
                with += usize::from(history_calls_level_0(&mut history, s, n, &data));
                if mdes.len() < 400 {
                    mdes.extend(mde);
                }
            }
            mdes.sort_by(f64::total_cmp);
            let median_mde = mdes.get(mdes.len() / 2).copied();
            // The promise of the printed detectable effect: the power at that effect.
            let kept = median_mde.map(|m| {
                let hits = (0..TRIALS / 4)
                    .filter(|_| new_calls_level_0(&job(rng, s, n, 1.0 + m)).0)
                    .count();
                rate(hits, TRIALS / 4)
            });
            println!(
                "    n={n}: Welch {:.3}  paired+moderated {:.3}  with 3 earlier jobs {:.3}  ceiling {:.3}{}",
                rate(old, TRIALS),
                rate(new, TRIALS),
                rate(with, TRIALS),
                ceiling(s, n, 1.10),
                match (median_mde, kept) {
                    (Some(m), Some(k)) => format!(
                        "; printed detectable effect (median) {:.1}% has power {k:.3} (claims 0.80)",
                        m * 100.0
                    ),
                    _ => String::new(),
                }
            );
        }
    }
}

fn main() {
    let mut rng = StdRng::seed_from_u64(2026);
    println!("{TRIALS} trials per figure, alpha {ALPHA}, seed 2026");
    println!();
    compare_power(&mut rng);
    println!();
    println!("tune: confirmation round (fresh repeats of the finalists, 5% spread)");
    for (k, n) in [(2, 3), (3, 3), (2, 5), (3, 5)] {
        let draw = |rng: &mut StdRng, lead: f64| -> Vec<Vec<f64>> {
            (0..k)
                .map(|i| {
                    let level = if i == 0 { 1000.0 * lead } else { 1000.0 };
                    (0..n).map(|_| level * normal(rng, 0.05).exp()).collect()
                })
                .collect()
        };
        let false_winner = (0..TRIALS)
            .filter(|_| {
                let f = draw(&mut rng, 1.0);
                let refs: Vec<&[f64]> = f.iter().map(|v| &v[..]).collect();
                confirm(&refs, ALPHA).is_some_and(|c| c.confirmed)
            })
            .count();
        let (mut right, mut wrong) = (0, 0);
        for _ in 0..TRIALS {
            let f = draw(&mut rng, 1.1);
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
            "  {k} finalists, n={n}: false winner among equals {:.3}; 10% better one confirmed \
             {:.3}, a wrong one {:.4}",
            rate(false_winner, TRIALS),
            rate(right, TRIALS),
            rate(wrong, TRIALS)
        );
    }
    // Keep the generator's last state observable so the loops above cannot be optimised away.
    let tail: u32 = rng.random_range(0..10);
    println!();
    println!("(done; rng tail {tail})");
}
