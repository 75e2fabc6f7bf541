//! Open-loop arrival schedules and a timer more precise than tokio's 1 ms wheel.

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Gamma};

/// Arrival offsets of `n` requests at `rate`/s with gamma inter-arrival times of shape
/// `burstiness` (1.0 = Poisson). The gaps are scaled so that the last arrival falls at exactly
/// `n / rate`: for Poisson this is the process conditioned on n arrivals in that window, and it
/// keeps a finite run's achieved rate equal to the asked one instead of off by ~1/√n.
pub fn schedule(n: usize, rate: f64, burstiness: f64, seed: u64) -> Vec<Duration> {
    let gaps = gaps(n, rate, burstiness, seed);
    let total: f64 = gaps.iter().sum();
    let scale = if total > 0.0 {
        (n as f64 / rate) / total
    } else {
        1.0
    };
    let mut t = 0.0;
    gaps.into_iter()
        .map(|g| {
            t += g * scale;
            Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX)
        })
        .collect()
}

/// Arrivals until `span` has passed (the count is random, as in a real Poisson process).
pub fn schedule_for(span: Duration, rate: f64, burstiness: f64, seed: u64) -> Vec<Duration> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = gamma(rate, burstiness);
    let mut out = Vec::new();
    let mut t = 0.0;
    loop {
        t += dist.sample(&mut rng);
        if t > span.as_secs_f64() {
            return out;
        }
        out.push(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX));
    }
}

fn gamma(rate: f64, burstiness: f64) -> Gamma<f64> {
    // Mean gap 1/rate: shape k, scale 1/(rate k). Shape and scale are validated positive.
    Gamma::new(burstiness, 1.0 / (rate * burstiness)).expect("validated positive shape and scale")
}

fn gaps(n: usize, rate: f64, burstiness: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = gamma(rate, burstiness);
    (0..n).map(|_| dist.sample(&mut rng)).collect()
}

/// Sleeps until `t` to within a few microseconds: tokio's timer for all but the last ~1.5 ms,
/// then yielding to other tasks until the instant passes.
pub async fn sleep_until_precise(t: Instant) {
    const SPIN: Duration = Duration::from_micros(1500);
    let now = Instant::now();
    if t > now + SPIN {
        tokio::time::sleep_until((t - SPIN).into()).await;
    }
    while Instant::now() < t {
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_hits_the_rate_exactly_and_is_seeded() {
        let s = schedule(2000, 400.0, 1.0, 3);
        assert_eq!(s.len(), 2000);
        assert!((s.last().unwrap().as_secs_f64() - 5.0).abs() < 1e-9);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(s, schedule(2000, 400.0, 1.0, 3));
        assert_ne!(s, schedule(2000, 400.0, 1.0, 4));
    }

    fn cv(s: &[Duration]) -> f64 {
        let g: Vec<f64> = s.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        let m = g.iter().sum::<f64>() / g.len() as f64;
        let var = g.iter().map(|x| (x - m).powi(2)).sum::<f64>() / g.len() as f64;
        var.sqrt() / m
    }

    #[test]
    fn burstiness_changes_dispersion() {
        // Poisson gaps have a coefficient of variation of 1; gamma shape k gives 1/√k.
        let poisson = cv(&schedule(20000, 100.0, 1.0, 1));
        let bursty = cv(&schedule(20000, 100.0, 0.25, 1));
        let smooth = cv(&schedule(20000, 100.0, 4.0, 1));
        assert!((poisson - 1.0).abs() < 0.05, "{poisson}");
        assert!((bursty - 2.0).abs() < 0.15, "{bursty}");
        assert!((smooth - 0.5).abs() < 0.05, "{smooth}");
    }

    #[test]
    fn duration_schedule_count_is_near_rate_times_span() {
        let s = schedule_for(Duration::from_secs(100), 50.0, 1.0, 9);
        assert!(
            (s.len() as f64 - 5000.0).abs() < 5.0 * 5000f64.sqrt(),
            "{}",
            s.len()
        );
        assert!(s.last().unwrap() <= &Duration::from_secs(100));
    }
}
