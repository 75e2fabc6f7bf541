//! Suite history kept by a remote controller: `fleetbench regress --controller URL` (the
//! binary, a process of its own that reaches the controller only over gRPC) records every run
//! on the controller, and `last-passing` finds the last run that passed there, skipping a
//! failed one. The controller runs in this test process so its store and metrics can be read.

use fleetbench_fleetkit::sim_fleet;

use std::path::Path;
use std::process::{Command, Output};

use fleetbench_testkit::output_text as text;

use fleetbench_proto::controllerpb::{
    JobKind, ListSuiteRunsRequest, RecordSuiteRunRequest, SuiteRun,
};

async fn regress(dir: &Path, url: &str, suite: &str) -> Output {
    let (dir, url, suite) = (dir.to_path_buf(), url.to_string(), suite.to_string());
    tokio::task::spawn_blocking(move || {
        Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
            .args(["regress", &suite, "--controller", &url])
            // No embedded store to fall back on: only the controller can keep the history.
            .args(["--data-dir", dir.join("cli-data").to_str().unwrap()])
            .current_dir(&dir)
            .env_remove("FLEETBENCH_CONTROLLER")
            .env_remove("FLEETBENCH_TOKEN")
            .output()
            .expect("run fleetbench regress")
    })
    .await
    .unwrap()
}

/// The job id the CLI printed: `suite detect: run - (job ID), baseline: …`.
fn job_of(out: &str) -> String {
    out.split("(job ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no job id in:\n{out}"))
        .to_string()
}

fn baseline_of(out: &str) -> String {
    out.split("baseline: ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or_else(|| panic!("no baseline in:\n{out}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_controller_keeps_the_history_and_last_passing_skips_a_failed_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fleet = sim_fleet::Fleet::start(&d.join("fleet"), 2).await;
    let url = fleet.controller.url();
    let tol = sim_fleet::TEST_TOLERANCE;
    let write = |name: &str, seed, slowdown| {
        let suite = sim_fleet::detection_suite(seed, slowdown, 3, false, tol);
        std::fs::write(d.join(name), suite).unwrap();
    };
    write("first.toml", 1, 1.0);
    write("slow.toml", 2, sim_fleet::TEST_SLOWDOWN);
    write("again.toml", 3, 1.0);

    // First run: nothing to compare with; it passes and the controller keeps it.
    let o = regress(d, &url, "first.toml").await;
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(baseline_of(&out).starts_with("none (first run"), "{out}");
    let first = job_of(&out);
    let runs = fleet.controller.store.suite_runs("detect").await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].job_id, first);
    assert!(runs[0].passed);

    // A 30% slower build: compared with the first (last passing), fails, and is kept.
    let o = regress(d, &url, "slow.toml").await;
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(baseline_of(&out), first, "{out}");
    let slow = job_of(&out);

    // The same build as the first: last-passing skips the failed run and picks the first.
    let o = regress(d, &url, "again.toml").await;
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(baseline_of(&out), first, "{out}");
    let again = job_of(&out);

    // The controller's history, newest first, as its API lists it.
    let mut client = fleet.client().await;
    let listed = client
        .list_suite_runs(ListSuiteRunsRequest {
            suite: "detect".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    let summary: Vec<(&str, bool, &str)> = listed
        .iter()
        .map(|r| (r.job_id.as_str(), r.passed, r.baseline_job_id.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (again.as_str(), true, first.as_str()),
            (slow.as_str(), false, first.as_str()),
            (first.as_str(), true, ""),
        ]
    );
    assert!(listed[1].regressions >= 1, "{:?}", listed[1]);
    assert!(listed[1].verdicts.contains("REGRESSED"), "{:?}", listed[1]);
    assert!(
        listed
            .windows(2)
            .all(|w| w[0].created_unix_ms >= w[1].created_unix_ms),
        "{listed:?}"
    );
    let limited = client
        .list_suite_runs(ListSuiteRunsRequest {
            suite: "detect".into(),
            limit: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0].job_id, again);

    // The suite runs are regress jobs; the controller exported the checks it was sent.
    for id in [&first, &slow, &again] {
        let job = fleet.controller.store.get_job(id).await.unwrap().unwrap();
        assert_eq!(job.kind, JobKind::Regress as i32, "{job:?}");
    }
    let metrics = fleet.controller.metrics.render_prometheus();
    let verdicts: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("fleetbench_regression_regressed{") && l.contains("detect"))
        .collect();
    assert!(!verdicts.is_empty(), "{metrics}");
    // The last run passed: every check's regressed gauge is back to 0.
    assert!(verdicts.iter().all(|l| l.ends_with(" 0")), "{metrics}");

    // A record must name a job of the suite on this controller.
    let bad = |job_id: &str, suite: &str| RecordSuiteRunRequest {
        run: Some(SuiteRun {
            job_id: job_id.into(),
            suite: suite.into(),
            passed: true,
            ..Default::default()
        }),
    };
    let err = client
        .record_suite_run(bad("no-such-job", "detect"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(
        err.message().starts_with("run.job_id:"),
        "{}",
        err.message()
    );
    let err = client
        .record_suite_run(bad(&first, "other-suite"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("run.suite:"), "{}", err.message());
    assert_eq!(
        fleet
            .controller
            .store
            .suite_runs("detect")
            .await
            .unwrap()
            .len(),
        3
    );
    assert!(
        fleet
            .controller
            .store
            .suite_runs("other-suite")
            .await
            .unwrap()
            .is_empty()
    );
    fleet.stop().await;
}
