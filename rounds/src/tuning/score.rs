//! Scoring candidates from their stored results: the objective at the best level that meets
//! the SLO (latency objectives, and the error rate within `max_error_rate`), the Pareto front
//! of throughput against latency, and engine-minutes.

use fleetbench_proto::Word;
use std::collections::BTreeMap;

use fleetbench_proto::agentpb::{LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::{GetResultsResponse, RunState, StoredLevel};

use fleetbench_spec::search::Objective;
use fleetbench_spec::{Slo, level_label};

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
    /// Mean GPU power (W, all the host's GPUs) over the repeats that reported it.
    pub gpu_power_w: Option<f64>,
    /// Objective values per repeat (for the margin's interval).
    pub repeats: Vec<f64>,
    pub crashed: bool,
    /// failed / (completed + failed) over the repeats.
    pub error_rate: f64,
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
    /// That level's mean GPU power, where reported.
    pub score_power_w: Option<f64>,
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

/// GPUs per host (from the agents' facts); a host missing here counts as one GPU.
pub type HostGpus = BTreeMap<String, u32>;

/// A per-watt objective met a level measured without GPU power.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "objective {objective} needs GPU power; host {host} reported none \
     (candidate {candidate}, level {level})"
)]
pub struct NoPower {
    /// The objective's spec name.
    pub objective: &'static str,
    pub host: String,
    pub candidate: String,
    pub level: String,
}

/// The objective of one measured repeat. A crashed or empty level scores 0 (it never meets
/// the SLO); per watt, a level without power is an error, never a silent fallback.
fn objective_value(
    l: &StoredLevel,
    r: &LevelResult,
    objective: Objective,
    gpus: &HostGpus,
) -> Result<f64, NoPower> {
    if r.outcome == LevelOutcome::Crashed as i32 || r.completed == 0 {
        return Ok(0.0);
    }
    Ok(match objective {
        Objective::RequestsPerS => r.requests_per_s,
        Objective::OutputTokensPerSPerGpu => {
            let n = gpus.get(&l.host).copied().unwrap_or(1);
            r.output_tokens_per_s / f64::from(n.max(1))
        }
        Objective::OutputTokensPerSPerWatt => match l.gpu_power_w.filter(|w| *w > 0.0) {
            Some(w) => r.output_tokens_per_s / w,
            None => {
                return Err(NoPower {
                    objective: objective.name(),
                    host: l.host.clone(),
                    candidate: l.config_name.clone(),
                    level: level_label(&r.level.unwrap_or_default()),
                });
            }
        },
        Objective::OutputTokensPerS | Objective::Saturation => r.output_tokens_per_s,
    })
}

/// Every candidate (by config name) of a round's results, scored. `gpus` gives the per-GPU
/// objective its divisor; the per-watt objective fails on a level measured without power.
pub fn measure(
    results: &GetResultsResponse,
    objective: Objective,
    slo: &Slo,
    gpus: &HostGpus,
) -> Result<BTreeMap<String, Measured>, NoPower> {
    let mut out: BTreeMap<String, Measured> = BTreeMap::new();
    for c in &results.configs {
        out.entry(c.name.clone()).or_insert_with(|| Measured {
            levels: Vec::new(),
            score: 0.0,
            score_repeats: Vec::new(),
            score_power_w: None,
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
                    let word = c.class().word();
                    format!("{word}: {}", c.summary)
                })
                .unwrap_or_else(|| "engine failed to start".into());
            m.failure = Some(format!("failed to start ({class})"));
        }
    }
    let mut by: BTreeMap<(String, u32), Vec<(&StoredLevel, &LevelResult)>> = BTreeMap::new();
    for l in &results.levels {
        if let Some(r) = &l.result {
            by.entry((l.config_name.clone(), r.level_index))
                .or_default()
                .push((l, r));
        }
    }
    for ((config, _), rs) in by {
        let Some(m) = out.get_mut(&config) else {
            continue;
        };
        let level = rs[0].1.level.unwrap_or_default();
        let ok: Vec<&(&StoredLevel, &LevelResult)> = rs
            .iter()
            .filter(|(_, r)| r.outcome != LevelOutcome::Crashed as i32)
            .collect();
        let crashed = ok.len() < rs.len();
        let powers: Vec<f64> = ok.iter().filter_map(|(l, _)| l.gpu_power_w).collect();
        let failed: u64 = rs.iter().map(|(_, r)| r.failed).sum();
        let requests = failed + rs.iter().map(|(_, r)| r.completed).sum::<u64>();
        let error_rate = if requests > 0 {
            failed as f64 / requests as f64
        } else {
            0.0
        };
        let stats = LevelStats {
            label: level_label(&level),
            concurrency: level.concurrency,
            output_tokens_per_s: mean(ok.iter().map(|(_, r)| r.output_tokens_per_s)),
            requests_per_s: mean(ok.iter().map(|(_, r)| r.requests_per_s)),
            ttft_p99_ms: mean(ok.iter().map(|(_, r)| pct(&r.ttft_ms, "p99"))),
            itl_p99_ms: mean(ok.iter().map(|(_, r)| pct(&r.itl_ms, "p99"))),
            e2e_p99_ms: mean(ok.iter().map(|(_, r)| pct(&r.e2e_ms, "p99"))),
            gpu_power_w: (!powers.is_empty()).then(|| mean(powers)),
            repeats: rs
                .iter()
                .map(|(l, r)| objective_value(l, r, objective, gpus))
                .collect::<Result<_, _>>()?,
            crashed,
            error_rate,
            // A level meets the SLO when every repeat does (one bad repeat is a real risk) and
            // its error rate over the repeats is within the budget: a config that drops
            // requests to go fast is infeasible.
            meets_slo: !crashed
                && error_rate <= slo.max_error_rate
                && rs.iter().all(|(_, r)| meets(r, slo)),
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
            m.score_power_w = b.gpu_power_w;
        }
        if m.failure.is_none() && !m.levels.is_empty() && m.levels.iter().all(|l| l.crashed) {
            m.failure = Some("crashed at every level".into());
        }
    }
    Ok(out)
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
    use fleetbench_proto::agentpb::{Distribution, LoadLevel};
    use fleetbench_proto::controllerpb::ConfigInfo;

    use super::*;

    fn level(config: &str, host: &str, repeat: u32, tok_s: f64, watts: Option<f64>) -> StoredLevel {
        let p99 = |v: f64| Distribution {
            count: 100,
            percentiles: [("p99".to_string(), v)].into_iter().collect(),
            ..Default::default()
        };
        StoredLevel {
            job_id: "j".into(),
            host: host.into(),
            config_name: config.into(),
            repeat,
            result: Some(LevelResult {
                level_index: 0,
                level: Some(LoadLevel {
                    concurrency: Some(64),
                    ..Default::default()
                }),
                completed: 100,
                output_tokens_per_s: tok_s,
                requests_per_s: tok_s / 100.0,
                ttft_ms: Some(p99(500.0)),
                itl_ms: Some(p99(20.0)),
                e2e_ms: Some(p99(2000.0)),
                ..Default::default()
            }),
            gpu_power_w: watts,
            lease_epoch: 0,
            ..Default::default()
        }
    }

    fn results(levels: Vec<StoredLevel>) -> GetResultsResponse {
        let mut names: Vec<String> = levels.iter().map(|l| l.config_name.clone()).collect();
        names.dedup();
        GetResultsResponse {
            configs: names
                .into_iter()
                .map(|name| ConfigInfo {
                    name,
                    ..Default::default()
                })
                .collect(),
            levels,
            ..Default::default()
        }
    }

    #[test]
    fn per_watt_divides_each_repeats_throughput_by_its_power() {
        // "fast" makes more tokens, "frugal" more tokens per joule: per watt, frugal wins.
        let res = results(vec![
            level("fast", "h1", 0, 2000.0, Some(800.0)),
            level("fast", "h1", 1, 2100.0, Some(840.0)),
            level("frugal", "h2", 0, 1500.0, Some(500.0)),
            level("frugal", "h2", 1, 1440.0, Some(480.0)),
        ]);
        let slo = Slo::default();
        let gpus = HostGpus::new();
        let m = measure(&res, Objective::OutputTokensPerSPerWatt, &slo, &gpus).unwrap();
        assert_eq!(m["fast"].score_repeats, [2.5, 2.5]);
        assert_eq!(m["frugal"].score_repeats, [3.0, 3.0]);
        assert_eq!(m["frugal"].score, 3.0);
        assert_eq!(m["frugal"].score_power_w, Some(490.0));
        assert_eq!(m["fast"].levels[0].gpu_power_w, Some(820.0));
        // By throughput alone the order is the other way round.
        let t = measure(&res, Objective::OutputTokensPerS, &slo, &gpus).unwrap();
        assert!(t["fast"].score > t["frugal"].score);
    }

    #[test]
    fn per_watt_without_power_is_an_error_naming_the_objective_and_host() {
        let res = results(vec![
            level("a", "gpu-1", 0, 2000.0, Some(800.0)),
            level("b", "cpu-2", 0, 1500.0, None),
        ]);
        let err = measure(
            &res,
            Objective::OutputTokensPerSPerWatt,
            &Slo::default(),
            &HostGpus::new(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "objective output_tokens_per_s_per_watt needs GPU power; host cpu-2 reported none \
             (candidate b, level c=64)"
        );
        // Other objectives do not need power.
        assert!(
            measure(
                &res,
                Objective::OutputTokensPerS,
                &Slo::default(),
                &HostGpus::new()
            )
            .is_ok()
        );
    }

    #[test]
    fn a_level_above_the_error_budget_does_not_meet_the_slo() {
        let mut levels = vec![
            level("clean", "h1", 0, 2000.0, None),
            level("clean", "h1", 1, 2000.0, None),
            level("lossy", "h1", 0, 3000.0, None),
            level("lossy", "h1", 1, 3000.0, None),
        ];
        // lossy: 3 failed of 103 in one repeat: 3 of 203 over both, 1.5% > 1%.
        levels[2].result.as_mut().unwrap().failed = 3;
        let res = results(levels);
        let m = measure(
            &res,
            Objective::OutputTokensPerS,
            &Slo::default(),
            &HostGpus::new(),
        )
        .unwrap();
        let lossy = &m["lossy"].levels[0];
        assert!((lossy.error_rate - 3.0 / 203.0).abs() < 1e-12);
        assert!(!lossy.meets_slo && m["lossy"].score == 0.0);
        assert_eq!(m["clean"].score, 2000.0);
        let lenient = Slo {
            max_error_rate: 0.02,
            ..Slo::default()
        };
        let m = measure(
            &res,
            Objective::OutputTokensPerS,
            &lenient,
            &HostGpus::new(),
        )
        .unwrap();
        assert_eq!(m["lossy"].score, 3000.0);
    }

    #[test]
    fn per_gpu_divides_by_the_hosts_gpus() {
        let res = results(vec![
            level("eight", "h8", 0, 8000.0, None),
            level("two", "h2", 0, 3000.0, None),
        ]);
        let gpus: HostGpus = [("h8".to_string(), 8), ("h2".to_string(), 2)].into();
        let m = measure(
            &res,
            Objective::OutputTokensPerSPerGpu,
            &Slo::default(),
            &gpus,
        )
        .unwrap();
        assert_eq!(m["eight"].score, 1000.0);
        assert_eq!(m["two"].score, 1500.0);
    }

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
