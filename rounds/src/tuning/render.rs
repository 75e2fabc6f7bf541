//! A search's outcome as text: the CLI prints it and writes it next to the report.

use std::fmt::Write as _;

use super::saturation::SaturationOutcome;
use super::search::{Fate, TuneOutcome};

/// A score: tokens/s with one decimal, per-watt figures (a few tokens per joule) with three.
fn fmt_score(x: f64) -> String {
    if x.abs() < 100.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.1}")
    }
}

/// The scoring level's GPU power, where the host reported it.
fn power(w: Option<f64>) -> String {
    w.map(|w| format!(" at {w:.0} W")).unwrap_or_default()
}

/// The search outcome: best config with margin and confidence, every candidate, the Pareto
/// front, engine-minutes, and the runs to diff.
pub fn search(o: &TuneOutcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "search {}: {}, objective {}",
        o.name, o.strategy, o.objective
    );
    let _ = writeln!(s, "\ncandidates ({}):", o.candidates.len());
    for c in &o.candidates {
        let score = c.measured.as_ref().map_or(0.0, |m| m.score);
        let fate = match &c.fate {
            Fate::Finalist => "final".to_string(),
            Fate::Eliminated(r) => format!("out after rung {}", r + 1),
            Fate::Pruned(why) => format!("pruned: {why}"),
        };
        let _ = writeln!(
            s,
            "  {:<10} {:>10}{}  {:<28} {}",
            c.candidate.name,
            fmt_score(score),
            power(c.measured.as_ref().and_then(|m| m.score_power_w)),
            fate,
            c.candidate.describe()
        );
    }
    let _ = writeln!(s, "\nPareto front (output tokens/s vs p99 ITL):");
    for p in &o.pareto {
        let _ = writeln!(
            s,
            "  {:<10} {:<10} {:>10.1} tok/s  {:>8.2} ms",
            p.candidate, p.level, p.output_tokens_per_s, p.itl_p99_ms
        );
    }
    let _ = writeln!(s, "\nrounds:");
    for r in &o.rounds {
        let _ = writeln!(
            s,
            "  {} job {}: {} candidates, {:.0}% requests, {} repeat(s), {:.2} engine-min",
            if r.confirmation {
                "confirmation".to_string()
            } else {
                format!("rung {}", r.rung + 1)
            },
            r.job_id,
            r.candidates,
            r.requests_fraction * 100.0,
            r.repeats,
            r.engine_minutes
        );
    }
    let _ = writeln!(
        s,
        "engine-minutes: {:.2} spent; full grid at the full budget: {:.2}{} ({:.0}%)",
        o.engine_minutes,
        o.full_grid_minutes_estimate,
        if o.rounds.len() > 1 {
            " (estimated)"
        } else {
            ""
        },
        100.0 * o.engine_minutes / o.full_grid_minutes_estimate.max(1e-9)
    );
    match o.best_result() {
        Some(b) => {
            let score = b.measured.as_ref().map_or(0.0, |m| m.score);
            let _ = writeln!(
                s,
                "\nbest: {} ({} {}{}) {}",
                b.candidate.name,
                fmt_score(score),
                o.objective,
                power(b.measured.as_ref().and_then(|m| m.score_power_w)),
                b.candidate.describe()
            );
            match &o.margin {
                Some(m) if m.repeats < 2 || m.p.is_nan() => {
                    let _ = writeln!(
                        s,
                        "margin over {}: {:+.1}% from one repeat each: no spread measured, so \
                         no interval or confidence (set repeats = 2 or more to get them)",
                        m.runner_up,
                        m.relative * 100.0,
                    );
                }
                Some(m) => {
                    let _ = writeln!(
                        s,
                        "margin over {} in the confirmation round ({} fresh repeats): {:+.1}% \
                         [{:+.1}% .. {:+.1}%] (95%), p {:.3}: {}, confidence {:.0}%",
                        m.runner_up,
                        m.repeats,
                        m.relative * 100.0,
                        m.low * 100.0,
                        m.high * 100.0,
                        m.p,
                        if m.confirmed {
                            "confirmed"
                        } else {
                            "NOT confirmed (the finalists are not told apart at alpha 0.05)"
                        },
                        m.confidence * 100.0
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "no other feasible finalist: nothing to confirm the best against"
                    );
                }
            }
        }
        None => {
            let _ = writeln!(s, "\nbest: none (no candidate met the SLO)");
        }
    }
    let _ = writeln!(
        s,
        "best run: {}\nstart run ({}): {}",
        o.best_run_id.as_deref().unwrap_or("-"),
        o.start,
        o.start_run_id.as_deref().unwrap_or("-")
    );
    if let (Some(b), Some(st)) = (&o.best_run_id, &o.start_run_id) {
        let _ = writeln!(s, "flags that matter: fleetbench diff {st} {b}");
    }
    s
}

/// The saturation outcome: each config's point, its probes, and the level counts.
pub fn saturation(o: &SaturationOutcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "saturation search {}: concurrency {}..{} to within {}",
        o.name, o.bounds.low, o.bounds.high, o.bounds.resolution
    );
    for r in &o.results {
        let probes: Vec<String> = r
            .probes
            .iter()
            .map(|p| format!("{}{}", p.concurrency, if p.meets { "+" } else { "-" }))
            .collect();
        let _ = writeln!(
            s,
            "  {:<10} saturation {:>5} (first miss {}) in {} levels [{}] {}{}",
            r.config,
            r.saturation,
            r.first_miss.map_or("-".to_string(), |m| m.to_string()),
            r.probes.len(),
            probes.join(" "),
            r.flags,
            r.failure
                .as_ref()
                .map_or(String::new(), |f| format!(" pruned: {f}"))
        );
    }
    let linear = (o.bounds.high - o.bounds.low) / o.bounds.resolution.max(1) + 1;
    let _ = writeln!(
        s,
        "levels per config: the fixed [load] list runs {}, a list at this resolution {}",
        o.fixed_list_levels, linear
    );
    if let Some(b) = &o.best {
        let _ = writeln!(s, "best: {b}");
    }
    s
}
