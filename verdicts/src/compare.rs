//! The comparison of configs: per workload and load level, every config's figures averaged
//! over its repeats, the winner with its margin, whether that margin is significant, where the
//! winner changes with load, and the crashes.
//!
//! Significance (docs/tuning.md): winner against runner-up on the log of output tokens/s, as
//! the job's design allows (`design`: paired by repeat block in a blocked job, two samples
//! otherwise, through a shared config across jobs), the variances moderated over the levels
//! compared (`fleetbench_stats::moderated`), two-sided at `alpha` (0.05 unless asked
//! otherwise), with Holm's correction over every level and workload tested, so that an A/A
//! job calls anything significant at most `alpha` of the time. The winner is the config with
//! the highest geometric mean, the scale the test uses; each tested level carries the effect
//! with the interval at the level Holm tested it at (it excludes 0 exactly when the level is
//! significant) and the effect the test detects with 80% power. With one repeat on a side no
//! spread was measured and nothing is tested. Crossovers are reported only between levels
//! whose winners are significant: a "crossover" between two configs that are not told apart
//! is noise.
//!
//! A config may not win a level when its engine crashed, or its level failed, in any repeat (a
//! config that falls over is not a candidate at that load), or when its error rate at the level
//! (failed / (completed + failed), summed over its repeats) exceeds the job's
//! `[load] slo.max_error_rate` (default 0.01). The group's verdict says why.

use fleetbench_proto::Word;
use std::collections::{BTreeMap, HashMap};

use fleetbench_proto::agentpb::{self, LevelOutcome};
use fleetbench_proto::controllerpb::{
    CompareGroup, CompareResponse, ConfigLevelStats, GetResultsResponse, StoredLevel,
};

use fleetbench_stats::contrast::{Contrast, Design};
use fleetbench_stats::decide::{LevelCall, LevelTest, Tested, compare_family_with_history};

use design::{Plan, Point, Side};
use fleetbench_spec::{Order, level_label};

mod design;
mod events;
mod stats;

use events::{crashes, crossovers};
use stats::config_stats;
pub use stats::percentile;

/// Compares every config of the jobs in `results` (one job or several) at the default alpha.
pub fn compare(results: &GetResultsResponse) -> CompareResponse {
    compare_at(results, fleetbench_stats::DEFAULT_ALPHA)
}

/// What a job's spec decides for its comparison, read once from the parsed spec.
#[derive(Debug, Clone, Copy)]
struct JobRules {
    max_error_rate: f64,
    order: Option<Order>,
}

impl JobRules {
    /// For a job whose spec cannot be read: the defaults (1% of requests may fail; levels
    /// tested as two samples). Never taken silently: the response's notes say so.
    const DEFAULT: JobRules = JobRules {
        max_error_rate: fleetbench_spec::DEFAULT_MAX_ERROR_RATE,
        order: None,
    };
}

/// Every job's rules, and notes for specs that cannot be read (stored by an older version, or
/// a level whose job is not among the results): their rules fall back to the defaults, and
/// the response says so. Every job of `results.levels` has rules.
fn job_rules(results: &GetResultsResponse) -> (HashMap<String, JobRules>, Vec<String>) {
    let short = |id: &str| id.chars().take(8).collect::<String>();
    let assumed = format!(
        "max_error_rate {:.0}% assumed and its levels tested as two samples",
        fleetbench_spec::DEFAULT_MAX_ERROR_RATE * 100.0
    );
    let mut notes = Vec::new();
    let mut rules: HashMap<String, JobRules> = results
        .jobs
        .iter()
        .map(|j| {
            let rules = match fleetbench_spec::parse(&j.file_name, &j.spec_toml) {
                Ok(s) => JobRules {
                    max_error_rate: s.load.slo.max_error_rate,
                    order: Some(s.order),
                },
                Err(e) => {
                    notes.push(format!(
                        "the spec of job {} could not be read ({}): {assumed}",
                        short(&j.id),
                        fleetbench_spec::render_errors(&e)
                            .lines()
                            .next()
                            .unwrap_or_default(),
                    ));
                    JobRules::DEFAULT
                }
            };
            if let Some(note) = rules.order.and_then(|o| design::order_note(&j.id, o)) {
                notes.push(note);
            }
            (j.id.clone(), rules)
        })
        .collect();
    for l in &results.levels {
        if !rules.contains_key(&l.job_id) {
            notes.push(format!(
                "job {} is not among the results, so neither is its spec: {assumed}",
                short(&l.job_id)
            ));
            rules.insert(l.job_id.clone(), JobRules::DEFAULT);
        }
    }
    (rules, notes)
}

/// Compares every config of the jobs in `results` at significance level `alpha` (0 < alpha < 1).
pub fn compare_at(results: &GetResultsResponse, alpha: f64) -> CompareResponse {
    compare_with_history(results, &[], alpha)
}

/// [`compare_at`] with earlier jobs' results as `history`: each earlier job is planned as it
/// would be compared (its own design, its own winner and runner-up per level), and its
/// contrasts lend their spread to the moderated prior
/// (`fleetbench_stats::decide::compare_family_with_history`) unless this job is significantly
/// noisier. The history is never tested or shown as a group; the notes say what it lent.
pub fn compare_with_history(
    results: &GetResultsResponse,
    history: &[GetResultsResponse],
    alpha: f64,
) -> CompareResponse {
    let alpha = if alpha > 0.0 && alpha < 1.0 {
        alpha
    } else {
        fleetbench_stats::DEFAULT_ALPHA
    };
    let (mut out, plans, levels) = plan_groups(results);
    out.alpha = alpha;
    let past: Vec<Contrast> = history
        .iter()
        .flat_map(|h| {
            let (_, plans, _) = plan_groups(h);
            plans
                .iter()
                .flatten()
                .filter_map(|p| p.design()?.contrast())
                .collect::<Vec<_>>()
        })
        .collect();
    test_groups(&mut out, &plans, &past, alpha);
    if !history.is_empty() {
        let own: Vec<Contrast> = plans
            .iter()
            .flatten()
            .filter_map(|p| p.design()?.contrast())
            .collect();
        out.notes
            .push(history_note(&out, history.len(), &own, &past));
    }
    out.crossovers = crossovers(&out.groups);
    out.crashes = crashes(results, &levels, &display_names(results));
    out
}

/// What the history lent, in one note.
fn history_note(out: &CompareResponse, jobs: usize, own: &[Contrast], past: &[Contrast]) -> String {
    let lent = out
        .groups
        .iter()
        .map(|g| g.history_levels)
        .max()
        .unwrap_or(0);
    let alike = past
        .iter()
        .filter(|p| own.iter().any(|o| o.kind == p.kind))
        .count();
    if lent > 0 {
        format!(
            "history: {lent} tested levels of {jobs} earlier job(s) lent their spread to the \
             moderated variances"
        )
    } else if own.is_empty() {
        "history: not used: this job has no level to test".to_string()
    } else if alike == 0 {
        format!(
            "history: not used: the {jobs} earlier job(s) have no level tested the way this \
             job's are ({})",
            own[0].kind.words()
        )
    } else {
        format!(
            "history: not used: this job's spread is significantly larger than that of {alike} \
             tested levels of {jobs} earlier job(s) (one-sided F-test at {:.2}), so borrowing \
             theirs would understate it",
            fleetbench_stats::moderated::HISTORY_GATE
        )
    }
}

/// The groups of `results` (every workload × level, each config's figures, the winner and
/// runner-up) and how each would be tested, with the latest attempt of every level.
fn plan_groups(
    results: &GetResultsResponse,
) -> (CompareResponse, Vec<Option<Plan>>, Vec<&StoredLevel>) {
    let names = display_names(results);
    let levels = latest_attempts(&results.levels);
    let (rules, notes) = job_rules(results);

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

    let mut out = CompareResponse {
        notes,
        ..Default::default()
    };
    let mut plans: Vec<Option<Plan>> = Vec::new();
    for ((workload, _), (level, configs)) in &groups {
        let stats: Vec<Scored> = configs
            .iter()
            .map(|(key, s)| {
                // job_rules gave every level's job its rules.
                config_stats(key, s, &names, rules[&key.job_id].max_error_rate)
            })
            .collect();
        let (group, plan) = decide(workload, level, stats, &rules);
        out.groups.push(group);
        plans.push(plan);
    }
    if plans.iter().any(|p| matches!(p, Some(Plan::Refused(_)))) {
        out.notes.push(
            "configs from different jobs are compared only through a config both jobs ran \
             (see the levels marked untested)"
                .to_string(),
        );
    }
    (out, plans, levels)
}

/// A config's figures at a level, its per-repeat throughputs, and why it may not win (None:
/// it may).
struct Scored {
    stats: ConfigLevelStats,
    points: Vec<Point>,
    /// Mean of the logs of the throughputs (the geometric mean's log): the ranking's scale.
    log_mean: f64,
    excluded: Option<String>,
}

impl Scored {
    fn side(&self) -> Side<'_> {
        Side {
            job_id: &self.stats.job_id,
            config_id: &self.stats.config_id,
            points: &self.points,
        }
    }
}

/// Runs the family of tests (winner against runner-up wherever one is possible) and writes
/// each group's verdict: one statement, whose interval, test and winner agree.
fn test_groups(
    out: &mut CompareResponse,
    plans: &[Option<Plan>],
    history: &[Contrast],
    alpha: f64,
) {
    let tested: Vec<(usize, Design<'_>)> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p.as_ref()?.design()?)))
        .collect();
    let designs: Vec<Design<'_>> = tested.iter().map(|(_, d)| *d).collect();
    let calls = compare_family_with_history(&designs, alpha, history);
    out.tests = calls
        .iter()
        .filter(|c| matches!(c.test, LevelTest::Tested(_)))
        .count() as u32;
    for ((i, _), call) in tested.iter().zip(&calls) {
        let g = &mut out.groups[*i];
        match call.test {
            LevelTest::NoSpread => {
                g.verdict = format!(
                    "no spread measured (one repeat on a side): {} leads by {:+.1}%, untested",
                    g.winner_config, g.margin_pct
                );
            }
            LevelTest::Tested(t) => {
                let through = match &plans[*i] {
                    Some(Plan::Referenced { reference, .. }) => {
                        format!(" (relative to {reference})")
                    }
                    _ => String::new(),
                };
                write_tested(g, call, &t, &through);
            }
        }
    }
    for (g, plan) in out.groups.iter_mut().zip(plans) {
        write_untested(g, plan.as_ref());
    }
}

/// A tested level's figures and its verdict: the effect, the interval at Holm's level for
/// this test, the test with its degrees of freedom and what moderated its variance.
fn write_tested(g: &mut CompareGroup, call: &LevelCall, t: &Tested, through: &str) {
    let pct = |x: f64| (x - 1.0) * 100.0;
    g.tested = true;
    g.p_value = call.p;
    g.p_adjusted = call.p_adjusted;
    g.effect_pct = pct(t.ratio);
    g.effect_low_pct = pct(t.low);
    g.effect_high_pct = pct(t.high);
    g.margin_pct = g.effect_pct;
    g.mde_pct = t.mde().map(|m| m * 100.0);
    g.margin_significant = call.significant;
    g.test = t.contrast.kind.words().to_string();
    g.df = t.df;
    g.moderated = t.prior_d0.is_some();
    g.history_levels = t.prior_history as u32;
    g.interval_confidence = t.confidence;
    let ci = format!(
        "{:+.1}% [{:+.1}% .. {:+.1}%]{through}",
        g.effect_pct, g.effect_low_pct, g.effect_high_pct
    );
    let moderated = match (g.moderated, t.prior_history) {
        (true, 0) => format!(", variance moderated over {} levels", t.prior_features),
        (true, h) => format!(
            ", variance moderated over {} levels ({h} of earlier jobs)",
            t.prior_features
        ),
        (false, _) => String::new(),
    };
    let how = format!(
        "{}, {:.1} df{moderated}; interval at {:.2}%, Holm's level for this test",
        g.test,
        t.df,
        t.confidence * 100.0
    );
    let mde = g
        .mde_pct
        .map(|m| format!(", detectable {m:.1}%"))
        .unwrap_or_default();
    g.verdict = if call.significant {
        format!(
            "{} wins by {ci}, significant (p {:.3}, Holm {:.3}{mde}; {how})",
            g.winner_config, call.p, call.p_adjusted
        )
    } else {
        format!(
            "{} vs {}: {ci}, not significant (p {:.3}, Holm {:.3}{mde}; {how})",
            g.winner_config, g.runner_up_config, call.p, call.p_adjusted
        )
    };
}

/// The verdict of a level no test decided (refused, or no config to test against), and, on
/// every level, why an excluded config could not win.
fn write_untested(g: &mut CompareGroup, plan: Option<&Plan>) {
    if let Some(Plan::Refused(why)) = plan {
        g.verdict = format!(
            "{} vs {}: {:+.1}%, untested: {why}",
            g.winner_config, g.runner_up_config, g.margin_pct
        );
    }
    if g.verdict.is_empty() {
        g.verdict = match g.winner_config.is_empty() {
            true => "no config may win this level".to_string(),
            false => format!("{} is the only config that may win", g.winner_config),
        };
    }
    let why: Vec<String> = g
        .configs
        .iter()
        .filter(|c| !c.excluded_reason.is_empty())
        .map(|c| format!("{} cannot win: {}", c.config_name, c.excluded_reason))
        .collect();
    if !why.is_empty() {
        g.verdict = format!("{}; {}", g.verdict, why.join("; "));
    }
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

/// A group's winner and runner-up (by geometric mean output tokens/s among the configs that
/// may win: the scale of the test) and how they are compared. Across jobs the comparison runs
/// through a shared config, and the winner is the one that comparison favours.
fn decide(
    workload: &str,
    level: &agentpb::LoadLevel,
    configs: Vec<Scored>,
    rules: &HashMap<String, JobRules>,
) -> (CompareGroup, Option<Plan>) {
    let mut group = CompareGroup {
        workload: workload.to_string(),
        level: Some(*level),
        level_label: level_label(level),
        ..Default::default()
    };
    let mut ranked: Vec<&Scored> = configs.iter().filter(|s| s.excluded.is_none()).collect();
    ranked.sort_by(|a, b| b.log_mean.total_cmp(&a.log_mean));
    let mut plan = None;
    if let Some(&first) = ranked.first() {
        let (mut w, mut r) = (first, ranked.get(1).copied());
        if let Some(second) = r {
            let others: Vec<(Side<'_>, String)> = configs
                .iter()
                .map(|s| (s.side(), s.stats.config_name.clone()))
                .collect();
            let order = rules.get(&first.stats.job_id).and_then(|r| r.order);
            let mut p = design::plan(&first.side(), &second.side(), &others, order);
            // Across jobs the shared config decides who leads: swap when it favours the
            // runner-up by geometric mean.
            if p.design()
                .and_then(|d| d.contrast())
                .is_some_and(|c| c.diff < 0.0)
                && matches!(p, Plan::Referenced { .. })
            {
                (w, r) = (second, Some(first));
                p = design::plan(&second.side(), &first.side(), &others, order);
            }
            plan = Some(p);
        }
        group.winner_config = w.stats.config_name.clone();
        if let Some(r) = r {
            group.runner_up_config = r.stats.config_name.clone();
            group.margin_pct = ((w.log_mean - r.log_mean).exp() - 1.0) * 100.0;
        }
    }
    group.configs = configs.into_iter().map(|s| s.stats).collect();
    (group, plan)
}

#[cfg(test)]
mod tests;
