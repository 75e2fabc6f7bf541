//! The comparison's decisions on hand-made results: winners, noise, crossovers, crashes.

use super::*;
use fleetbench_proto::agentpb::{CrashClass, Distribution, LevelResult, LoadLevel};
use fleetbench_proto::controllerpb::{ConfigInfo, Run, RunState};

fn dist(p50: f64, p99: f64) -> Option<Distribution> {
    Some(Distribution {
        percentiles: [("p50".to_string(), p50), ("p99".to_string(), p99)].into(),
        ..Default::default()
    })
}

struct At<'a> {
    job: &'a str,
    config: &'a str,
    repeat: u32,
    attempt: u32,
    concurrency: u32,
}

fn stored(at: At<'_>, tput: f64, outcome: LevelOutcome) -> StoredLevel {
    let index = [1, 64, 512]
        .iter()
        .position(|&c| c == at.concurrency)
        .unwrap_or(0) as u32;
    StoredLevel {
        job_id: at.job.into(),
        run_id: format!("{}-{}-{}-{}", at.job, at.config, at.repeat, at.attempt),
        host: "h1".into(),
        config_id: format!("id-{}", at.config),
        config_name: at.config.into(),
        workload: "w".into(),
        repeat: at.repeat,
        attempt: at.attempt,
        result: Some(LevelResult {
            level_index: index,
            level: Some(LoadLevel {
                concurrency: Some(at.concurrency),
                request_rate: None,
                burstiness: 1.0,
            }),
            outcome: outcome as i32,
            crash: (outcome == LevelOutcome::Crashed).then(|| agentpb::Crash {
                class: CrashClass::PythonException as i32,
                exception_type: "AttributeError".into(),
                summary: "AttributeError: 'NoneType' object has no attribute 'shape'".into(),
                ..Default::default()
            }),
            output_tokens_per_s: tput,
            requests_per_s: tput / 100.0,
            failed: u64::from(outcome != LevelOutcome::Ok),
            ttft_ms: dist(10.0, 30.0),
            itl_ms: dist(5.0, 9.0),
            e2e_ms: dist(500.0, 900.0),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn configs(job: &str) -> Vec<ConfigInfo> {
    ["a", "b"]
        .into_iter()
        .map(|c| ConfigInfo {
            config_id: format!("id-{c}"),
            name: c.into(),
            job_id: job.into(),
            ..Default::default()
        })
        .collect()
}

/// A is faster at c=1, B clearly faster at c=64 and crashes at c=512: the quickstart's story.
fn ab_story() -> GetResultsResponse {
    let mut levels = Vec::new();
    for repeat in 0..3 {
        let jitter = f64::from(repeat) * 2.0;
        let at = |config, concurrency| At {
            job: "job1",
            config,
            repeat,
            attempt: 0,
            concurrency,
        };
        levels.push(stored(at("a", 1), 100.0 + jitter, LevelOutcome::Ok));
        levels.push(stored(at("b", 1), 80.0 + jitter, LevelOutcome::Ok));
        levels.push(stored(at("a", 64), 1000.0 + jitter, LevelOutcome::Ok));
        levels.push(stored(at("b", 64), 1500.0 - jitter, LevelOutcome::Ok));
        levels.push(stored(at("a", 512), 1100.0 + jitter, LevelOutcome::Ok));
        levels.push(stored(at("b", 512), 40.0, LevelOutcome::Crashed));
    }
    GetResultsResponse {
        configs: configs("job1"),
        levels,
        ..Default::default()
    }
}

#[test]
fn winner_margin_significance_crossovers_and_crashes() {
    let cmp = compare(&ab_story());
    let summary: Vec<_> = cmp
        .groups
        .iter()
        .map(|g| {
            (
                g.level_label.as_str(),
                g.winner_config.as_str(),
                g.runner_up_config.as_str(),
                g.margin_significant,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("c=1", "a", "b", true),
            ("c=64", "b", "a", true),
            ("c=512", "a", "", false)
        ]
    );
    let g1 = &cmp.groups[0];
    // The margin is the ratio of geometric means, the scale the test uses.
    let geo = |xs: [f64; 3]| (xs.iter().map(|x| x.ln()).sum::<f64>() / 3.0).exp();
    let expected = (geo([100.0, 102.0, 104.0]) / geo([80.0, 82.0, 84.0]) - 1.0) * 100.0;
    assert!((g1.margin_pct - expected).abs() < 1e-9, "{}", g1.margin_pct);
    let a1 = &g1.configs[0];
    assert_eq!((a1.config_name.as_str(), a1.repeats), ("a", 3));
    assert!((a1.output_tokens_per_s - 102.0).abs() < 1e-9);
    assert!((a1.output_tokens_per_s_spread - 2.0).abs() < 1e-9);
    assert_eq!(
        (a1.ttft_p50_ms, a1.ttft_p99_ms, a1.itl_p99_ms, a1.e2e_p50_ms),
        (10.0, 30.0, 9.0, 500.0)
    );
    let b512 = &cmp.groups[2].configs[1];
    assert!(b512.crashed);
    assert_eq!(b512.crash_class, CrashClass::PythonException as i32);
    assert_eq!(b512.errors, 3);

    let xs: Vec<_> = cmp
        .crossovers
        .iter()
        .map(|x| {
            (
                x.from_level.as_str(),
                x.to_level.as_str(),
                x.from_winner.as_str(),
                x.to_winner.as_str(),
            )
        })
        .collect();
    assert_eq!(xs, [("c=1", "c=64", "a", "b"), ("c=64", "c=512", "b", "a")]);
    assert_eq!(cmp.crashes.len(), 3);
    assert!(
        cmp.crashes
            .iter()
            .all(|c| c.config_name == "b" && c.level_label == "c=512")
    );
}

#[test]
fn a_margin_inside_the_noise_is_not_significant() {
    let mut results = ab_story();
    // Spread A's repeats at c=1 widely: 100 +- 30 against B's 80.
    for l in &mut results.levels {
        let r = l.result.as_mut().unwrap();
        if l.config_name == "a" && r.level_index == 0 {
            r.output_tokens_per_s = [70.0, 100.0, 150.0][l.repeat as usize];
        }
    }
    let g = &compare(&results).groups[0];
    assert_eq!(g.winner_config, "a");
    assert!(!g.margin_significant, "mean 106.7 vs 81, sd 40.4 + 2");

    // One repeat: the noise is unknown, so nothing is significant.
    results.levels.retain(|l| l.repeat == 0);
    let g = &compare(&results).groups[1];
    assert_eq!((g.winner_config.as_str(), g.configs[0].repeats), ("b", 1));
    assert!(!g.margin_significant);
}

#[test]
fn a_retried_trial_counts_once_with_its_latest_attempt() {
    let mut results = ab_story();
    let at = At {
        job: "job1",
        config: "a",
        repeat: 0,
        attempt: 1,
        concurrency: 1,
    };
    results.levels.push(stored(at, 130.0, LevelOutcome::Ok));
    let a = &compare(&results).groups[0].configs[0];
    assert_eq!(a.repeats, 3);
    assert!((a.output_tokens_per_s - (130.0 + 102.0 + 104.0) / 3.0).abs() < 1e-9);
}

#[test]
fn jobs_compared_together_keep_their_configs_apart() {
    let mut results = ab_story();
    let mut other = ab_story();
    for l in &mut other.levels {
        l.job_id = "job2-abcdefgh".into();
    }
    results.configs.extend(configs("job2-abcdefgh"));
    results.levels.extend(other.levels);
    let cmp = compare(&results);
    let names: Vec<_> = cmp.groups[0]
        .configs
        .iter()
        .map(|c| c.config_name.as_str())
        .collect();
    assert_eq!(names, ["a@job1", "b@job1", "a@job2-abc", "b@job2-abc"]);
    assert!(cmp.groups[0].configs.iter().all(|c| c.repeats == 3));
}

#[test]
fn an_engine_that_never_started_is_listed_as_a_crash() {
    let mut results = ab_story();
    results.runs.push(Run {
        run_id: "r9".into(),
        job_id: "job1".into(),
        config_id: "id-b".into(),
        config_name: "b".into(),
        workload: "w".into(),
        state: RunState::EngineFailed as i32,
        crash: Some(agentpb::Crash {
            class: CrashClass::Oom as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    let cmp = compare(&results);
    let start = cmp
        .crashes
        .iter()
        .find(|c| c.level_label == "engine start")
        .unwrap();
    assert_eq!(
        (start.config_name.as_str(), start.run_id.as_str()),
        ("b", "r9")
    );
}

#[test]
fn percentile_keys_are_read_by_value() {
    let d = Distribution {
        percentiles: [("p99.9".to_string(), 7.0), ("p50".to_string(), 1.0)].into(),
        ..Default::default()
    };
    assert_eq!(percentile(Some(&d), 99.9), Some(7.0));
    assert_eq!(percentile(Some(&d), 50.0), Some(1.0));
    assert_eq!(percentile(Some(&d), 99.0), None);
}

/// A job's spec with the given `[load] slo`, as the store keeps it.
fn job_with_slo(id: &str, slo: &str) -> fleetbench_proto::controllerpb::Job {
    let spec = format!(
        "name = \"j\"\n\
         [[configs]]\nname = \"a\"\nengine = \"sim\"\nmodel = \"m\"\n\
         [[configs]]\nname = \"b\"\nextends = \"a\"\nflags = {{ \"--max-running-requests\" = 8 }}\n\
         [[workloads]]\nname = \"w\"\ndataset = \"random\"\ninput_len = 16\noutput_len = 16\n\
         [load]\nconcurrency = [1, 64, 512]\nrequests = 10\nslo = {slo}\n"
    );
    fleetbench_spec::parse("j.toml", &spec).expect("the test's spec parses");
    fleetbench_proto::controllerpb::Job {
        id: id.into(),
        file_name: "j.toml".into(),
        spec_toml: spec,
        ..Default::default()
    }
}

/// B is 50% faster at c=64 in `ab_story`; give it `failed` failures per 100 requests there.
fn b_fails_at_64(results: &mut GetResultsResponse, failed: u64) {
    for l in &mut results.levels {
        let r = l.result.as_mut().unwrap();
        r.completed = 100 - failed;
        r.failed = if l.config_name == "b" && r.level_index == 1 {
            failed
        } else {
            r.failed
        };
    }
}

#[test]
fn a_config_above_the_error_budget_cannot_win_and_the_verdict_says_why() {
    let mut results = ab_story();
    b_fails_at_64(&mut results, 5);
    // No spec stored: the default budget, 1%, and the notes say it was assumed.
    let cmp = compare(&results);
    assert_eq!(
        cmp.notes,
        [
            "job job1 is not among the results, so neither is its spec: max_error_rate 1% \
          assumed and its levels tested as two samples"
        ]
    );
    let g = &cmp.groups[1];
    assert_eq!(g.winner_config, "a", "b errs 5% > 1%: {g:?}");
    let b = g.configs.iter().find(|c| c.config_name == "b").unwrap();
    assert!(
        (b.error_rate - 15.0 / 300.0).abs() < 1e-12,
        "{}",
        b.error_rate
    );
    assert_eq!(
        b.excluded_reason,
        "error rate 5.00% (15 of 300 requests failed) is above the SLO's max_error_rate 1.00%"
    );
    assert!(
        g.verdict.contains("b cannot win: error rate 5.00%"),
        "{}",
        g.verdict
    );
    // The job allows 10%: b wins again.
    results
        .jobs
        .push(job_with_slo("job1", "{ max_error_rate = 0.1 }"));
    let g = &compare(&results).groups[1];
    assert_eq!(g.winner_config, "b");
    assert!(g.margin_significant && g.configs[1].excluded_reason.is_empty());
    assert!(
        !compare(&results)
            .notes
            .iter()
            .any(|n| n.contains("max_error_rate")),
        "a spec that reads assumes nothing"
    );
    // And one that allows none shuts out any failure at all.
    results.jobs[0] = job_with_slo("job1", "{ max_error_rate = 0.0 }");
    b_fails_at_64(&mut results, 1);
    assert_eq!(compare(&results).groups[1].winner_config, "a");
    // A stored spec this version cannot read (an older version's row): 1% again, and a note
    // naming the job and the first problem.
    results.jobs[0].spec_toml = "name = ".into();
    b_fails_at_64(&mut results, 5);
    let cmp = compare(&results);
    assert_eq!(cmp.groups[1].winner_config, "a", "b errs 5% > 1%");
    assert!(
        matches!(cmp.notes.as_slice(), [n] if n.starts_with("the spec of job job1 could not be read (")
            && n.ends_with("): max_error_rate 1% assumed and its levels tested as two samples")),
        "{:?}",
        cmp.notes
    );
}

#[test]
fn tests_report_p_values_effect_interval_and_detectable_effect() {
    let cmp = compare(&ab_story());
    assert_eq!((cmp.alpha, cmp.tests), (0.05, 2));
    let g = &cmp.groups[1];
    assert!(g.tested && g.margin_significant);
    assert!(g.p_value < g.p_adjusted && g.p_adjusted <= 2.0 * g.p_value + 1e-15);
    // b's geometric mean over a's: 1498 / 1002 in round figures.
    assert!((g.effect_pct - 49.5).abs() < 0.2, "{}", g.effect_pct);
    assert!(g.effect_low_pct < g.effect_pct && g.effect_pct < g.effect_high_pct);
    assert!(
        g.mde_pct.is_some_and(|m| m > 0.0 && m < 5.0),
        "{:?}",
        g.mde_pct
    );
    assert!(g.verdict.starts_with("b wins by +49."), "{}", g.verdict);
    // c=512: b crashed, a is alone; nothing to test.
    let g = &cmp.groups[2];
    assert!(!g.tested && g.verdict.contains("b cannot win: the engine crashed"));
}

#[test]
fn an_aa_job_calls_nothing_and_draws_no_crossover() {
    // Two configs that differ in nothing that matters: per level, values drawn around the same
    // figure; the leader alternates between levels, as noise makes it.
    let mut levels = Vec::new();
    let noise = [
        [0.0, 1.5, -1.2],
        [0.8, -0.4, 0.3],
        [-0.9, 0.2, 1.1],
        [0.4, -1.3, 0.6],
    ];
    for repeat in 0..3u32 {
        for (i, c) in [1u32, 64, 512].into_iter().enumerate() {
            for (k, config) in ["a", "b"].into_iter().enumerate() {
                let at = At {
                    job: "job1",
                    config,
                    repeat,
                    attempt: 0,
                    concurrency: c,
                };
                let wiggle = noise[(i + k) % 4][repeat as usize];
                levels.push(stored(at, 1000.0 + 10.0 * wiggle, LevelOutcome::Ok));
            }
        }
    }
    let cmp = compare(&GetResultsResponse {
        configs: configs("job1"),
        levels,
        ..Default::default()
    });
    assert_eq!(cmp.tests, 3);
    assert!(
        cmp.groups.iter().all(|g| g.tested && !g.margin_significant),
        "{:?}",
        cmp.groups.iter().map(|g| &g.verdict).collect::<Vec<_>>()
    );
    let winners: Vec<&str> = cmp
        .groups
        .iter()
        .map(|g| g.winner_config.as_str())
        .collect();
    assert!(
        winners.contains(&"a") && winners.contains(&"b"),
        "{winners:?}"
    );
    assert!(cmp.crossovers.is_empty(), "{:?}", cmp.crossovers);
}

#[test]
fn one_repeat_says_that_no_spread_was_measured() {
    let mut results = ab_story();
    results.levels.retain(|l| l.repeat == 0);
    let cmp = compare(&results);
    assert_eq!(cmp.tests, 0);
    let g = &cmp.groups[1];
    assert!(!g.tested && !g.margin_significant);
    assert!(g.verdict.starts_with("no spread measured"), "{}", g.verdict);
    assert!(g.mde_pct.is_none());
    // No significant winner anywhere: only the level b crashed at is decisive.
    assert!(cmp.crossovers.is_empty(), "{:?}", cmp.crossovers);
}

/// Configs a and b at c=1 and c=64, two repeats each: b's values are 100 × (1 ∓ noise) and
/// a's `lead` times b's base × (1 ± noise), so every level has the same spread.
fn two_repeats(job: &str, lead: f64, noise: f64) -> GetResultsResponse {
    let mut levels = Vec::new();
    for repeat in 0..2u32 {
        let sign = if repeat == 0 { 1.0 } else { -1.0 };
        for concurrency in [1, 64] {
            for (config, base, s) in [("a", 100.0 * lead, sign), ("b", 100.0, -sign)] {
                let at = At {
                    job,
                    config,
                    repeat,
                    attempt: 0,
                    concurrency,
                };
                levels.push(stored(at, base * (1.0 + s * noise), LevelOutcome::Ok));
            }
        }
    }
    GetResultsResponse {
        configs: configs(job),
        levels,
        ..Default::default()
    }
}

#[test]
fn earlier_jobs_lend_their_spread_only_when_it_agrees_with_the_jobs_own() {
    // a leads by 5% at 1% noise: two repeats give each level 2 degrees of freedom of its
    // own, and two levels are too few for a prior: alone, nothing is significant.
    let now = two_repeats("now", 1.05, 0.01);
    let alone = compare(&now);
    assert!(
        alone
            .groups
            .iter()
            .all(|g| g.tested && !g.margin_significant),
        "{:?}",
        alone.groups.iter().map(|g| &g.verdict).collect::<Vec<_>>()
    );
    assert!(!alone.notes.iter().any(|n| n.starts_with("history")));

    // Three earlier jobs with the same spread (and no lead): their six levels are the prior.
    let like: Vec<GetResultsResponse> = ["w1", "w2", "w3"]
        .iter()
        .map(|j| two_repeats(j, 1.0, 0.01))
        .collect();
    let with = compare_with_history(&now, &like, 0.05);
    for g in &with.groups {
        assert!(
            g.margin_significant && g.winner_config == "a",
            "{}",
            g.verdict
        );
        assert_eq!(g.history_levels, 6);
        assert!(
            g.df > alone.groups[0].df,
            "{} against {}",
            g.df,
            alone.groups[0].df
        );
        // One statement: the interval excludes zero with the significant call.
        assert!(g.effect_low_pct > 0.0, "{}", g.verdict);
        assert!(g.verdict.contains("(6 of earlier jobs)"), "{}", g.verdict);
    }
    assert!(
        with.notes
            .iter()
            .any(|n| n.starts_with("history: 6 tested levels of 3 earlier job(s) lent")),
        "{:?}",
        with.notes
    );
    // Only the job's own groups are shown and counted.
    assert_eq!((with.groups.len(), with.tests), (2, 2));

    // A history ten times quieter would understate this job's spread: refused, said, and the
    // verdicts are the job's own.
    let quiet: Vec<GetResultsResponse> = ["q1", "q2", "q3"]
        .iter()
        .map(|j| two_repeats(j, 1.0, 0.001))
        .collect();
    let refused = compare_with_history(&now, &quiet, 0.05);
    assert!(
        refused
            .notes
            .iter()
            .any(|n| n.starts_with("history: not used: this job's spread is significantly larger")),
        "{:?}",
        refused.notes
    );
    for (r, a) in refused.groups.iter().zip(&alone.groups) {
        assert_eq!((r.history_levels, &r.verdict), (0, &a.verdict));
    }
}
