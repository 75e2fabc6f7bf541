//! The comparison of configs: per workload and load level, every config's figures averaged
//! over its repeats, the winner with its margin, whether that margin stands out from the
//! run-to-run noise, where the winner changes with load, and the crashes.
//!
//! Significance rule: a winner's margin is significant when both the winner and the runner-up
//! have at least two successful repeats at the level and the difference of their mean output
//! throughputs exceeds the sum of their sample standard deviations, i.e. their ±1σ bands over
//! repeats do not overlap. With three repeats each this is about p < 0.07 under Welch's t-test;
//! it is deliberately simple so that a reader can check it from the table. With one repeat the
//! noise is unknown and no margin is called significant.
//!
//! A config whose engine crashed, or whose level failed, in any repeat at a level does not win
//! that level: a config that falls over is not a candidate at that load.

use std::collections::{BTreeMap, HashMap};

use fleetbench_proto::agentpb::{self, LevelOutcome};
use fleetbench_proto::controllerpb::{
    CompareGroup, CompareResponse, ConfigLevelStats, CrashInfo, Crossover, GetResultsResponse,
    RunState, StoredLevel,
};

use crate::spec::level_label;

/// Compares every config of the jobs in `results` (one job or several).
pub fn compare(results: &GetResultsResponse) -> CompareResponse {
    let names = display_names(results);
    let levels = latest_attempts(&results.levels);

    let mut groups: BTreeMap<(String, LevelKey), LevelSamples<'_>> = BTreeMap::new();
    for l in &levels {
        let Some(r) = &l.result else { continue };
        let level = r.level.unwrap_or_default();
        let entry = groups
            .entry((l.workload.clone(), LevelKey::of(&level)))
            .or_insert_with(|| (level, BTreeMap::new()));
        let key = ConfigKey {
            order: config_order(results, l),
            job_id: l.job_id.clone(),
            config_id: l.config_id.clone(),
        };
        entry.1.entry(key).or_default().push(l);
    }

    let mut out = CompareResponse::default();
    for ((workload, _), (level, configs)) in &groups {
        let stats: Vec<(ConfigLevelStats, bool)> = configs
            .iter()
            .map(|(key, samples)| config_stats(key, samples, &names))
            .collect();
        out.groups.push(decide(workload, level, stats));
    }
    out.crossovers = crossovers(&out.groups);
    out.crashes = crashes(results, &levels, &names);
    out
}

/// One level of one workload: the level and each config's stored results at it.
type LevelSamples<'a> = (
    agentpb::LoadLevel,
    BTreeMap<ConfigKey, Vec<&'a StoredLevel>>,
);

/// Orders configs within a group the way the spec lists them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ConfigKey {
    order: usize,
    job_id: String,
    config_id: String,
}

/// A load level as a sortable key: open-loop rates after closed-loop levels, each by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct LevelKey {
    rate_milli: Option<u64>,
    concurrency: Option<u32>,
}

impl LevelKey {
    fn of(level: &agentpb::LoadLevel) -> LevelKey {
        LevelKey {
            rate_milli: level.request_rate.map(|r| (r * 1000.0).round() as u64),
            concurrency: level.concurrency,
        }
    }
}

fn config_order(results: &GetResultsResponse, l: &StoredLevel) -> usize {
    results
        .configs
        .iter()
        .position(|c| c.config_id == l.config_id && (c.job_id.is_empty() || c.job_id == l.job_id))
        .unwrap_or(usize::MAX)
}

/// Config names, made unique across jobs: a name used by two jobs gets its job's id prefix.
fn display_names(results: &GetResultsResponse) -> HashMap<(String, String), String> {
    let mut by_name: HashMap<String, Vec<(String, String)>> = HashMap::new();
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for l in &results.levels {
        let k = (l.job_id.clone(), l.config_id.clone());
        if !seen.iter().any(|(j, c, _)| (j, c) == (&k.0, &k.1)) {
            seen.push((k.0.clone(), k.1.clone(), l.config_name.clone()));
        }
    }
    for c in &results.configs {
        if !seen
            .iter()
            .any(|(j, id, _)| j == &c.job_id && id == &c.config_id)
        {
            seen.push((c.job_id.clone(), c.config_id.clone(), c.name.clone()));
        }
    }
    for (job, id, name) in &seen {
        let list = by_name.entry(name.clone()).or_default();
        if !list.contains(&(job.clone(), id.clone())) {
            list.push((job.clone(), id.clone()));
        }
    }
    let mut out = HashMap::new();
    for (job, id, name) in seen {
        let clash = by_name.get(&name).is_some_and(|l| l.len() > 1);
        let shown = if clash {
            format!("{name}@{}", job.chars().take(8).collect::<String>())
        } else {
            name
        };
        out.insert((job, id), shown);
    }
    out
}

/// One level result per (job, config, workload, repeat, level): the latest attempt wins, so a
/// trial retried on another host counts once.
fn latest_attempts(levels: &[StoredLevel]) -> Vec<&StoredLevel> {
    let mut best: BTreeMap<(String, String, String, u32, u32), &StoredLevel> = BTreeMap::new();
    for l in levels {
        let Some(r) = &l.result else { continue };
        let key = (
            l.job_id.clone(),
            l.config_id.clone(),
            l.workload.clone(),
            l.repeat,
            r.level_index,
        );
        match best.get(&key) {
            Some(prev) if prev.attempt > l.attempt => {}
            _ => {
                best.insert(key, l);
            }
        }
    }
    best.into_values().collect()
}

/// The value of percentile `p` in a distribution whose keys are "p50", "p99", "p99.9".
pub fn percentile(dist: Option<&agentpb::Distribution>, p: f64) -> Option<f64> {
    dist?.percentiles.iter().find_map(|(k, v)| {
        let n: f64 = k.trim_start_matches('p').parse().ok()?;
        ((n - p).abs() < 1e-9).then_some(*v)
    })
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Sample standard deviation (n - 1); 0 for fewer than two values.
fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// The figures of one config at one level, and whether it may win the level: every repeat ran
/// to the end (none crashed or failed).
fn config_stats(
    key: &ConfigKey,
    samples: &[&StoredLevel],
    names: &HashMap<(String, String), String>,
) -> (ConfigLevelStats, bool) {
    let ok: Vec<&agentpb::LevelResult> = samples
        .iter()
        .filter_map(|l| l.result.as_ref())
        .filter(|r| r.outcome() == LevelOutcome::Ok)
        .collect();
    let crashed = samples
        .iter()
        .filter_map(|l| l.result.as_ref())
        .find(|r| r.outcome() == LevelOutcome::Crashed);
    let tput: Vec<f64> = ok.iter().map(|r| r.output_tokens_per_s).collect();
    let avg = |f: &dyn Fn(&agentpb::LevelResult) -> Option<f64>| {
        let xs: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
        mean(&xs)
    };
    let name = names
        .get(&(key.job_id.clone(), key.config_id.clone()))
        .cloned()
        .or_else(|| samples.first().map(|l| l.config_name.clone()))
        .unwrap_or_default();
    let eligible = !ok.is_empty() && ok.len() == samples.len();
    let stats = ConfigLevelStats {
        config_id: key.config_id.clone(),
        config_name: name,
        job_id: key.job_id.clone(),
        repeats: samples.len() as u32,
        output_tokens_per_s: mean(&tput),
        output_tokens_per_s_spread: std_dev(&tput),
        requests_per_s: avg(&|r| Some(r.requests_per_s)),
        ttft_p50_ms: avg(&|r| percentile(r.ttft_ms.as_ref(), 50.0)),
        ttft_p99_ms: avg(&|r| percentile(r.ttft_ms.as_ref(), 99.0)),
        itl_p50_ms: avg(&|r| percentile(r.itl_ms.as_ref(), 50.0)),
        itl_p99_ms: avg(&|r| percentile(r.itl_ms.as_ref(), 99.0)),
        e2e_p50_ms: avg(&|r| percentile(r.e2e_ms.as_ref(), 50.0)),
        e2e_p99_ms: avg(&|r| percentile(r.e2e_ms.as_ref(), 99.0)),
        errors: samples
            .iter()
            .filter_map(|l| l.result.as_ref())
            .map(|r| r.failed)
            .sum(),
        crashed: crashed.is_some(),
        crash_class: crashed
            .and_then(|r| r.crash.as_ref())
            .map_or(0, |c| c.class),
        gpu_power_w: {
            let watts: Vec<f64> = samples
                .iter()
                .filter(|l| {
                    l.result
                        .as_ref()
                        .is_some_and(|r| r.outcome() == LevelOutcome::Ok)
                })
                .filter_map(|l| l.gpu_power_w)
                .collect();
            (!watts.is_empty()).then(|| mean(&watts))
        },
    };
    (stats, eligible)
}

fn decide(
    workload: &str,
    level: &agentpb::LoadLevel,
    configs: Vec<(ConfigLevelStats, bool)>,
) -> CompareGroup {
    let mut group = CompareGroup {
        workload: workload.to_string(),
        level: Some(*level),
        level_label: level_label(level),
        ..Default::default()
    };
    let mut ranked: Vec<&ConfigLevelStats> = configs
        .iter()
        .filter(|(_, eligible)| *eligible)
        .map(|(s, _)| s)
        .collect();
    ranked.sort_by(|a, b| b.output_tokens_per_s.total_cmp(&a.output_tokens_per_s));
    if let Some(w) = ranked.first() {
        group.winner_config = w.config_name.clone();
        if let Some(r) = ranked.get(1) {
            group.runner_up_config = r.config_name.clone();
            if r.output_tokens_per_s > 0.0 {
                group.margin_pct =
                    (w.output_tokens_per_s - r.output_tokens_per_s) / r.output_tokens_per_s * 100.0;
            }
            group.margin_significant = w.repeats >= 2
                && r.repeats >= 2
                && w.output_tokens_per_s - r.output_tokens_per_s
                    > w.output_tokens_per_s_spread + r.output_tokens_per_s_spread;
        }
    }
    group.configs = configs.into_iter().map(|(s, _)| s).collect();
    group
}

fn crossovers(groups: &[CompareGroup]) -> Vec<Crossover> {
    let mut out = Vec::new();
    let mut prev: Option<&CompareGroup> = None;
    for g in groups {
        if g.winner_config.is_empty() {
            continue;
        }
        if let Some(p) = prev.filter(|p| p.workload == g.workload)
            && p.winner_config != g.winner_config
        {
            out.push(Crossover {
                workload: g.workload.clone(),
                from_level: p.level_label.clone(),
                to_level: g.level_label.clone(),
                from_winner: p.winner_config.clone(),
                to_winner: g.winner_config.clone(),
            });
        }
        prev = Some(g);
    }
    out
}

fn crashes(
    results: &GetResultsResponse,
    levels: &[&StoredLevel],
    names: &HashMap<(String, String), String>,
) -> Vec<CrashInfo> {
    let name = |job: &str, id: &str, fallback: &str| {
        names
            .get(&(job.to_string(), id.to_string()))
            .cloned()
            .unwrap_or_else(|| fallback.to_string())
    };
    let mut out = Vec::new();
    for l in levels {
        let Some(r) = &l.result else { continue };
        if r.outcome() != LevelOutcome::Crashed {
            continue;
        }
        let level = r.level.unwrap_or_default();
        out.push(CrashInfo {
            config_name: name(&l.job_id, &l.config_id, &l.config_name),
            host: l.host.clone(),
            workload: l.workload.clone(),
            level_label: level_label(&level),
            run_id: l.run_id.clone(),
            crash: r.crash.clone(),
        });
    }
    // Engines that never became ready: no level ran, but the crash is a result too.
    for run in &results.runs {
        if run.state() == RunState::EngineFailed && run.crash.is_some() {
            out.push(CrashInfo {
                config_name: name(&run.job_id, &run.config_id, &run.config_name),
                host: run.host.clone(),
                workload: run.workload.clone(),
                level_label: "engine start".to_string(),
                run_id: run.run_id.clone(),
                crash: run.crash.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
