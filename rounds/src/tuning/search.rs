//! The search driver: grid, random and successive halving. Each round is one ordinary job
//! (one config per candidate) submitted through the controller, so candidates run in
//! parallel on every matching host, crashes are classified by the scheduler, and every
//! result is stored. A candidate that fails to start or crashes everywhere is pruned.
//!
//! The winner's curse: the best of many candidates measured once is biased upward, and a
//! margin computed from the round that picked it overstates itself. So the top finalists
//! (up to [`CONFIRM_FINALISTS`]) are measured again in a fresh confirmation round with fresh
//! repeats (at least [`CONFIRM_MIN_REPEATS`]); the winner, its margin and its confidence come
//! from that round only (`fleetbench_stats::decide::confirm`; docs/tuning.md says what the
//! confidence means). A candidate whose error rate exceeds the SLO's `max_error_rate` meets no
//! level and is infeasible.

use std::collections::BTreeMap;

use fleetbench_proto::controllerpb::JobKind;

use super::score::{self, Measured, Point};
use super::space::{self, Candidate, Round};
use super::{TuneError, hosts, parse};
use crate::fleet::Fleet;
use fleetbench_spec::search::{Objective, SearchSpec, Strategy};

/// Finalists re-measured in the confirmation round.
pub const CONFIRM_FINALISTS: usize = 3;
/// The fewest repeats of the confirmation round.
pub const CONFIRM_MIN_REPEATS: u32 = 3;

/// Where a candidate's search ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// Ran in the last round.
    Finalist,
    /// Ranked out after this (0-based) rung.
    Eliminated(u32),
    /// Failed to start or crashed at every level, with the classification.
    Pruned(String),
}

/// One candidate's results.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateResult {
    pub candidate: Candidate,
    /// Its results in the last round it ran.
    pub measured: Option<Measured>,
    pub rung: u32,
    pub fate: Fate,
}

/// One job the search ran.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundSummary {
    pub job_id: String,
    pub rung: u32,
    pub candidates: usize,
    pub requests_fraction: f64,
    pub repeats: u32,
    pub engine_minutes: f64,
    /// The confirmation round (fresh repeats of the finalists).
    pub confirmation: bool,
}

/// The best candidate's lead over the runner-up, from the confirmation round.
#[derive(Debug, Clone, PartialEq)]
pub struct Margin {
    pub runner_up: String,
    /// Relative lead (ratio of geometric means of the objective − 1), with its 95% interval.
    pub relative: f64,
    pub low: f64,
    pub high: f64,
    /// 1 − p: see [`p`](Self::p).
    pub confidence: f64,
    /// The largest Holm-adjusted two-sided p-value of Welch's test of the best against each
    /// other finalist, in the confirmation round.
    pub p: f64,
    /// p ≤ 0.05: the best beats every other finalist.
    pub confirmed: bool,
    /// Repeats behind the figures (the fewer of the two sides').
    pub repeats: usize,
}

/// The end of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneOutcome {
    pub name: String,
    pub strategy: String,
    pub objective: String,
    pub candidates: Vec<CandidateResult>,
    /// The best candidate's name, if any candidate met the SLO.
    pub best: Option<String>,
    /// The starting config's name.
    pub start: String,
    pub margin: Option<Margin>,
    pub pareto: Vec<Point>,
    pub rounds: Vec<RoundSummary>,
    /// Engine-minutes the search spent (engine start-up plus level durations, all runs).
    pub engine_minutes: f64,
    /// What every candidate at the full budget would have cost, scaled from each
    /// candidate's cost in the first rung (equal to `engine_minutes` for a grid).
    pub full_grid_minutes_estimate: f64,
    /// A run of the best and of the starting config (for `fleetbench diff`).
    pub best_run_id: Option<String>,
    pub start_run_id: Option<String>,
}

impl TuneOutcome {
    /// The best candidate's result.
    pub fn best_result(&self) -> Option<&CandidateResult> {
        let b = self.best.as_ref()?;
        self.candidates.iter().find(|c| &c.candidate.name == b)
    }
}

fn rank(measured: &BTreeMap<String, Measured>, names: &[String]) -> Vec<String> {
    let mut alive: Vec<&String> = names
        .iter()
        .filter(|n| measured.get(*n).is_some_and(|m| m.failure.is_none()))
        .collect();
    alive.sort_by(|a, b| {
        let (x, y) = (measured[*a].score, measured[*b].score);
        y.total_cmp(&x).then_with(|| a.cmp(b))
    });
    alive.into_iter().cloned().collect()
}

/// Runs a search spec (`[search]` with any objective but `saturation`).
pub async fn run_search<F: Fleet>(
    fleet: &mut F,
    file_name: &str,
    text: &str,
    mut progress: impl FnMut(String),
) -> Result<TuneOutcome, TuneError> {
    let (spec, search) = parse(file_name, text)?;
    // What the hosts are decides the per-GPU divisor, and whether per-watt can be measured at
    // all: a host without GPUs is refused here, before any candidate runs.
    let wait = if search.objective == Objective::OutputTokensPerSPerWatt {
        std::time::Duration::from_secs(10)
    } else {
        std::time::Duration::ZERO
    };
    let agents = hosts::agents_with_facts(fleet, wait).await?;
    hosts::check_power(search.objective, &spec.hosts, &agents)?;
    let gpus = hosts::gpu_counts(&agents);
    let mut cands = space::candidates(&spec, &search);
    let start_name = spec.configs[0].name.clone();
    if !cands.iter().any(|c| c.name == start_name) {
        // The starting config is measured too, as the reference of the diff and the margin.
        cands.insert(
            0,
            Candidate {
                name: start_name.clone(),
                flags: space::start_point(&spec.configs[0], &search),
            },
        );
    }
    let (rungs, eta) = match search.strategy {
        Strategy::SuccessiveHalving { eta, rungs } => (rungs, eta),
        _ => (1, 1),
    };
    let mut results: BTreeMap<String, CandidateResult> = cands
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                CandidateResult {
                    candidate: c.clone(),
                    measured: None,
                    rung: 0,
                    fate: Fate::Finalist,
                },
            )
        })
        .collect();
    let mut alive: Vec<String> = cands.iter().map(|c| c.name.clone()).collect();
    let mut rounds = Vec::new();
    let mut run_ids: BTreeMap<String, String> = BTreeMap::new();
    let mut grid_estimate: Option<f64> = None;
    let mut pareto_points = Vec::new();
    for rung in 0..rungs {
        let last = rung + 1 == rungs;
        let fraction = f64::from(eta).powi(-((rungs - 1 - rung) as i32));
        let repeats = if last { spec.repeats } else { 1 };
        let round = Round {
            job_name: format!("{} rung {}", spec.name, rung + 1),
            candidates: alive.iter().map(|n| results[n].candidate.clone()).collect(),
            repeats,
            budget_fraction: fraction,
            concurrency: None,
            requests: None,
        };
        let toml = space::round_toml(text, &round).map_err(|e| TuneError::Toml(e.to_string()))?;
        let job_id = fleet.submit(&toml, file_name, "", JobKind::Tune).await?;
        progress(format!(
            "rung {}/{rungs}: job {job_id}: {} candidates, {:.0}% of the requests, {repeats} repeat(s)",
            rung + 1,
            alive.len(),
            fraction * 100.0
        ));
        let job = fleet.wait(&job_id).await?;
        let res = fleet.results(std::slice::from_ref(&job_id)).await?;
        let minutes = score::engine_minutes(&res);
        let measured = score::measure(&res, search.objective, &spec.load.slo, &gpus)?;
        for run in &res.runs {
            run_ids.insert(run.config_name.clone(), run.run_id.clone());
        }
        rounds.push(RoundSummary {
            job_id: job_id.clone(),
            rung,
            candidates: alive.len(),
            requests_fraction: fraction,
            repeats,
            engine_minutes: minutes,
            confirmation: false,
        });
        for name in &alive {
            let r = results
                .get_mut(name)
                .expect("alive candidates have results");
            r.rung = rung;
            r.measured = measured.get(name).cloned();
            match measured.get(name) {
                Some(m) if m.failure.is_some() => {
                    r.fate = Fate::Pruned(m.failure.clone().unwrap_or_default());
                    progress(format!(
                        "  pruned {name}: {}",
                        m.failure.as_deref().unwrap_or("")
                    ));
                }
                None => {
                    let why = format!("no result (job ended {})", job.error);
                    r.fate = Fate::Pruned(why);
                }
                _ => {}
            }
        }
        if rung == 0 {
            grid_estimate = Some(score::full_budget_minutes(&res, fraction, spec.repeats));
        }
        let ranked = rank(&measured, &alive);
        if last {
            for name in &ranked {
                if let Some(m) = measured.get(name) {
                    for l in &m.levels {
                        pareto_points.push(Point {
                            candidate: name.clone(),
                            level: l.label.clone(),
                            output_tokens_per_s: l.output_tokens_per_s,
                            itl_p99_ms: l.itl_p99_ms,
                        });
                    }
                }
            }
            alive = ranked;
            break;
        }
        let keep = ranked.len().div_ceil(eta as usize).max(1);
        for name in &ranked[keep.min(ranked.len())..] {
            if let Some(r) = results.get_mut(name) {
                r.fate = Fate::Eliminated(rung);
            }
        }
        progress(format!(
            "  promoted: {}",
            ranked[..keep.min(ranked.len())].join(", ")
        ));
        alive = ranked.into_iter().take(keep).collect();
        if alive.is_empty() {
            break;
        }
    }
    // The confirmation round: the top feasible finalists, fresh repeats, full budget.
    let finalists: Vec<String> = alive
        .iter()
        .filter(|n| results[*n].measured.as_ref().is_some_and(|m| m.score > 0.0))
        .take(CONFIRM_FINALISTS)
        .cloned()
        .collect();
    for name in alive.iter().filter(|n| !finalists.contains(n)) {
        if let Some(r) = results.get_mut(name)
            && r.fate == Fate::Finalist
        {
            r.fate = Fate::Eliminated(r.rung);
        }
    }
    let (best, margin) = if finalists.len() >= 2 {
        let repeats = spec.repeats.max(CONFIRM_MIN_REPEATS);
        let round = Round {
            job_name: format!("{} confirmation", spec.name),
            candidates: finalists
                .iter()
                .map(|n| results[n].candidate.clone())
                .collect(),
            repeats,
            budget_fraction: 1.0,
            concurrency: None,
            requests: None,
        };
        let toml = space::round_toml(text, &round).map_err(|e| TuneError::Toml(e.to_string()))?;
        let job_id = fleet.submit(&toml, file_name, "", JobKind::Tune).await?;
        progress(format!(
            "confirmation: job {job_id}: {} finalists ({}), {repeats} fresh repeat(s)",
            finalists.len(),
            finalists.join(", ")
        ));
        fleet.wait(&job_id).await?;
        let res = fleet.results(std::slice::from_ref(&job_id)).await?;
        let measured = score::measure(&res, search.objective, &spec.load.slo, &gpus)?;
        for run in &res.runs {
            run_ids.insert(run.config_name.clone(), run.run_id.clone());
        }
        let rung = rounds.last().map_or(0, |r| r.rung) + 1;
        rounds.push(RoundSummary {
            job_id,
            rung,
            candidates: finalists.len(),
            requests_fraction: 1.0,
            repeats,
            engine_minutes: score::engine_minutes(&res),
            confirmation: true,
        });
        for name in &finalists {
            if let Some(r) = results.get_mut(name) {
                r.measured = measured.get(name).cloned();
                r.rung = rung;
            }
        }
        confirmed(&finalists, &measured)
    } else {
        // One feasible finalist (or none): nothing to confirm it against.
        (finalists.first().cloned(), None)
    };
    let engine_minutes: f64 = rounds.iter().map(|r| r.engine_minutes).sum();
    let full_grid_minutes_estimate = if rungs == 1 {
        engine_minutes
    } else {
        grid_estimate.unwrap_or(0.0)
    };
    let mut candidates: Vec<CandidateResult> = results.into_values().collect();
    candidates.sort_by(|a, b| {
        let key = |c: &CandidateResult| {
            let s = c.measured.as_ref().map_or(0.0, |m| m.score);
            (std::cmp::Reverse(c.rung), -s)
        };
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    Ok(TuneOutcome {
        name: spec.name.clone(),
        strategy: strategy_label(&search),
        objective: search.objective.name().to_string(),
        best_run_id: best.as_ref().and_then(|b| run_ids.get(b).cloned()),
        start_run_id: run_ids.get(&start_name).cloned(),
        candidates,
        best,
        start: start_name,
        margin,
        pareto: score::pareto(&pareto_points),
        rounds,
        engine_minutes,
        full_grid_minutes_estimate,
    })
}

/// The winner and its margin from the confirmation round's measurements: the feasible
/// finalists (score above 0) tested with `fleetbench_stats::decide::confirm`.
fn confirmed(
    finalists: &[String],
    measured: &BTreeMap<String, Measured>,
) -> (Option<String>, Option<Margin>) {
    let feasible: Vec<(&String, &Measured)> = finalists
        .iter()
        .filter_map(|n| measured.get(n).map(|m| (n, m)))
        .filter(|(_, m)| m.score > 0.0 && m.failure.is_none())
        .collect();
    let values: Vec<&[f64]> = feasible.iter().map(|(_, m)| &m.score_repeats[..]).collect();
    let Some(c) = fleetbench_stats::decide::confirm(&values, fleetbench_stats::DEFAULT_ALPHA)
    else {
        return (None, None);
    };
    let best = feasible[c.winner].0.clone();
    let margin = c.runner_up.map(|r| {
        let (runner, rm) = feasible[r];
        let wm = feasible[c.winner].1;
        let repeats = wm.score_repeats.len().min(rm.score_repeats.len());
        match c.effect {
            Some(e) => Margin {
                runner_up: runner.clone(),
                relative: e.relative(),
                low: e.low - 1.0,
                high: e.high - 1.0,
                confidence: c.confidence,
                p: c.p,
                confirmed: c.confirmed,
                repeats,
            },
            None => Margin {
                runner_up: runner.clone(),
                relative: wm.score / rm.score - 1.0,
                low: f64::NAN,
                high: f64::NAN,
                confidence: f64::NAN,
                p: f64::NAN,
                confirmed: false,
                repeats,
            },
        }
    });
    (Some(best), margin)
}

/// The strategy in words, for output.
pub fn strategy_label(search: &SearchSpec) -> String {
    match &search.strategy {
        Strategy::Grid => "grid".into(),
        Strategy::Random { budget, seed } => format!("random (budget {budget}, seed {seed})"),
        Strategy::SuccessiveHalving { eta, rungs } => {
            format!("successive halving (eta {eta}, {rungs} rungs)")
        }
    }
}
