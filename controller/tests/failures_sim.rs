//! Failures are part of every verdict, end to end on the simulated engine (agent processes, an
//! embedded controller): a build that answers a fifth of its requests at once with HTTP 500
//! (`--fail-rate 0.2`) keeps, or even gains, throughput on the requests it completes, yet it
//! loses the comparison (its error rate is above the SLO's `max_error_rate`, default 1%) and
//! fails a regression suite's `error_rate` check while its throughput holds.

use fleetbench_fleetkit::sim_fleet;

use fleetbench_controller::regress::StoreHistory;
use fleetbench_proto::controllerpb::{CompareRequest, JobKind, JobState};
use fleetbench_rounds::Fleet as _;
use fleetbench_rounds::regress::{self, Status};

const FLAGS: &str =
    r#""--moe-runner-backend" = "flashinfer_cutlass", "--time-scale" = 0.25, "--seed" = 1"#;

fn sweep() -> String {
    format!(
        r#"name = "fail-ab"
repeats = 2

[[configs]]
name = "A"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = {{ {FLAGS} }}

[[configs]]
name = "B"
extends = "A"
flags = {{ "--fail-rate" = 0.2 }}

[[workloads]]
name = "random-32-32"
dataset = "random"
input_len = 32
output_len = 32
ignore_eos = true

[load]
concurrency = [4, 8]
requests = 40
"#
    )
}

fn suite(fail_rate: f64, tagged: bool) -> String {
    let baseline = if tagged { "\"tag:base\"" } else { "\"first\"" };
    format!(
        r#"name = "fail-suite"
repeats = 2

[[configs]]
name = "sim"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = {{ {FLAGS}, "--fail-rate" = {fail_rate:?} }}

[[workloads]]
name = "random-32-32"
dataset = "random"
input_len = 32
output_len = 32
ignore_eos = true

[load]
concurrency = [8]
requests = 40

[suite]
baseline = {baseline}
metrics = [
  {{ name = "output_tokens_per_s", tolerance = 0.5 }},
  {{ name = "error_rate", tolerance = 0.01 }},
]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_failing_a_fifth_of_its_requests_loses_compare_and_fails_regress() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 2).await;
    let mut client = fleet.client().await;

    // compare: B may be as fast as A on what it completes, but it cannot win a level.
    let id = client
        .submit(&sweep(), "fail-ab.toml", "", JobKind::Sweep)
        .await
        .unwrap();
    let job = client.wait(&id).await.unwrap();
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    let cmp = client
        .compare(CompareRequest {
            job_ids: vec![id],
            alpha: 0.0,
            history_job_ids: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cmp.groups.len(), 2, "{cmp:?}");
    for g in &cmp.groups {
        assert_ne!(g.winner_config, "B", "{}: {}", g.level_label, g.verdict);
        let b = g
            .configs
            .iter()
            .find(|c| c.config_name == "B")
            .unwrap_or_else(|| panic!("{}: no B in {g:?}", g.level_label));
        // Two repeats of 40 requests, pooled: Binomial(80, 0.2) gives 4 to 32 failures
        // (0.05..=0.40) but for a chance of 4e-5 per level; 0.1..0.3 failed 2% of levels.
        assert!(
            (0.05..=0.40).contains(&b.error_rate),
            "{}: B's error rate {}",
            g.level_label,
            b.error_rate
        );
        assert!(
            b.excluded_reason.contains("error rate"),
            "{}: {:?}",
            g.level_label,
            b.excluded_reason
        );
        let a = g.configs.iter().find(|c| c.config_name == "A").unwrap();
        assert!(a.excluded_reason.is_empty(), "{}: {a:?}", g.level_label);
        assert_eq!(a.error_rate, 0.0, "{}", g.level_label);
    }

    // regress: the error-rate check fails the failing build; its throughput check need not.
    let mut history = StoreHistory::new(&fleet.controller.store, Some(&fleet.controller.metrics));
    let base = regress::run_suite(
        &mut client,
        &mut history,
        "s.toml",
        &suite(0.0, false),
        "base",
    )
    .await
    .unwrap();
    assert!(
        base.passed,
        "{}",
        fleetbench_verdicts::regress::verdict::render(&base.verdicts)
    );
    let bad = regress::run_suite(&mut client, &mut history, "s.toml", &suite(0.2, true), "")
        .await
        .unwrap();
    fleet.stop().await;
    let rendered = fleetbench_verdicts::regress::verdict::render(&bad.verdicts);
    assert!(!bad.passed, "{rendered}");
    let err = bad
        .verdicts
        .iter()
        .find(|v| v.metric == fleetbench_spec::suite::Metric::ErrorRate)
        .unwrap_or_else(|| panic!("no error_rate check: {rendered}"));
    assert_eq!(err.status, Status::Regressed, "{rendered}");
}

/// tune: a candidate that rejects long prompts (`--max-prompt-len`, HTTP 400, as a config with a
/// shorter context would) is infeasible however fast it serves the short ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_rejects_long_prompts_never_wins_tune() {
    use fleetbench_rounds::tuning;
    let spec = format!(
        r#"name = "tune-reject"
repeats = 2

[[configs]]
name = "start"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = {{ {FLAGS} }}

[[workloads]]
name = "random-128-32"
dataset = "random"
input_len = 128
output_len = 32
range_ratio = 0.5
ignore_eos = true

[load]
concurrency = [8]
requests = 48

[search]
strategy = "grid"

[search.flags]
# Prompts are 64 to 128 tokens: a limit of 96 rejects about half of them.
"--max-prompt-len" = [96, 100000]
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 2).await;
    let mut client = fleet.client().await;
    let out = tuning::search::run_search(&mut client, "tune.toml", &spec, |_| {})
        .await
        .unwrap();
    fleet.stop().await;
    let report = tuning::render::search(&out);
    let best = out.best.as_deref().unwrap_or_else(|| panic!("{report}"));
    let winner = out
        .candidates
        .iter()
        .find(|c| c.candidate.name == best)
        .unwrap_or_else(|| panic!("{report}"));
    // The starting config (no limit) and the 100000 limit are equally fast; either may win.
    assert_ne!(
        winner
            .candidate
            .flags
            .get("--max-prompt-len")
            .and_then(|v| v.as_deref()),
        Some("96"),
        "{report}"
    );
    let rejecting = out
        .candidates
        .iter()
        .find(|c| c.candidate.flags["--max-prompt-len"].as_deref() == Some("96"))
        .unwrap_or_else(|| panic!("{report}"));
    let m = rejecting
        .measured
        .as_ref()
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        m.levels.iter().all(|l| l.error_rate > 0.2 && !l.meets_slo),
        "{report}"
    );
    assert_eq!(m.score, 0.0, "{report}");
}
