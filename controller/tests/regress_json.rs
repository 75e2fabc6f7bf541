//! `fleetbench regress --json` and its exit statuses as CI sees them (0 with no regression, 2
//! when the suite could not run, here no controller at the given address, never 1 for that),
//! and `fleetbench tune --json` on a small grid.

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
fn regress_json_prints_the_verdicts_and_a_suite_that_cannot_run_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("base.toml"),
        sim_fleet::detection_suite(1, 1.0, 1, false, sim_fleet::TEST_TOLERANCE),
    )
    .unwrap();

    // Nothing listens on port 1: the suite cannot run, which is not a regression.
    let o = fleetbench(
        d,
        &["regress", "base.toml", "--controller", "http://127.0.0.1:1"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("could not run"), "{}", text(&o));

    // A first run: every check has no baseline and passes; stdout is one JSON document.
    let o = fleetbench(d, &["regress", "base.toml", "--json", "--tag", "base"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o)));
    assert_eq!(doc["suite"], "detect", "{doc}");
    assert_eq!(doc["passed"], true, "{doc}");
    assert_eq!(doc["tag"], "base", "{doc}");
    assert!(doc["baseline_job_id"].is_null(), "{doc}");
    let verdicts = doc["verdicts"].as_array().expect("verdicts");
    let metrics: Vec<&str> = verdicts
        .iter()
        .map(|v| v["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["output_tokens_per_s", "itl_p50_ms"], "{doc}");
    for v in verdicts {
        assert_eq!(v["status"], "no_baseline", "{v}");
        assert_eq!(v["current"].as_array().map(Vec::len), Some(1), "{v}");
        assert!(v["current"][0].as_f64().unwrap() > 0.0, "{v}");
    }
}

/// A two-candidate grid on the simulator: `tune --json` prints one document with both
/// candidates, the best and its flags; progress stays off stdout.
#[test]
fn tune_json_prints_the_search_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("grid.toml"),
        r#"name = "grid"
repeats = 1

[[configs]]
name = "start"
engine = "sim"
model = "fleetbench/sim-moe-30b-a3b"
flags = { "--moe-runner-backend" = "triton", "--time-scale" = 0.25, "--seed" = 1 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 32
output_len = 16
ignore_eos = true

[load]
concurrency = [4]
requests = 16

[search]
strategy = "grid"
objective = "output_tokens_per_s"

[search.flags]
"--max-running-requests" = [1, 4]
"#,
    )
    .unwrap();
    let o = fleetbench(d, &["tune", "grid.toml", "--json", "--output", "t.txt"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o)));
    assert_eq!(doc["name"], "grid", "{doc}");
    let cands = doc["candidates"].as_array().expect("candidates");
    assert!(cands.len() >= 2, "{doc}");
    assert!(
        cands
            .iter()
            .all(|c| c["score"].as_f64().is_some_and(|s| s > 0.0)),
        "{doc}"
    );
    // Four streams are served at once only when four may run: the cap of 1 loses (the cap of
    // 4 and the starting config, whose cap is higher, serve c=4 alike; either may win).
    assert!(
        doc["best_flags"]
            .as_str()
            .is_some_and(|f| !f.contains("--max-running-requests=1")),
        "{doc}"
    );
    assert!(d.join("t.txt").exists());
}
