//! Calibration against synthetic truth: Monte Carlo over the library's decisions with fixed
//! seeds, 2,000 trials per case, so that every error rate docs/tuning.md states is measured
//! here. Binomial noise of a rate near 5% at 2,000 trials is ±0.5 points (one sd); bounds on
//! error rates allow alpha + 1 point unless a case says otherwise.
//!
//! - `compare`: A/A jobs with host (block) effects, unequal spreads across levels and heavy
//!   tails at 2, 3 and 5 repeats; two jobs with a job effect compared through a shared config.
//! - `history`: A/A jobs and power with earlier jobs lending their spread (`compare
//!   --history`), like the job and quieter than it.
//! - `regress`: suites with no true change at every history length, and a true slowdown just
//!   inside the tolerance.
//! - `changepoints`: the life of a history re-analysed at every run.

mod changepoints;
mod compare;
mod history;
mod regress;
mod synth;
