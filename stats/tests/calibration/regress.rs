//! regress: suites with no true change at every history length, a true slowdown just inside
//! the tolerance, and the power left for a real one.

use fleetbench_stats::regress::{CheckInput, Direction, Outcome, judge};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::synth::Noise;

const TRIALS: usize = 2000;
const ALPHA: f64 = 0.05;

/// A suite: `checks` checks in two metric groups, 3 repeats a run. Each run has an effect
/// shared by all its checks (`shared`) and one of each check (`own`); repeats within a run
/// differ by `within`.
#[derive(Clone, Copy)]
struct Suite {
    checks: usize,
    shared: f64,
    own: f64,
    within: f64,
    noise: Noise,
}

const SUITE: Suite = Suite {
    checks: 6,
    shared: 0.015,
    own: 0.015,
    within: 0.01,
    noise: Noise::Normal,
};

/// One suite run against `stored` stored runs (the last is the baseline); the current run is
/// `slowdown` times slower on every check. Whether any check regressed.
fn suite_fails(rng: &mut StdRng, s: &Suite, stored: usize, slowdown: f64, tolerance: f64) -> bool {
    // runs[r][check] = that run's repeats of the check; the last run is the current one.
    let runs: Vec<Vec<Vec<f64>>> = (0..=stored)
        .map(|r| {
            let shared = s.noise.draw(rng, s.shared);
            let factor = if r == stored { 1.0 / slowdown } else { 1.0 };
            (0..s.checks)
                .map(|c| {
                    let level = 1000.0
                        * (1.0 + c as f64)
                        * factor
                        * (shared + s.noise.draw(rng, s.own)).exp();
                    (0..3)
                        .map(|_| level * s.noise.draw(rng, s.within).exp())
                        .collect()
                })
                .collect()
        })
        .collect();
    let histories: Vec<Vec<Vec<f64>>> = (0..s.checks)
        .map(|c| runs[..stored].iter().map(|r| r[c].clone()).collect())
        .collect();
    let inputs: Vec<CheckInput<'_>> = (0..s.checks)
        .map(|c| CheckInput {
            baseline: &runs[stored - 1][c],
            current: &runs[stored][c],
            history: &histories[c],
            direction: Direction::HigherIsBetter,
            tolerance,
            group: (c % 2) as u32,
        })
        .collect();
    judge(&inputs, &[], None, ALPHA)
        .0
        .iter()
        .any(|o| matches!(o, Outcome::Tested(t) if t.regressed))
}

fn rate(seed: u64, s: &Suite, stored: usize, slowdown: f64, tolerance: f64) -> f64 {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..TRIALS)
        .filter(|_| suite_fails(&mut rng, s, stored, slowdown, tolerance))
        .count() as f64
        / TRIALS as f64
}

#[test]
fn suites_without_a_change_fail_at_most_alpha_at_every_history_length() {
    let heavy = Suite {
        noise: Noise::Heavy,
        ..SUITE
    };
    let mut worst: f64 = 0.0;
    for stored in [1, 2, 3, 5, 10] {
        for (name, suite, tolerance) in [
            ("tolerance 0", SUITE, 0.0),
            ("tolerance 5%", SUITE, 0.05),
            ("tolerance 0, heavy tails", heavy, 0.0),
        ] {
            let r = rate(40 + stored as u64, &suite, stored, 1.0, tolerance);
            println!(
                "regress, {stored} stored runs, {name}: {r:.4} of suites failed without a change"
            );
            worst = worst.max(r);
        }
    }
    assert!(worst <= ALPHA + 0.01, "{worst}");
}

#[test]
fn a_slowdown_inside_the_tolerance_fails_at_most_alpha_and_a_real_one_is_caught() {
    let mut worst: f64 = 0.0;
    for stored in [2, 3, 5, 10] {
        let inside = rate(50 + stored as u64, &SUITE, stored, 1.0 / 0.96, 0.05);
        let caught = rate(60 + stored as u64, &SUITE, stored, 1.0 / 0.85, 0.05);
        println!(
            "regress, {stored} stored runs, 5% tolerance: a true 4% slowdown fails {inside:.4} \
             of suites; a 15% slowdown fails {caught:.3}"
        );
        worst = worst.max(inside);
        if stored >= 5 {
            assert!(caught > 0.8, "{caught}");
        }
    }
    assert!(worst <= ALPHA, "{worst}");
}
