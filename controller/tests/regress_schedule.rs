//! Scheduled suites: the controller's config names suites with cron expressions (checked at
//! load), and the controller runs them on schedule, keeping the history and exporting verdicts.

use fleetbench_fleetkit::sim_fleet;

use std::time::{Duration, Instant};

use fleetbench_controller::metrics::Metrics;
use fleetbench_controller::{ConfigError, ControllerConfig};

#[test]
fn bad_cron_and_bad_suites_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let bad_suite = dir.path().join("bad.toml");
    std::fs::write(&bad_suite, "name = \"x\"\n").unwrap();
    let text = format!(
        "[[suites]]\npath = \"{0}\"\ncron = \"every night\"\n[[suites]]\npath = \"{0}\"\ncron = \"0 3 * * *\"\n[[suites]]\npath = \"{1}\"\ncron = \"0 3 * * *\"\n",
        bad_suite.display(),
        dir.path().join("missing.toml").display()
    );
    let Err(ConfigError::Invalid(problems)) = ControllerConfig::from_toml(&text) else {
        panic!("accepted")
    };
    assert!(
        problems[0].starts_with("suites[0].cron: \"every night\" is not a cron expression"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("suites[1].path: ") && p.contains("missing: a [suite] table")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("suites[2].path: cannot read")),
        "{problems:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_runs_a_scheduled_suite_and_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let agent = sim_fleet::spawn_agent(dir.path(), "host-0");
    let suite = dir.path().join("suite.toml");
    std::fs::write(
        &suite,
        sim_fleet::detection_suite(1, 1.0, 2, false, sim_fleet::TEST_TOLERANCE),
    )
    .unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore_url = \"sqlite://{}\"\nheartbeat_interval = \"500ms\"\n\
         [[hosts]]\nname = \"host-0\"\naddress = \"{}\"\n\
         [[suites]]\npath = \"{}\"\ncron = \"*/2 * * * * *\"\ntag = \"nightly\"\n",
        dir.path().join("c.db").display(),
        agent.addr,
        suite.display()
    );
    let config = ControllerConfig::from_toml(&text).unwrap();
    let handle = fleetbench_controller::start(config, Metrics::new())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let runs = loop {
        let runs = handle.store.suite_runs("detect").await.unwrap();
        if runs.len() >= 2 {
            break runs;
        }
        assert!(Instant::now() < deadline, "scheduled runs so far: {runs:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // The second run compared with the first (the last passing run), both tagged.
    let (second, first) = (&runs[0], &runs[1]);
    assert!(
        first.passed && first.baseline_job_id.is_empty(),
        "{first:?}"
    );
    assert_eq!(second.baseline_job_id, first.job_id);
    assert!(runs.iter().all(|r| r.tag == "nightly"));
    let text = handle.metrics.render_prometheus();
    assert!(
        text.lines()
            .any(|l| l.starts_with("fleetbench_regression_verdicts_total{")),
        "{text}"
    );
    handle.shutdown().await;
}
