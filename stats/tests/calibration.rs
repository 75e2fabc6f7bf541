//! Calibration against synthetic truth: Monte Carlo over the library's decisions with a fixed
//! seed, 2,000 trials each, so that every error rate docs/tuning.md states is measured here.
//! Binomial noise of a rate near 5% at 2,000 trials is ±0.5 points (one sd); the bounds allow
//! alpha + 2 points.

use fleetbench_stats::changepoint::{Options, change_points, drift};
use fleetbench_stats::decide::{Check, compare_family, regressions};
use fleetbench_stats::regress::{Change, Direction, change, run_variance};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

const TRIALS: usize = 2000;
const ALPHA: f64 = 0.05;
const SLACK: f64 = 0.02;

/// `n` repeats around `level` with relative noise `sd` (log-normal).
fn repeats(rng: &mut StdRng, level: f64, sd: f64, n: usize) -> Vec<f64> {
    let z = Normal::new(0.0, 1.0).expect("normal");
    (0..n).map(|_| level * (sd * z.sample(rng)).exp()).collect()
}

#[test]
fn compare_calls_nothing_in_an_aa_job_at_most_alpha_of_the_time() {
    // A job: 2 workloads x 4 levels, 3 repeats per config, 3% run-to-run spread, no true
    // difference. A job with any "significant" level counts as a false call.
    let mut rng = StdRng::seed_from_u64(12);
    let mut false_jobs = 0;
    for _ in 0..TRIALS {
        let data: Vec<(Vec<f64>, Vec<f64>)> = (0..8)
            .map(|level| {
                let base = 1000.0 * (1.0 + level as f64);
                let a = repeats(&mut rng, base, 0.03, 3);
                let b = repeats(&mut rng, base, 0.03, 3);
                // compare tests the winner (higher mean) against the runner-up.
                if a.iter().sum::<f64>() >= b.iter().sum::<f64>() {
                    (a, b)
                } else {
                    (b, a)
                }
            })
            .collect();
        let pairs: Vec<(&[f64], &[f64])> = data.iter().map(|(w, r)| (&w[..], &r[..])).collect();
        if compare_family(&pairs, ALPHA).iter().any(|c| c.significant) {
            false_jobs += 1;
        }
    }
    let rate = false_jobs as f64 / TRIALS as f64;
    println!("compare A/A: {rate:.4} of jobs with a false significant level (alpha {ALPHA})");
    assert!(rate <= ALPHA + SLACK, "{rate}");
}

#[test]
fn compare_finds_a_ten_percent_change_at_five_repeats() {
    // The other side of the coin: the test is not calibrated by never calling anything.
    let mut rng = StdRng::seed_from_u64(13);
    let mut found = 0;
    for _ in 0..TRIALS {
        let a = repeats(&mut rng, 1100.0, 0.03, 5);
        let b = repeats(&mut rng, 1000.0, 0.03, 5);
        if compare_family(&[(&a, &b)], ALPHA)[0].significant {
            found += 1;
        }
    }
    let power = found as f64 / TRIALS as f64;
    println!("compare power, 10% at 3% spread, n=5: {power:.3}");
    assert!(power > 0.95, "{power}");
}

/// One suite run of `checks` checks against its history: returns whether any check regressed.
fn suite_run(rng: &mut StdRng, checks: usize, between: f64, within: f64, slowdown: f64) -> bool {
    let z = Normal::new(0.0, 1.0).expect("normal");
    let mut calls = Vec::new();
    for _ in 0..checks {
        // 10 stored runs, each with its own run effect, 3 repeats.
        let history: Vec<Vec<f64>> = (0..10)
            .map(|_| {
                let run = 1000.0 * (between * z.sample(rng)).exp();
                repeats(rng, run, within, 3)
            })
            .collect();
        let baseline = history.last().cloned().expect("history");
        let run = 1000.0 * (between * z.sample(rng)).exp() / slowdown;
        let current = repeats(rng, run, within, 3);
        let v = run_variance(&history[..history.len() - 1]);
        let c = change(
            &baseline,
            &current,
            v.as_ref(),
            Direction::HigherIsBetter,
            0.0,
            0.95,
        )
        .expect("values");
        let Change::Measured(i) = c else {
            panic!("three repeats measure a spread")
        };
        calls.push(Check {
            beyond_tolerance: i.relative < 0.0,
            p_worse: i.p_worse,
        });
    }
    regressions(&calls, ALPHA).iter().any(|(r, _)| *r)
}

#[test]
fn regress_fails_a_suite_without_a_change_at_most_alpha_of_the_time() {
    // 6 checks per suite, n = 3, runs differ by 2% (between) and repeats by 1% (within), and
    // a tolerance of 0: the strictest case (a real tolerance only lowers the rate).
    let mut rng = StdRng::seed_from_u64(14);
    let fails = (0..TRIALS)
        .filter(|_| suite_run(&mut rng, 6, 0.02, 0.01, 1.0))
        .count();
    let rate = fails as f64 / TRIALS as f64;
    println!("regress: {rate:.4} of suites without a change failed (alpha {ALPHA})");
    assert!(rate <= ALPHA + SLACK, "{rate}");
    // It still sees a 10% slowdown in most suites.
    let caught = (0..500)
        .filter(|_| suite_run(&mut rng, 6, 0.02, 0.01, 1.10))
        .count();
    assert!(caught > 400, "{caught} of 500");
}

/// 30 runs, 2% noise, the level multiplied by `steps[i].1` from run `steps[i].0` on.
fn history(rng: &mut StdRng, steps: &[(usize, f64)], noise: f64) -> Vec<f64> {
    let z = Normal::new(0.0, noise).expect("normal");
    (0..30)
        .map(|i| {
            let level: f64 = steps
                .iter()
                .filter(|(at, _)| i >= *at)
                .map(|(_, f)| f)
                .product();
            100.0 * level * (1.0 + z.sample(rng))
        })
        .collect()
}

#[test]
fn a_five_percent_step_at_run_20_is_found_at_20_plus_or_minus_1() {
    let mut rng = StdRng::seed_from_u64(20);
    let fixed = history(&mut rng, &[(20, 0.95)], 0.02);
    let cps = change_points(&fixed, &Options::default());
    assert_eq!(cps.len(), 1, "{cps:?}");
    assert!(cps[0].index.abs_diff(20) <= 1, "{cps:?}");
    assert!((cps[0].relative + 0.05).abs() < 0.02, "{cps:?}");
    let found = (0..TRIALS)
        .filter(|_| {
            let cps = change_points(&history(&mut rng, &[(20, 0.95)], 0.02), &Options::default());
            cps.len() == 1 && cps[0].index.abs_diff(20) <= 1
        })
        .count();
    let rate = found as f64 / TRIALS as f64;
    println!("change points: 5% step at run 20 found alone at 20±1 in {rate:.3}");
    assert!(rate > 0.85, "{rate}");
}

#[test]
fn thirty_runs_without_a_step_report_none() {
    let mut rng = StdRng::seed_from_u64(30);
    assert!(change_points(&history(&mut rng, &[], 0.02), &Options::default()).is_empty());
    let alarms = (0..TRIALS)
        .filter(|_| !change_points(&history(&mut rng, &[], 0.02), &Options::default()).is_empty())
        .count();
    let rate = alarms as f64 / TRIALS as f64;
    println!("change points: false alarm in {rate:.4} of 30-run histories without a step");
    assert!(rate <= 0.05, "{rate}");
}

#[test]
fn four_successive_four_percent_steps_are_caught_as_a_drift() {
    // Each step alone is inside a 5% tolerance, so a last-passing baseline lets every one by.
    let steps = [(6, 0.96), (12, 0.96), (18, 0.96), (24, 0.96)];
    let mut rng = StdRng::seed_from_u64(44);
    let caught = |xs: &[f64]| {
        let cps = change_points(xs, &Options::default());
        drift(xs, &cps, Direction::HigherIsBetter)
            .is_some_and(|d| d.relative < -0.05 && d.p < 0.001)
    };
    let fixed = history(&mut rng, &steps, 0.02);
    let cps = change_points(&fixed, &Options::default());
    let d = drift(&fixed, &cps, Direction::HigherIsBetter).expect("a drift");
    assert!(
        d.relative < -0.10 && d.reference_start == 0,
        "{d:?} {cps:?}"
    );
    let rate = (0..TRIALS)
        .filter(|_| caught(&history(&mut rng, &steps, 0.02)))
        .count() as f64
        / TRIALS as f64;
    println!("change points: four 4% steps caught as a drift beyond 5% in {rate:.3}");
    assert!(rate > 0.95, "{rate}");
}
