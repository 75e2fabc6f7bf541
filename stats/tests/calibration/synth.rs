//! The synthetic data every calibration case draws from.

use rand::Rng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal, StudentT};

/// Noise on the log scale: normal, or Student's t with 3 degrees of freedom scaled to the
/// same standard deviation (heavy tails: one run in twenty lands beyond 2.4 sd).
#[derive(Debug, Clone, Copy)]
pub enum Noise {
    Normal,
    Heavy,
}

impl Noise {
    pub fn draw(self, rng: &mut StdRng, sd: f64) -> f64 {
        match self {
            Noise::Normal => sd * Normal::new(0.0, 1.0).expect("normal").sample(rng),
            // Var(t₃) = 3: divide by √3 for unit variance.
            Noise::Heavy => sd * StudentT::new(3.0).expect("t").sample(rng) / 3f64.sqrt(),
        }
    }
}

/// A uniform draw in [lo, hi).
pub fn uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    rng.random_range(lo..hi)
}

/// One level of a blocked job: (A, B) per block, each `level × exp(host + noise)` with the
/// block's host effect shared by both, ordered so that the leader (by sum of log ratios) is
/// first, as compare tests the winner against the runner-up.
pub fn leader_first(
    rng: &mut StdRng,
    hosts: &[f64],
    levels: (f64, f64),
    noise: Noise,
    sd: f64,
) -> Vec<(f64, f64)> {
    let effects: Vec<(f64, f64)> = hosts.iter().map(|&h| (h, h)).collect();
    leader_first_apart(rng, &effects, levels, noise, sd)
}

/// [`leader_first`] with each block's effect on A and on B given apart (a host effect shared
/// by both plus each engine process's own).
pub fn leader_first_apart(
    rng: &mut StdRng,
    effects: &[(f64, f64)],
    (a_level, b_level): (f64, f64),
    noise: Noise,
    sd: f64,
) -> Vec<(f64, f64)> {
    let mut pairs: Vec<(f64, f64)> = effects
        .iter()
        .map(|(ea, eb)| {
            let a = a_level * (ea + noise.draw(rng, sd)).exp();
            let b = b_level * (eb + noise.draw(rng, sd)).exp();
            (a, b)
        })
        .collect();
    let lead: f64 = pairs.iter().map(|(a, b)| a.ln() - b.ln()).sum();
    if lead < 0.0 {
        pairs.iter_mut().for_each(|p| *p = (p.1, p.0));
    }
    pairs
}
