//! `[suite]` validation: every problem located as file:line: field: message, and the
//! verdict rule on fixed numbers (worse than the tolerance AND shown worse by the test, Holm
//! over the suite), the error-rate check, the history's between-run variance, and the drift a
//! last-passing baseline cannot see.

use fleetbench_proto::agentpb::{Distribution, LevelOutcome, LevelResult, LoadLevel};
use fleetbench_proto::controllerpb::StoredLevel;
use fleetbench_spec::suite::{Baseline, Direction, Metric, parse_suite};
use fleetbench_verdicts::regress::PastRun;
use fleetbench_verdicts::regress::verdict::{self, Status};

const HEAD: &str = r#"name = "s"
repeats = 3
[[configs]]
name = "a"
engine = "sim"
model = "m"
[[workloads]]
name = "w"
dataset = "random"
input_len = 8
output_len = 8
[load]
concurrency = [4]
requests = 8
"#;

fn errors(suite: &str) -> Vec<String> {
    let text = format!("{HEAD}{suite}");
    parse_suite("suite.toml", &text)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_valid_suite_parses_with_defaults() {
    let text = format!(
        "{HEAD}[suite]\nbaseline = \"tag:v1\"\nmetrics = [{{ name = \"output_tokens_per_s\", tolerance = 0.05 }}, {{ name = \"ttft_p99_ms\", tolerance = 0.1 }}]\n"
    );
    let (job, suite) = parse_suite("suite.toml", &text).unwrap();
    assert_eq!(job.repeats, 3);
    assert_eq!(suite.baseline, Baseline::Tag("v1".into()));
    assert_eq!(suite.confidence, 0.95);
    assert_eq!(suite.metrics[0].metric, Metric::OutputTokensPerS);
    assert_eq!(suite.metrics[0].direction, Direction::HigherIsBetter);
    assert_eq!(suite.metrics[1].direction, Direction::LowerIsBetter);
    assert_eq!(suite.run_spread, None);
    // The job the scheduler runs has no [suite] and parses as a plain job spec.
    let job_text = fleetbench_spec::suite::job_toml(&text).unwrap();
    assert!(fleetbench_spec::parse("job.toml", &job_text).is_ok());
    // A plain job spec still refuses [suite].
    assert!(fleetbench_spec::parse("suite.toml", &text).is_err());
}

#[test]
fn every_problem_is_located() {
    let got = errors(
        "[suite]\nbaseline = \"yesterday\"\nconfidence = 1.5\nmetrics = [\n  { name = \"output_tokens_per_sec\", tolerance = 0.05 },\n  { name = \"ttft_p99_ms\", tolerance = 2 },\n  { name = \"itl_p50_ms\", direction = \"up\", tolerance = 0.1 },\n  { name = \"e2e_p99_ms\" },\n]\n",
    );
    let want = [
        "suite.toml:16: suite.baseline: expected \"last-passing\", \"first\" or \"tag:NAME\", got \"yesterday\"",
        "suite.toml:17: suite.confidence: a confidence is between 0.5 and 1 (exclusive), got 1.5",
        "suite.toml:19: suite.metrics[0].name: unknown metric \"output_tokens_per_sec\" (did you mean \"output_tokens_per_s\"?)",
        "suite.toml:20: suite.metrics[1].tolerance: a relative tolerance is at least 0 and below 1 (0.05 = 5%), got 2",
        "suite.toml:21: suite.metrics[2].direction: expected \"higher\" or \"lower\" (is better), got \"up\"",
        "suite.toml:22: suite.metrics[3].tolerance: missing: the relative change allowed, e.g. 0.05 for 5%",
    ];
    assert_eq!(got, want);
    assert_eq!(
        errors(""),
        ["suite.toml: suite: missing: a [suite] table with the metrics to gate on"]
    );
}

fn level(config: &str, repeat: u32, tok_s: f64, itl_p50: f64, crashed: bool) -> StoredLevel {
    StoredLevel {
        config_name: config.into(),
        workload: "w".into(),
        repeat,
        result: Some(LevelResult {
            level: Some(LoadLevel {
                concurrency: Some(4),
                request_rate: None,
                burstiness: 1.0,
            }),
            outcome: if crashed {
                LevelOutcome::Crashed as i32
            } else {
                LevelOutcome::Ok as i32
            },
            output_tokens_per_s: tok_s,
            itl_ms: Some(Distribution {
                percentiles: [("p50".to_string(), itl_p50)].into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_regression_is_worse_than_the_tolerance_and_outside_the_noise() {
    // No history: the suite states how much runs differ (1%), so the second run is judged.
    let text = format!(
        "{HEAD}[suite]\nrun_spread = 0.01\nmetrics = [{{ name = \"output_tokens_per_s\", tolerance = 0.05 }}, {{ name = \"itl_p50_ms\", tolerance = 0.05 }}]\n"
    );
    let (_, suite) = parse_suite("suite.toml", &text).unwrap();
    let base = verdict::group(&[
        level("a", 0, 100.0, 10.0, false),
        level("a", 1, 101.0, 10.1, false),
        level("a", 2, 99.0, 9.9, false),
    ]);
    let check = |cur: &[(f64, f64)]| {
        let levels: Vec<_> = cur
            .iter()
            .enumerate()
            .map(|(i, (t, l))| level("a", i as u32, *t, *l, false))
            .collect();
        verdict::verdicts(&suite, Some(&base), &verdict::group(&levels))
    };
    // 10% slower on both metrics, tight repeats: regressed.
    let v = check(&[(90.0, 11.0), (91.0, 11.1), (89.5, 10.9)]);
    assert!(v.iter().all(|v| v.status == Status::Regressed), "{v:?}");
    // 2% slower: inside the tolerance.
    let v = check(&[(98.0, 10.2), (98.5, 10.1), (97.8, 10.2)]);
    assert!(v.iter().all(|v| v.status == Status::Pass), "{v:?}");
    // 8% slower on average, but one repeat as fast as the baseline: the interval reaches
    // zero, so this is noise, not a regression.
    let v = check(&[(100.5, 10.0), (80.0, 12.5), (96.0, 10.4)]);
    assert_eq!(v[0].status, Status::Pass, "{v:?}");
    assert!(v[0].detail.contains("not shown"), "{}", v[0].detail);
    // Better by far: never a regression.
    let v = check(&[(150.0, 7.0), (151.0, 7.0), (149.0, 7.1)]);
    assert!(v.iter().all(|v| v.status == Status::Pass), "{v:?}");
    // A crash where the baseline had none regresses.
    let v = verdict::verdicts(
        &suite,
        Some(&base),
        &verdict::group(&[
            level("a", 0, 100.0, 10.0, false),
            level("a", 1, 0.0, 0.0, true),
        ]),
    );
    assert!(
        v.iter()
            .all(|v| v.status == Status::Regressed && v.detail.contains("crashed"))
    );
    assert!(!verdict::passed(&v));
}

#[test]
fn every_suite_example_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("suite-") && name.ends_with(".toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = parse_suite(&name, &text) {
                panic!("{name}:\n{}", fleetbench_spec::render_errors(&e));
            }
            seen += 1;
        }
    }
    assert!(seen >= 1, "no examples/suite-*.toml");
}

fn suite_with(metrics: &str, baseline: &str) -> fleetbench_spec::suite::SuiteSpec {
    let text = format!("{HEAD}[suite]\nbaseline = \"{baseline}\"\nmetrics = [{metrics}]\n");
    parse_suite("suite.toml", &text).unwrap().1
}

/// One run of config "a": its repeats' throughputs (ITL 10 ms, no failures).
fn run_of(tput: &[f64]) -> verdict::Grouped {
    let levels: Vec<_> = tput
        .iter()
        .enumerate()
        .map(|(i, t)| level("a", i as u32, *t, 10.0, false))
        .collect();
    verdict::group(&levels)
}

fn past(runs: &[&[f64]]) -> Vec<PastRun> {
    runs.iter()
        .enumerate()
        .map(|(i, t)| PastRun {
            job_id: format!("job-{i:02}"),
            created_unix_ms: 1_800_000_000_000 + i as i64 * 3_600_000,
            levels: run_of(t),
        })
        .collect()
}

const TPUT: &str = "{ name = \"output_tokens_per_s\", tolerance = 0.03 }";

#[test]
fn a_young_suite_forms_its_baseline_until_the_history_measures_the_spread() {
    let suite = suite_with(TPUT, "last-passing");
    let v = verdict::verdicts(&suite, Some(&run_of(&[100.0])), &run_of(&[90.0]));
    assert_eq!(v[0].status, Status::Forming, "{v:?}");
    assert!(verdict::passed(&v));
    assert!(
        v[0].test.is_none() && v[0].detail.contains("baseline forming (0 of 2 stored runs"),
        "{}",
        v[0].detail
    );
    // Five stored runs, one repeat each, within about 1% of each other: a 10% drop is real.
    let history = past(&[&[100.0], &[101.0], &[99.5], &[100.5], &[100.0]]);
    let v =
        verdict::verdicts_with_history(&suite, Some(&run_of(&[100.0])), &run_of(&[90.0]), &history);
    assert_eq!(v[0].status, Status::Regressed, "{}", v[0].detail);
    assert!(v[0].test.unwrap().runs == 5 && v[0].trend.runs == 5);
}

#[test]
fn the_variance_between_runs_keeps_run_to_run_drift_from_failing() {
    // Tight repeats inside each run, but whole runs differ by about 5% (the CI story).
    let suite = suite_with(TPUT, "tag:x");
    let history = past(&[
        &[100.0, 100.2, 99.9],
        &[95.0, 95.1, 94.9],
        &[104.0, 104.1, 103.8],
        &[98.0, 98.2, 97.9],
        &[103.0, 102.9, 103.2],
    ]);
    let base = run_of(&[103.0, 102.9, 103.2]);
    let cur = run_of(&[97.0, 97.1, 96.9]);
    // From the repeats alone the 6% drop would look certain; without a history nothing says
    // how much runs differ, so the check forms its baseline instead of failing ...
    let alone = verdict::verdicts(&suite, Some(&base), &cur);
    assert_eq!(alone[0].status, Status::Forming, "{}", alone[0].detail);
    // ... and the history says runs vary that much with no change at all.
    let with = verdict::verdicts_with_history(&suite, Some(&base), &cur, &history);
    assert_eq!(with[0].status, Status::Pass, "{}", with[0].detail);
    assert!(
        with[0].detail.contains("the spread of 5 stored runs"),
        "{}",
        with[0].detail
    );
}

#[test]
fn holm_over_the_suite_keeps_many_small_doubts_from_failing_it() {
    // Six levels, each 4% worse, runs stated to differ by 0.28%: beyond a 3% tolerance at a
    // one-sided p of about 0.03 each. Alone, each would fail at alpha 0.05; over six checks,
    // Holm asks more.
    let text =
        format!("{HEAD}[suite]\nbaseline = \"tag:x\"\nrun_spread = 0.0028\nmetrics = [{TPUT}]\n");
    let suite = parse_suite("suite.toml", &text).unwrap().1;
    let mut base = Vec::new();
    let mut cur = Vec::new();
    for c in 0..6u32 {
        for (i, (b, k)) in [(100.0, 96.0), (100.1, 96.1), (99.9, 95.9)]
            .iter()
            .enumerate()
        {
            let mut lb = level("a", i as u32, *b, 10.0, false);
            let mut lc = level("a", i as u32, *k, 10.0, false);
            for l in [&mut lb, &mut lc] {
                l.result
                    .as_mut()
                    .unwrap()
                    .level
                    .as_mut()
                    .unwrap()
                    .concurrency = Some(1 << c);
            }
            base.push(lb);
            cur.push(lc);
        }
    }
    let v = verdict::verdicts(&suite, Some(&verdict::group(&base)), &verdict::group(&cur));
    assert_eq!(v.len(), 6);
    for x in &v {
        let (p, adj) = (x.p_beyond.unwrap(), x.p_adjusted.unwrap());
        assert!(p < 0.05 && adj > 0.05, "{}", x.detail);
        assert_eq!(x.status, Status::Pass, "{}", x.detail);
    }
    // One of them alone fails.
    let one = |g: &[StoredLevel]| {
        verdict::group(
            &g.iter()
                .filter(|l| l.result.as_ref().unwrap().level.unwrap().concurrency == Some(1))
                .cloned()
                .collect::<Vec<_>>(),
        )
    };
    let v = verdict::verdicts(&suite, Some(&one(&base)), &one(&cur));
    assert_eq!(v[0].status, Status::Regressed, "{}", v[0].detail);
}

#[test]
fn a_rise_of_the_error_rate_fails_even_when_throughput_holds() {
    let suite = suite_with(
        &format!("{TPUT}, {{ name = \"error_rate\", tolerance = 0.01 }}"),
        "tag:x",
    );
    let with_errors = |failed: u64| {
        let levels: Vec<_> = [100.0, 101.0, 99.0]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut l = level("a", i as u32, *t, 10.0, false);
                let r = l.result.as_mut().unwrap();
                r.completed = 1000 - failed;
                r.failed = failed;
                l
            })
            .collect::<Vec<_>>();
        verdict::group(&levels)
    };
    let v = verdict::verdicts(&suite, Some(&with_errors(1)), &with_errors(40));
    assert_eq!(v.len(), 2);
    assert_eq!(
        v[0].status,
        Status::Forming,
        "throughput held, and has no history: {}",
        v[0].detail
    );
    assert_eq!(
        (v[1].metric, v[1].status),
        (Metric::ErrorRate, Status::Regressed),
        "{}",
        v[1].detail
    );
    assert!(
        v[1].detail.contains("error rate 0.10% -> 4.00%"),
        "{}",
        v[1].detail
    );
    // Half a point more errors is within the 1-point tolerance.
    let v = verdict::verdicts(&suite, Some(&with_errors(1)), &with_errors(6));
    assert_eq!(v[1].status, Status::Pass, "{}", v[1].detail);
    assert!(verdict::passed(&v));
}

#[test]
fn four_small_slowdowns_under_last_passing_are_caught_as_a_drift() {
    // Each step is 4% (under the 5% tolerance), so each run passes against the one before:
    // the ratchet. The history's change points add the steps up.
    let tput = "{ name = \"output_tokens_per_s\", tolerance = 0.05 }";
    let mut runs: Vec<Vec<f64>> = Vec::new();
    for i in 0..29 {
        let level = 100.0 * 0.96f64.powi((i / 6) as i32);
        let wiggle = [1.0, 0.99, 1.01, 1.005, 0.995, 1.0][i % 6];
        runs.push(vec![
            level * wiggle,
            level * wiggle * 1.002,
            level * wiggle * 0.998,
        ]);
    }
    let refs: Vec<&[f64]> = runs.iter().map(|r| &r[..]).collect();
    let history = past(&refs);
    let base = run_of(&runs[28]);
    let cur = run_of(&[84.9, 85.0, 84.8]);
    let suite = suite_with(tput, "last-passing");
    let v = verdict::verdicts_with_history(&suite, Some(&base), &cur, &history);
    assert_eq!(v[0].status, Status::Regressed, "{}", v[0].detail);
    assert!(
        v[0].detail
            .contains("DRIFT: 4 successive worse change point(s)"),
        "{}",
        v[0].detail
    );
    let starts: Vec<usize> = v[0].trend.change_points.iter().map(|p| p.index).collect();
    assert_eq!(starts, [6, 12, 18, 24], "{:?}", v[0].trend.change_points);
    assert_eq!(v[0].trend.change_points[0].job_id, "job-06");
    // The same run against the last passing run alone: nothing to judge it by.
    let alone = verdict::verdicts(&suite, Some(&base), &cur);
    assert_eq!(alone[0].status, Status::Forming, "{}", alone[0].detail);
    // The report and JUnit show the change points.
    assert!(verdict::render(&v).contains("change points over the stored history"));
    let xml = fleetbench_verdicts::regress::junit::junit_xml("s", &v).unwrap();
    assert!(xml.contains("change points: run job-06"), "{xml}");
}
