//! `fleetbench regress` and `fleetbench tune` as a user runs them (the binary, its embedded
//! controller and local agents): exit codes, verdict lines, JUnit file, located errors.

use fleetbench_fleetkit::sim_fleet;

use std::path::Path;
use std::process::Output;

use fleetbench_testkit::output_text as text;

fn fleetbench(dir: &Path, args: &[&str]) -> Output {
    fleetbench_testkit::fleetbench_cli()
        .args(args)
        .args(["--data-dir", dir.join("data").to_str().unwrap()])
        .current_dir(dir)
        .output()
        .expect("run fleetbench")
}

#[test]
fn regress_exits_by_verdict_and_writes_junit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("base.toml"),
        sim_fleet::detection_suite(1, 1.0, 2, false, sim_fleet::TEST_TOLERANCE),
    )
    .unwrap();
    std::fs::write(
        d.join("slow.toml"),
        sim_fleet::detection_suite(
            2,
            sim_fleet::TEST_SLOWDOWN,
            2,
            true,
            sim_fleet::TEST_TOLERANCE,
        ),
    )
    .unwrap();

    let o = fleetbench(
        d,
        &["regress", "base.toml", "--tag", "base", "--agents", "2"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("baseline: none (first run"),
        "{}",
        text(&o)
    );

    let o = fleetbench(
        d,
        &[
            "regress",
            "slow.toml",
            "--junit",
            "junit.xml",
            "--agents",
            "2",
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("REGRESSED") && out.contains("FAIL: 2 of 2 checks regressed"),
        "{out}"
    );
    let xml = std::fs::read_to_string(d.join("junit.xml")).unwrap();
    assert!(xml.contains("failures=\"2\""), "{xml}");

    std::fs::write(
        d.join("bad.toml"),
        sim_fleet::detection_suite(1, 1.0, 2, false, sim_fleet::TEST_TOLERANCE)
            .replace("tolerance = 0.1", "tolerance = 5"),
    )
    .unwrap();
    let o = fleetbench(d, &["regress", "bad.toml"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("bad.toml:26: suite.metrics[0].tolerance: a relative tolerance is at least 0 and below 1"),
        "{out}"
    );
}

#[test]
fn tune_refuses_an_invalid_search_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec =
        std::fs::read_to_string(fleetbench_testkit::repo_root().join("examples/tune-sim.toml"))
            .unwrap()
            .replace("eta = 3", "eta = 1");
    std::fs::write(d.join("tune.toml"), spec).unwrap();
    let o = fleetbench(d, &["tune", "tune.toml"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("tune.toml:37: search.eta: must be at least 2, got 1"),
        "{out}"
    );
    assert!(!d.join("data").exists(), "nothing started");
}
