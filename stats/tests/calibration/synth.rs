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
