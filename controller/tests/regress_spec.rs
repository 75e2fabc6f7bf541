//! `[suite]` validation: every problem located as file:line: field: message, and the
//! verdict rule on fixed numbers (worse than the tolerance AND outside the noise).

use fleetbench_controller::regress::verdict::{self, Status};
use fleetbench_controller::spec::suite::{Baseline, Direction, Metric, parse_suite};
use fleetbench_proto::agentpb::{Distribution, LevelOutcome, LevelResult, LoadLevel};
use fleetbench_proto::controllerpb::StoredLevel;

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
    // The job the scheduler runs has no [suite] and parses as a plain job spec.
    let job_text = fleetbench_controller::spec::suite::job_toml(&text).unwrap();
    assert!(fleetbench_controller::spec::parse("job.toml", &job_text).is_ok());
    // A plain job spec still refuses [suite].
    assert!(fleetbench_controller::spec::parse("suite.toml", &text).is_err());
}

#[test]
fn every_problem_is_located() {
    let got = errors(
        "[suite]\nbaseline = \"yesterday\"\nconfidence = 1.5\nmetrics = [\n  { name = \"output_tokens_per_sec\", tolerance = 0.05 },\n  { name = \"ttft_p99_ms\", tolerance = 2 },\n  { name = \"itl_p50_ms\", direction = \"up\", tolerance = 0.1 },\n  { name = \"e2e_p99_ms\" },\n]\n",
    );
    let want = [
        "suite.toml:16: suite.baseline: expected \"last-passing\" or \"tag:NAME\", got \"yesterday\"",
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
    let text = format!(
        "{HEAD}[suite]\nmetrics = [{{ name = \"output_tokens_per_s\", tolerance = 0.05 }}, {{ name = \"itl_p50_ms\", tolerance = 0.05 }}]\n"
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
    assert!(v[0].detail.contains("inside the noise"), "{}", v[0].detail);
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
    let dir = fleetbench_testkit::repo_root().join("examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("suite-") && name.ends_with(".toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = parse_suite(&name, &text) {
                panic!(
                    "{name}:\n{}",
                    fleetbench_controller::spec::render_errors(&e)
                );
            }
            seen += 1;
        }
    }
    assert!(seen >= 1, "no examples/suite-*.toml");
}
