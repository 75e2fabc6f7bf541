//! `fleetbench tune --json`: a search's outcome as one JSON document (the same figures as the
//! table and `tuning.txt`), for scripts that pick the winning flags.

use fleetbench_rounds::tuning::saturation::SaturationOutcome;
use fleetbench_rounds::tuning::search::{Fate, TuneOutcome};
use serde_json::{Value, json};

/// A search with any objective but saturation.
pub fn search(o: &TuneOutcome) -> Value {
    let candidates: Vec<Value> = o
        .candidates
        .iter()
        .map(|c| {
            let (fate, detail) = match &c.fate {
                Fate::Finalist => ("finalist", Value::Null),
                Fate::Eliminated(rung) => ("eliminated", json!({ "after_rung": rung })),
                Fate::Pruned(why) => ("pruned", json!({ "reason": why })),
            };
            json!({
                "name": c.candidate.name,
                "flags": c.candidate.describe(),
                "rung": c.rung,
                "fate": fate,
                "fate_detail": detail,
                "score": c.measured.as_ref().map(|m| m.score),
                "score_repeats": c.measured.as_ref().map(|m| m.score_repeats.clone()),
                "score_power_w": c.measured.as_ref().and_then(|m| m.score_power_w),
                "failure": c.measured.as_ref().and_then(|m| m.failure.clone()),
                "run_ids": c.measured.as_ref().map(|m| m.run_ids.clone()),
            })
        })
        .collect();
    json!({
        "name": o.name,
        "strategy": o.strategy,
        "objective": o.objective,
        "start": o.start,
        "best": o.best,
        "best_flags": o.best_result().map(|c| c.candidate.describe()),
        "margin": o.margin.as_ref().map(|m| json!({
            "runner_up": m.runner_up,
            "relative": m.relative,
            "low": m.low,
            "high": m.high,
            "confidence": m.confidence,
            "repeats": m.repeats,
        })),
        "pareto": o.pareto.iter().map(|p| json!({
            "candidate": p.candidate,
            "level": p.level,
            "output_tokens_per_s": p.output_tokens_per_s,
            "itl_p99_ms": p.itl_p99_ms,
        })).collect::<Vec<_>>(),
        "engine_minutes": o.engine_minutes,
        "full_grid_minutes_estimate": o.full_grid_minutes_estimate,
        "best_run_id": o.best_run_id,
        "start_run_id": o.start_run_id,
        "candidates": candidates,
    })
}

/// A saturation search.
pub fn saturation(o: &SaturationOutcome) -> Value {
    json!({
        "name": o.name,
        "objective": "saturation",
        "best": o.best,
        "fixed_list_levels": o.fixed_list_levels,
        "results": o.results.iter().map(|r| json!({
            "config": r.config,
            "flags": r.flags,
            "saturation": r.saturation,
            "first_miss": r.first_miss,
            "failure": r.failure,
            "probes": r.probes.iter().map(|p| json!({
                "concurrency": p.concurrency,
                "meets": p.meets,
                "output_tokens_per_s": p.output_tokens_per_s,
                "job_id": p.job_id,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
