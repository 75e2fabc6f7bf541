//! The comparison's decisions on hand-made results: winners, noise, crossovers, crashes.

use super::*;
use fleetbench_proto::agentpb::{CrashClass, Distribution, LevelResult, LoadLevel};
use fleetbench_proto::controllerpb::{ConfigInfo, Run};

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
    assert!(
        (g1.margin_pct - 20.0 / 82.0 * 100.0).abs() < 1e-9,
        "{}",
        g1.margin_pct
    );
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
