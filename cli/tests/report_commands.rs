//! `fleetbench compare`, `report` and `diff` as a user runs them after `fleetbench run`: the
//! real binary reading the embedded controller's SQLite store under `./fleetbench-data/`,
//! written here through the controller's own store API.

use std::path::Path;
use std::process::Output;

use fleetbench_controller::store::{NewJob, Store, TrialRow};
use fleetbench_proto::agentpb::{
    self, Distribution, EngineSpec, Flag, LevelOutcome, LevelResult, LoadLevel, LogFact,
};
use fleetbench_proto::controllerpb::{
    ConfigInfo, JobKind, Run, RunState, StoredLevel, TelemetryPoint, TrialState,
};

const JOB: &str = "0123456789abcdef0123456789abcdef";

fn dist(p50: f64, p99: f64) -> Option<Distribution> {
    Some(Distribution {
        count: 20,
        percentiles: [("p50".to_string(), p50), ("p99".to_string(), p99)].into(),
        ..Default::default()
    })
}

fn info(name: &str, backend: &str) -> ConfigInfo {
    ConfigInfo {
        config_id: format!("id-{name}"),
        name: name.into(),
        job_id: JOB.into(),
        kind: agentpb::EngineKind::Sim as i32,
        spec: Some(EngineSpec {
            profile: "sim".into(),
            model: "sim-moe".into(),
            flags: vec![Flag {
                name: "--moe-runner-backend".into(),
                value: Some(backend.into()),
            }],
            ..Default::default()
        }),
    }
}

/// A job "ab": config a wins at concurrency 1, b at 32 (clearly, over two repeats).
async fn write_store(data: &Path) {
    std::fs::create_dir_all(data).unwrap();
    let url = format!("sqlite://{}", data.join("controller.db").display());
    let store = Store::open(&url).await.unwrap();
    write_results(&store).await;
    store.close().await;
}

async fn write_results(store: &Store) {
    let configs = vec![info("a", "triton"), info("b", "flashinfer_cutlass")];
    let mut trials = Vec::new();
    for repeat in 0..2u32 {
        for (ci, c) in configs.iter().enumerate() {
            trials.push(TrialRow {
                id: format!("{JOB}-t{repeat}{ci}"),
                job_id: JOB.into(),
                position: repeat * 2 + ci as u32,
                config_index: ci as u32,
                workload_index: 0,
                repeat,
                config_id: c.config_id.clone(),
                config_name: c.name.clone(),
                workload: "short".into(),
                level_count: 2,
                state: TrialState::Done,
                attempts: 1,
                reason: String::new(),
            });
        }
    }
    let job = NewJob {
        id: JOB.into(),
        name: "ab".into(),
        kind: JobKind::Sweep,
        spec_toml: "name = \"ab\"".into(),
        file_name: "ab.toml".into(),
        tag: String::new(),
        created_unix_ms: 1_780_000_000_000,
    };
    store.insert_job(&job, &configs, &trials).await.unwrap();
    let mut t = 1_780_000_000_000i64;
    for trial in &trials {
        let a = trial.config_name == "a";
        let run_id = format!("{}-a1", trial.id);
        store
            .put_run(&Run {
                run_id: run_id.clone(),
                job_id: JOB.into(),
                trial_id: trial.id.clone(),
                host: "local".into(),
                config_id: trial.config_id.clone(),
                config_name: trial.config_name.clone(),
                workload: "short".into(),
                repeat: trial.repeat,
                attempt: 1,
                state: RunState::Done as i32,
                argv: [
                    "fleetbench-sim",
                    "--moe-runner-backend",
                    if a { "triton" } else { "flashinfer_cutlass" },
                ]
                .map(String::from)
                .to_vec(),
                facts: vec![LogFact {
                    key: "server_args".into(),
                    value: format!(
                        r#"{{"moe_runner_backend":"{}","tp_size":1}}"#,
                        if a { "triton" } else { "flashinfer_cutlass" }
                    ),
                }],
                started_unix_ms: t,
                finished_unix_ms: t + 10_000,
                ..Default::default()
            })
            .await
            .unwrap();
        for (index, c) in [1u32, 32].into_iter().enumerate() {
            let tput = match (a, c) {
                (true, 1) => 250.0,
                (false, 1) => 200.0,
                (true, _) => 4000.0,
                (false, _) => 6000.0,
            } + f64::from(trial.repeat) * 5.0;
            let level = StoredLevel {
                job_id: JOB.into(),
                run_id: run_id.clone(),
                trial_id: trial.id.clone(),
                host: "local".into(),
                config_id: trial.config_id.clone(),
                config_name: trial.config_name.clone(),
                workload: "short".into(),
                repeat: trial.repeat,
                attempt: 1,
                result: Some(LevelResult {
                    level_index: index as u32,
                    level: Some(LoadLevel {
                        concurrency: Some(c),
                        request_rate: None,
                        burstiness: 1.0,
                    }),
                    outcome: LevelOutcome::Ok as i32,
                    completed: 20,
                    output_tokens_per_s: tput,
                    requests_per_s: tput / 64.0,
                    ttft_ms: dist(10.0, 30.0),
                    itl_ms: dist(4.0, 8.0),
                    e2e_ms: dist(300.0, 500.0),
                    started_unix_ms: t + index as i64 * 5000,
                    finished_unix_ms: t + index as i64 * 5000 + 4000,
                    ..Default::default()
                }),
                // Power measured at the wider level only (none reported at c=1).
                gpu_power_w: (c == 32).then_some(612.5),
                lease_epoch: 0,
            };
            assert!(store.put_level(&level).await.unwrap());
        }
        let points: Vec<TelemetryPoint> = (0..5)
            .map(|i| TelemetryPoint {
                unix_ms: t + i * 2000,
                host: "local".into(),
                series: "engine.running_requests".into(),
                gpu: None,
                value: (i * 8) as f64,
                run_id: run_id.clone(),
            })
            .collect();
        store.put_telemetry(JOB, &points).await.unwrap();
        t += 11_000;
    }
}

fn fleetbench(dir: &Path, args: &[&str]) -> Output {
    fleetbench_testkit::fleetbench_cli()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run fleetbench")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn compare_report_and_diff_read_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    write_store(&dir.path().join("fleetbench-data")).await;

    // By job name: tables with each level's winner, and the crossover.
    let text = ok(&fleetbench(dir.path(), &["compare", "ab"]));
    assert!(text.contains("Workload short"), "{text}");
    assert!(text.contains("winner +24.7% vs b, significant"), "{text}");
    assert!(text.contains("winner +50.0% vs a, significant"), "{text}");
    assert!(
        text.contains("short: a wins at c=1, b wins at c=32"),
        "{text}"
    );

    // By id prefix, as JSON.
    let json: serde_json::Value = serde_json::from_str(&ok(&fleetbench(
        dir.path(),
        &["compare", "0123456", "--json"],
    )))
    .unwrap();
    let winners: Vec<&str> = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["winner"].as_str().unwrap())
        .collect();
    assert_eq!(winners, ["a", "b"]);
    // Each verdict carries its test: two levels tested, Holm over both.
    assert_eq!(
        (json["alpha"].as_f64(), json["tests"].as_u64()),
        (Some(0.05), Some(2))
    );
    for g in json["groups"].as_array().unwrap() {
        let (p, adj) = (
            g["p_value"].as_f64().unwrap(),
            g["p_adjusted"].as_f64().unwrap(),
        );
        assert!(p <= adj && adj <= 2.0 * p + 1e-12, "{g}");
        let ci = g["effect_ci_pct"].as_array().unwrap();
        assert!(ci[0].as_f64() < g["effect_pct"].as_f64(), "{g}");
        assert!(
            g["mde_pct"].as_f64().is_some()
                && g["verdict"].as_str().unwrap().contains("significant"),
            "{g}"
        );
    }
    // A significance level outside (0, 1) is refused, naming the flag.
    let bad = fleetbench(dir.path(), &["compare", "ab", "--alpha", "1.5"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--alpha"),
        "{bad:?}"
    );

    let out = dir.path().join("out");
    let text = ok(&fleetbench(
        dir.path(),
        &["report", JOB, "--output", out.to_str().unwrap()],
    ));
    for f in ["results.json", "results.csv", "report.html"] {
        assert!(
            text.contains(&format!("wrote {}", out.join(f).display())),
            "{text}"
        );
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        6,
        "4 sweeps + error rate + running requests"
    );
    assert!(html.contains("No GPU telemetry"));
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 8,
        "header + one row per stored level"
    );
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "gpu_power_w")
        .expect("a power column");
    let power: Vec<&str> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap())
        .collect();
    assert_eq!(power.iter().filter(|p| **p == "612.5").count(), 4, "{csv}");
    assert_eq!(power.iter().filter(|p| p.is_empty()).count(), 4, "{csv}");

    let text = ok(&fleetbench(
        dir.path(),
        &["diff", &format!("{JOB}-t00-a1"), &format!("{JOB}-t01-a1")],
    ));
    assert!(
        text.contains("argv --moe-runner-backend")
            && text.contains("server_args.moe_runner_backend"),
        "{text}"
    );
    assert!(text.contains("2 entries differ, 2 are the same"), "{text}");
    assert!(
        !text.contains("tp_size"),
        "equal entries are not listed: {text}"
    );

    // The same difference as JSON for scripts.
    let json = ok(&fleetbench(
        dir.path(),
        &[
            "diff",
            &format!("{JOB}-t00-a1"),
            &format!("{JOB}-t01-a1"),
            "--json",
        ],
    ));
    let doc: serde_json::Value = serde_json::from_str(&json).expect(&json);
    assert_eq!(doc["same"], 2, "{doc}");
    let keys: Vec<&str> = doc["differ"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{doc}");
    assert!(
        keys.iter().any(|k| k.contains("moe_runner_backend")),
        "{doc}"
    );
}

#[test]
fn unknown_jobs_and_missing_stores_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = fleetbench(dir.path(), &["compare", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no embedded store at fleetbench-data/controller.db"),
        "{err}"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(write_store(&dir.path().join("fleetbench-data")));
    let out = fleetbench(dir.path(), &["report", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no job \"nope\""), "{err}");
    let out = fleetbench(dir.path(), &["diff", "run-x", &format!("{JOB}-t00-a1")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run \"run-x\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_report_and_diff_talk_to_a_controller() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ctl.db").display());
    let mut config = fleetbench_controller::ControllerConfig::local(&url);
    config.resume_jobs = false;
    let ctl = fleetbench_controller::start(config, fleetbench_controller::metrics::Metrics::new())
        .await
        .unwrap();
    write_results(&ctl.store).await;
    let api = ctl.url();
    // An empty working directory: everything comes over the API.
    let work = dir.path().join("elsewhere");
    std::fs::create_dir_all(&work).unwrap();
    let run = |args: Vec<String>| {
        let work = work.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            fleetbench(&work, &args)
        })
    };
    let out = run(vec![
        "compare".into(),
        "ab".into(),
        "--controller".into(),
        api.clone(),
    ])
    .await
    .unwrap();
    let text = ok(&out);
    assert!(text.contains("winner +50.0% vs a, significant"), "{text}");

    let out = run(vec![
        "report".into(),
        "0123".into(),
        "--controller".into(),
        api.clone(),
        "-o".into(),
        "rep".into(),
    ])
    .await
    .unwrap();
    ok(&out);
    let html = std::fs::read_to_string(work.join("rep/report.html")).unwrap();
    assert!(html.contains("Engine running requests"));

    let out = run(vec![
        "diff".into(),
        format!("{JOB}-t10-a1"),
        format!("{JOB}-t11-a1"),
        "--controller".into(),
        api.clone(),
    ])
    .await
    .unwrap();
    assert!(ok(&out).contains("2 entries differ"));
    assert!(
        !work.join("fleetbench-data").exists(),
        "no embedded store was created"
    );
    ctl.shutdown().await;
}
