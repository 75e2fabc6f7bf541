//! Regression suites end to end: real agent processes running the simulated engine, an
//! embedded controller, the suite runner. A small, seeded version of the detection benchmark
//! (`benches/regress_detection.rs`): no change passes, a 50% slower build fails (10% tolerance), the history
//! picks the last passing run, JUnit XML and metrics carry the verdicts.

use fleetbench_fleetkit::sim_fleet;

use fleetbench_controller::regress::StoreHistory;
use fleetbench_proto::controllerpb::{JobState, SubmitJobRequest};
use fleetbench_rounds::Fleet as _;
use fleetbench_rounds::regress::{self, RegressError, RemoteHistory, Status};
use fleetbench_spec::suite::job_toml;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slower_build_fails_no_change_passes_and_history_keeps_the_last_passing_run() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 2).await;
    let mut client = fleet.client().await;
    let mut history = StoreHistory::new(&fleet.controller.store, Some(&fleet.controller.metrics));
    let suite = |seed, slowdown, tagged| {
        // Five repeats: the t interval is honest about the noise of a loaded 2-core machine
        // (repeats 5-10% apart), where three repeats cannot show even a 30% slowdown; the
        // percentile bootstrap this replaced claimed it could, at a quarter of the width.
        sim_fleet::detection_suite(seed, slowdown, 5, tagged, sim_fleet::TEST_TOLERANCE)
    };

    // First run: nothing to compare with; it passes and becomes the tagged baseline.
    let first = regress::run_suite(
        &mut client,
        &mut history,
        "detect.toml",
        &suite(1, 1.0, false),
        "base",
    )
    .await
    .unwrap();
    assert!(first.passed);
    assert!(first.baseline_job_id.is_none());
    assert!(
        first
            .verdicts
            .iter()
            .all(|v| v.status == Status::NoBaseline)
    );
    assert_eq!(first.verdicts.len(), 2, "two metrics at one level");

    // Same build, other jitter seed: passes against the tagged baseline.
    let same = regress::run_suite(
        &mut client,
        &mut history,
        "detect.toml",
        &suite(2, 1.0, true),
        "",
    )
    .await
    .unwrap();
    assert_eq!(same.baseline_job_id.as_deref(), Some(first.job.id.as_str()));
    assert!(
        same.passed,
        "{}",
        fleetbench_verdicts::regress::verdict::render(&same.verdicts)
    );

    // A 50% slower build: both metrics regress, outside the noise.
    let slow = regress::run_suite(
        &mut client,
        &mut history,
        "detect.toml",
        &suite(3, sim_fleet::TEST_SLOWDOWN, true),
        "",
    )
    .await
    .unwrap();
    assert!(
        !slow.passed,
        "{}",
        fleetbench_verdicts::regress::verdict::render(&slow.verdicts)
    );
    for v in &slow.verdicts {
        assert_eq!(
            v.status,
            Status::Regressed,
            "{}: {}",
            v.metric.name(),
            v.detail
        );
        let c = v.test.expect("a test with its interval");
        assert!(
            c.relative.abs() > sim_fleet::TEST_TOLERANCE && c.low * c.high > 0.0,
            "{c:?}"
        );
    }
    let xml = fleetbench_verdicts::regress::junit::junit_xml("detect", &slow.verdicts).unwrap();
    assert!(xml.contains("failures=\"2\""), "{xml}");
    assert!(xml.contains("type=\"regression\""), "{xml}");

    // The dashboard's metrics carry the last verdicts.
    let text = fleet.controller.metrics.render_prometheus();
    let regressed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("fleetbench_regression_regressed{"))
        .collect();
    assert!(
        !regressed.is_empty() && regressed.iter().all(|l| l.ends_with(" 1")),
        "{text}"
    );

    // History: newest first, with pass/fail; "last-passing" skips the failed run.
    let runs = fleet.controller.store.suite_runs("detect").await.unwrap();
    let passed: Vec<bool> = runs.iter().map(|r| r.passed).collect();
    assert_eq!(passed, [false, true, true]);
    assert_eq!(runs[2].tag, "base");
    let after = regress::run_suite(
        &mut client,
        &mut history,
        "detect.toml",
        &suite(4, 1.0, false),
        "",
    )
    .await
    .unwrap();
    assert_eq!(after.baseline_job_id.as_deref(), Some(same.job.id.as_str()));
    assert!(
        after.passed,
        "{}",
        fleetbench_verdicts::regress::verdict::render(&after.verdicts)
    );
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tag_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 1).await;
    let mut client = fleet.client().await;
    let mut history = StoreHistory::new(&fleet.controller.store, None);
    let text = sim_fleet::detection_suite(1, 1.0, 1, true, sim_fleet::TEST_TOLERANCE);
    let err = regress::run_suite(&mut client, &mut history, "detect.toml", &text, "")
        .await
        .unwrap_err();
    assert!(matches!(err, RegressError::NoBaseline(_)), "{err}");
    assert!(err.to_string().contains("--tag base"), "{err}");
    let jobs = fleet.controller.store.list_jobs(10).await.unwrap();
    assert!(jobs.is_empty(), "nothing was submitted: {jobs:?}");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_missing_from_the_history_is_found_among_the_controllers_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sim_fleet::Fleet::start(dir.path(), 1).await;
    let mut client = fleet.client().await;
    // A run tagged by a client that kept no history (an older fleetbench against a remote
    // controller) is only a job of the suite with the tag.
    let base = sim_fleet::detection_suite(1, 1.0, 2, false, sim_fleet::TEST_TOLERANCE);
    let submitted = client
        .submit_job(SubmitJobRequest {
            spec_toml: job_toml(&base).unwrap(),
            file_name: "detect.toml".into(),
            tag: "base".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(submitted.errors.is_empty(), "{:?}", submitted.errors);
    let job = client.wait(&submitted.job_id).await.unwrap();
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    let mut remote = RemoteHistory::new(client.clone());
    let tagged = sim_fleet::detection_suite(2, 1.0, 2, true, sim_fleet::TEST_TOLERANCE);
    let second = regress::run_suite(&mut client, &mut remote, "detect.toml", &tagged, "")
        .await
        .unwrap();
    assert_eq!(
        second.baseline_job_id.as_deref(),
        Some(submitted.job_id.as_str())
    );
    assert!(
        second.passed,
        "{}",
        fleetbench_verdicts::regress::verdict::render(&second.verdicts)
    );
    // The remote run itself is now in the controller's history.
    let runs = fleet.controller.store.suite_runs("detect").await.unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.job_id.as_str()).collect();
    assert_eq!(ids, [second.job.id.as_str()]);
    assert_eq!(runs[0].baseline_job_id, submitted.job_id);
    fleet.stop().await;
}
