//! Scoring candidates from their stored results: the objective at the best level that meets
//! the SLO, the Pareto front of throughput against latency, and engine-minutes.

use std::collections::BTreeMap;

use fleetbench_proto::agentpb::{LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::{GetResultsResponse, RunState};

use crate::spec::search::Objective;
use crate::spec::{Slo, level_label};

/// One level of one candidate, averaged over its repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelStats {
    pub label: String,
    pub concurrency: Option<u32>,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub ttft_p99_ms: f64,
    pub itl_p99_ms: f64,
    pub e2e_p99_ms: f64,
    /// Objective values per repeat (for the margin's interval).
    pub repeats: Vec<f64>,
    pub crashed: bool,
    pub meets_slo: bool,
}

/// A candidate's measured results in one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub levels: Vec<LevelStats>,
    /// The objective at the best level meeting the SLO; 0 when none does.
    pub score: f64,
    /// That level's per-repeat values.
    pub score_repeats: Vec<f64>,
    /// Why it was pruned: the engine failed to start (classified), or every level crashed.
    pub failure: Option<String>,
    /// Run ids of its trials.
    pub run_ids: Vec<String>,
}

fn pct(d: &Option<fleetbench_proto::agentpb::Distribution>, key: &str) -> f64 {
    d.as_ref()
        .and_then(|d| d.percentiles.get(key).copied())
        .unwrap_or(f64::INFINITY)
}

fn mean(xs: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.into_iter().collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Whether a level result meets the SLO (a crashed level never does).
pub fn meets(r: &LevelResult, slo: &Slo) -> bool {
    if r.outcome == LevelOutcome::Crashed as i32 || r.completed == 0 {
        return false;
    }
    slo.ttft_ms.is_none_or(|x| pct(&r.ttft_ms, "p99") <= x)
        && slo.itl_ms.is_none_or(|x| pct(&r.itl_ms, "p99") <= x)
        && slo.e2e_ms.is_none_or(|x| pct(&r.e2e_ms, "p99") <= x)
}

fn objective_value(r: &LevelResult, objective: Objective, gpus: u32) -> f64 {
    match objective {
        Objective::RequestsPerS => r.requests_per_s,
        Objective::OutputTokensPerSPerGpu => r.output_tokens_per_s / f64::from(gpus.max(1)),
        Objective::OutputTokensPerS | Objective::Saturation => r.output_tokens_per_s,
    }
}

/// Every candidate (by config name) of a round's results, scored.
pub fn measure(
    results: &GetResultsResponse,
    objective: Objective,
    slo: &Slo,
    gpus: u32,
) -> BTreeMap<String, Measured> {
    let mut out: BTreeMap<String, Measured> = BTreeMap::new();
    for c in &results.configs {
        out.entry(c.name.clone()).or_insert_with(|| Measured {
            levels: Vec::new(),
            score: 0.0,
            score_repeats: Vec::new(),
            failure: None,
            run_ids: Vec::new(),
        });
    }
    for run in &results.runs {
        let Some(m) = out.get_mut(&run.config_name) else {
            continue;
        };
        m.run_ids.push(run.run_id.clone());
        if run.state == RunState::EngineFailed as i32 {
            let class = run
                .crash
                .as_ref()
                .map(|c| {
                    let word = crate::metrics::crash_class_word(c.class());
                    format!("{word}: {}", c.summary)
                })
                .unwrap_or_else(|| "engine failed to start".into());
            m.failure = Some(format!("failed to start ({class})"));
        }
    }
    let mut by: BTreeMap<(String, u32), Vec<&LevelResult>> = BTreeMap::new();
    for l in &results.levels {
        if let Some(r) = &l.result {
            by.entry((l.config_name.clone(), r.level_index))
                .or_default()
                .push(r);
        }
    }
    for ((config, _), rs) in by {
        let Some(m) = out.get_mut(&config) else {
            continue;
        };
        let level = rs[0].level.unwrap_or_default();
        let ok: Vec<&&LevelResult> = rs
            .iter()
            .filter(|r| r.outcome != LevelOutcome::Crashed as i32)
            .collect();
        let crashed = ok.len() < rs.len();
        let stats = LevelStats {
            label: level_label(&level),
            concurrency: level.concurrency,
            output_tokens_per_s: mean(ok.iter().map(|r| r.output_tokens_per_s)),
            requests_per_s: mean(ok.iter().map(|r| r.requests_per_s)),
            ttft_p99_ms: mean(ok.iter().map(|r| pct(&r.ttft_ms, "p99"))),
            itl_p99_ms: mean(ok.iter().map(|r| pct(&r.itl_ms, "p99"))),
            e2e_p99_ms: mean(ok.iter().map(|r| pct(&r.e2e_ms, "p99"))),
            repeats: rs
                .iter()
                .map(|r| objective_value(r, objective, gpus))
                .collect(),
            crashed,
            // A level meets the SLO when every repeat does: one bad repeat is a real risk.
            meets_slo: !crashed && rs.iter().all(|r| meets(r, slo)),
        };
        m.levels.push(stats);
    }
    for m in out.values_mut() {
        let best = m
            .levels
            .iter()
            .filter(|l| l.meets_slo)
            .max_by(|a, b| mean(a.repeats.clone()).total_cmp(&mean(b.repeats.clone())));
        if let Some(b) = best {
            m.score = mean(b.repeats.clone());
            m.score_repeats = b.repeats.clone();
        }
        if m.failure.is_none() && !m.levels.is_empty() && m.levels.iter().all(|l| l.crashed) {
            m.failure = Some("crashed at every level".into());
        }
    }
    out
}

/// Engine-minutes of a round: over its runs, engine start-up plus the levels' durations.
pub fn engine_minutes(results: &GetResultsResponse) -> f64 {
    let start: f64 = results.runs.iter().map(|r| r.engine_start_s).sum();
    let levels: f64 = results
        .levels
        .iter()
        .filter_map(|l| l.result.as_ref())
        .map(|r| r.duration_s)
        .sum();
    (start + levels) / 60.0
}

/// What the full grid would cost, from a cheap round: for each config, its engine start-ups
/// plus its levels' durations scaled up from `fraction` of the requests, times `repeats`.
pub fn full_budget_minutes(results: &GetResultsResponse, fraction: f64, repeats: u32) -> f64 {
    let mut by: BTreeMap<&str, (f64, f64, u32)> = BTreeMap::new();
    for r in &results.runs {
        let e = by.entry(r.config_name.as_str()).or_default();
        e.0 += r.engine_start_s;
        e.2 += 1;
    }
    for l in &results.levels {
        if let Some(r) = &l.result {
            by.entry(l.config_name.as_str()).or_default().1 += r.duration_s;
        }
    }
    let seconds: f64 = by
        .values()
        .map(|(start, levels, runs)| {
            let per_run = (start + levels / fraction.max(1e-9)) / f64::from((*runs).max(1));
            per_run * f64::from(repeats)
        })
        .sum();
    seconds / 60.0
}

/// A point of the throughput/latency plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub candidate: String,
    pub level: String,
    pub output_tokens_per_s: f64,
    pub itl_p99_ms: f64,
}

/// The points no other point beats on both throughput (higher) and p99 ITL (lower), sorted
/// by throughput.
pub fn pareto(points: &[Point]) -> Vec<Point> {
    let mut front: Vec<Point> = points
        .iter()
        .filter(|p| p.output_tokens_per_s > 0.0 && p.itl_p99_ms.is_finite())
        .filter(|p| {
            !points.iter().any(|q| {
                q.output_tokens_per_s >= p.output_tokens_per_s
                    && q.itl_p99_ms <= p.itl_p99_ms
                    && (q.output_tokens_per_s > p.output_tokens_per_s
                        || q.itl_p99_ms < p.itl_p99_ms)
            })
        })
        .cloned()
        .collect();
    front.sort_by(|a, b| a.output_tokens_per_s.total_cmp(&b.output_tokens_per_s));
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, t: f64, l: f64) -> Point {
        Point {
            candidate: name.into(),
            level: "c=1".into(),
            output_tokens_per_s: t,
            itl_p99_ms: l,
        }
    }

    #[test]
    fn pareto_keeps_only_undominated_points() {
        let pts = [
            p("a", 100.0, 10.0),
            p("b", 200.0, 20.0),
            p("c", 150.0, 25.0),
            p("d", 90.0, 9.0),
        ];
        let names: Vec<_> = pareto(&pts).into_iter().map(|x| x.candidate).collect();
        assert_eq!(names, ["d", "a", "b"]);
    }
}
