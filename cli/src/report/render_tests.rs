//! The report from constructed results, opened in headless Chromium (Debian's `chromium`):
//! the page loads without console errors, its SVG plots are in the rendered DOM, and the
//! screenshot is a full-size, non-blank image.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::{
    self, CrashClass, Distribution, EngineSpec, Flag, LevelOutcome, LevelResult, LoadLevel, LogFact,
};
use fleetbench_proto::controllerpb::{
    ConfigInfo, GetResultsResponse, Job, JobState, Run, RunState, StoredLevel, TelemetryPoint,
};

const T0: i64 = 1_780_000_000_000;
const LEVELS: [u32; 4] = [1, 16, 64, 256];

fn dist(p50: f64, p99: f64) -> Option<Distribution> {
    Some(Distribution {
        count: 40,
        mean: (p50 + p99) / 2.0,
        min: p50 / 2.0,
        max: p99 * 1.2,
        percentiles: [
            ("p50".to_string(), p50),
            ("p90".to_string(), p99 * 0.8),
            ("p99".to_string(), p99),
        ]
        .into(),
    })
}

fn config(name: &str, backend: &str, graphs: bool) -> ConfigInfo {
    let mut flags = vec![Flag {
        name: "--moe-runner-backend".into(),
        value: Some(backend.into()),
    }];
    if !graphs {
        flags.push(Flag {
            name: "--disable-cuda-graph".into(),
            value: None,
        });
    }
    ConfigInfo {
        config_id: format!("id-{name}"),
        name: name.into(),
        job_id: "job-1".into(),
        kind: agentpb::EngineKind::Sim as i32,
        spec: Some(EngineSpec {
            profile: "sim".into(),
            model: "sim-moe".into(),
            flags,
            ..Default::default()
        }),
    }
}

fn crash() -> agentpb::Crash {
    agentpb::Crash {
        class: CrashClass::PythonException as i32,
        exception_type: "AttributeError".into(),
        message: "'NoneType' object has no attribute 'shape'".into(),
        frames: vec![
            "  File \"/sgl/srt/layers/attention/flashinfer_backend.py\", line 412, in forward_decode".into(),
            "    q.shape[0], <bad> & \"quoted\"".into(),
        ],
        log_tail: vec!["[2026] scheduler died".into(), "Traceback (most recent call last):".into()],
        summary: "AttributeError: 'NoneType' object has no attribute 'shape'".into(),
        ..Default::default()
    }
}

/// Two configs, two repeats, four levels; B crashes at the top level. Telemetry for two GPUs
/// and the engine, unless `telemetry` is false.
fn results(telemetry: bool) -> GetResultsResponse {
    let mut out = GetResultsResponse {
        jobs: vec![Job {
            id: "job-1".into(),
            name: "sim-ab".into(),
            state: JobState::Succeeded as i32,
            file_name: "quickstart.toml".into(),
            trials_total: 4,
            trials_done: 4,
            levels_total: 16,
            levels_done: 16,
            crashes: 2,
            ..Default::default()
        }],
        configs: vec![
            config("a", "triton", true),
            config("b", "flashinfer_cutlass", false),
        ],
        ..Default::default()
    };
    let mut t = T0;
    for repeat in 0..2u32 {
        for (ci, name) in ["a", "b"].into_iter().enumerate() {
            let run_id = format!("run-{name}-{repeat}");
            let start = t;
            for (li, &c) in LEVELS.iter().enumerate() {
                let cf = f64::from(c);
                let (tput, crashed) = match name {
                    "a" => (90.0 * cf.powf(0.7) + f64::from(repeat) * 3.0, false),
                    _ => (70.0 * cf.powf(0.85) - f64::from(repeat) * 3.0, c == 256),
                };
                let finished = t + 20_000;
                out.levels.push(StoredLevel {
                    job_id: "job-1".into(),
                    run_id: run_id.clone(),
                    trial_id: format!("trial-{name}-{repeat}"),
                    host: "local".into(),
                    config_id: format!("id-{name}"),
                    config_name: name.into(),
                    workload: "random-512".into(),
                    repeat,
                    attempt: 0,
                    result: Some(LevelResult {
                        level_index: li as u32,
                        level: Some(LoadLevel {
                            concurrency: Some(c),
                            request_rate: None,
                            burstiness: 1.0,
                        }),
                        outcome: if crashed {
                            LevelOutcome::Crashed
                        } else {
                            LevelOutcome::Ok
                        } as i32,
                        crash: crashed.then(crash),
                        completed: if crashed { 12 } else { 40 },
                        failed: if crashed { 28 } else { 0 },
                        output_tokens_per_s: if crashed { 0.0 } else { tput },
                        requests_per_s: tput / 128.0,
                        ttft_ms: dist(20.0 + cf * 0.5, 60.0 + cf * 2.0),
                        itl_ms: dist(8.0 + cf * 0.05 * (ci as f64 + 1.0), 15.0 + cf * 0.1),
                        e2e_ms: dist(1000.0 + cf * 10.0, 2000.0 + cf * 20.0),
                        started_unix_ms: t,
                        finished_unix_ms: finished,
                        ..Default::default()
                    }),
                    gpu_power_w: None,
                    lease_epoch: 0,
                });
                if telemetry {
                    for s in 0..10 {
                        let at = t + s * 2000;
                        let load = (cf / 256.0).min(1.0);
                        for gpu in 0..2 {
                            out.telemetry.push(TelemetryPoint {
                                unix_ms: at,
                                host: "local".into(),
                                series: "hw.power".into(),
                                gpu: Some(gpu),
                                value: 120.0 + 500.0 * load + f64::from(gpu) * 10.0,
                                run_id: run_id.clone(),
                            });
                            out.telemetry.push(TelemetryPoint {
                                unix_ms: at,
                                host: "local".into(),
                                series: "hw.gpu.utilization".into(),
                                gpu: Some(gpu),
                                value: 0.2 + 0.75 * load,
                                run_id: run_id.clone(),
                            });
                        }
                        for (series, v) in [
                            ("engine.running_requests", cf.min(200.0)),
                            ("engine.kv_cache_usage", 0.1 + 0.8 * load),
                        ] {
                            out.telemetry.push(TelemetryPoint {
                                unix_ms: at,
                                host: "local".into(),
                                series: series.into(),
                                gpu: None,
                                value: v,
                                run_id: run_id.clone(),
                            });
                        }
                    }
                }
                t = finished + 1000;
            }
            out.runs.push(Run {
                run_id,
                job_id: "job-1".into(),
                host: "local".into(),
                config_id: format!("id-{name}"),
                config_name: name.into(),
                workload: "random-512".into(),
                repeat,
                state: RunState::Done as i32,
                argv: vec![
                    "fleetbench-sim".into(),
                    "--moe-runner-backend".into(),
                    if ci == 0 {
                        "triton"
                    } else {
                        "flashinfer_cutlass"
                    }
                    .into(),
                ],
                facts: vec![LogFact {
                    key: "kv_cache_tokens".into(),
                    value: "383872".into(),
                }],
                started_unix_ms: start,
                finished_unix_ms: t,
                ..Default::default()
            });
        }
    }
    out
}

fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file());
    found.expect("Debian's `chromium` is not installed (scripts/test.sh installs it: apt-get install chromium)")
}

/// Runs headless Chromium on `page` with `extra` args; returns (stdout, stderr).
fn run_chromium(page: &Path, profile: &Path, extra: &[String]) -> (String, String) {
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,2000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(format!("file://{}", page.display()))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = cmd.spawn().expect("start chromium");
    let id = child.id();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    loop {
        if let Ok(out) = rx.try_recv() {
            let out = out.expect("chromium output");
            return (
                String::from_utf8_lossy(&out.stdout).into(),
                String::from_utf8_lossy(&out.stderr).into(),
            );
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Width, height and byte size of a PNG file (from its IHDR chunk).
fn png_info(path: &Path) -> (u32, u32, u64) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20), bytes.len() as u64)
}

fn console_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load resource")
        })
        .collect()
}

#[test]
fn report_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let results = results(true);
    let compare = fleetbench_verdicts::compare::compare(&results);
    let files = super::write_all(&dir.path().join("out"), &results, &compare).unwrap();
    let names: Vec<_> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["results.json", "results.csv", "report.html"]);

    // Data files: every stored level in both.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(
        json["levels"].as_array().unwrap().len(),
        results.levels.len()
    );
    assert_eq!(
        json["compare"]["crashes"][0]["crash"]["class"],
        "python_exception"
    );
    let mut csv = csv::Reader::from_path(&files[1]).unwrap();
    let header = csv.headers().unwrap().clone();
    assert!(
        header.iter().any(|h| h == "ttft_ms_p99")
            && header.iter().any(|h| h == "output_tokens_per_s")
    );
    assert_eq!(csv.records().count(), results.levels.len());

    // Self-contained: no scripts, no external resources.
    let html = std::fs::read_to_string(&files[2]).unwrap();
    for forbidden in [
        "<script",
        "<link",
        "src=\"http",
        "href=\"http",
        "url(http",
        "@import",
    ] {
        assert!(
            !html.contains(forbidden),
            "report.html contains {forbidden:?}"
        );
    }
    assert!(
        html.contains("&lt;bad&gt; &amp; &quot;quoted&quot;"),
        "traceback text is escaped"
    );
    assert!(
        html.contains("winner +"),
        "comparison verdicts are in the page"
    );

    let profile = dir.path().join("chromium-profile");
    let (dom, stderr) = run_chromium(&files[2], &profile, &["--dump-dom".to_string()]);
    assert!(
        console_lines(&stderr).is_empty(),
        "console errors: {:?}",
        console_lines(&stderr)
    );
    // 4 load-sweep charts + error rate + GPU power, GPU utilisation, running requests, KV
    // cache.
    let svgs = dom.matches("<svg").count();
    assert_eq!(svgs, 9, "rendered DOM has {svgs} SVG plots");
    assert!(
        dom.contains("error rate (failed / sent)"),
        "the error-rate plot"
    );
    assert!(dom.contains("b crashed"), "crash marked on the plots");
    assert!(
        dom.contains("AttributeError"),
        "crash listed with its exception"
    );

    let shot = dir.path().join("report.png");
    let (_, stderr) = run_chromium(
        &files[2],
        &profile,
        &[format!("--screenshot={}", shot.display())],
    );
    assert!(
        console_lines(&stderr).is_empty(),
        "console errors: {:?}",
        console_lines(&stderr)
    );
    let (w, h, size) = png_info(&shot);
    assert_eq!((w, h), (1280, 2000));

    // Against a blank page of the same size: a page full of plots compresses far worse.
    let blank = dir.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body></body></html>").unwrap();
    let blank_shot = dir.path().join("blank.png");
    run_chromium(
        &blank,
        &profile,
        &[format!("--screenshot={}", blank_shot.display())],
    );
    let (_, _, blank_size) = png_info(&blank_shot);
    assert!(
        size > 40_000 && size > blank_size * 5,
        "screenshot {size} bytes vs blank {blank_size}: looks empty"
    );
    // The console check is live: a page with a script error is caught by it.
    let broken = dir.path().join("broken.html");
    std::fs::write(
        &broken,
        "<html><body><script>undefinedFn();</script></body></html>",
    )
    .unwrap();
    let (_, stderr) = run_chromium(&broken, &profile, &["--dump-dom".to_string()]);
    assert!(
        console_lines(&stderr)
            .iter()
            .any(|l| l.contains("undefinedFn")),
        "chromium did not report a console error: {stderr}"
    );
    if let Ok(keep) = std::env::var("FLEETBENCH_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

#[test]
fn a_report_without_telemetry_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let results = results(false);
    let compare = fleetbench_verdicts::compare::compare(&results);
    let files = super::write_all(dir.path(), &results, &compare).unwrap();
    let html = std::fs::read_to_string(&files[2]).unwrap();
    assert!(html.contains("No GPU telemetry: the hosts reported no GPUs"));
    assert!(html.contains("No engine metrics were scraped"));
    assert!(
        html.contains("What each level's figures cover") && html.contains("<th>error rate</th>"),
        "every level says what its figures cover"
    );
    assert_eq!(
        html.matches("<svg").count(),
        5,
        "only the load sweeps and the error rate"
    );
}

#[test]
fn terminal_comparison_shows_winners_crossovers_and_crashes() {
    let results = results(false);
    let compare = fleetbench_verdicts::compare::compare(&results);
    let text = super::table::render_compare(&compare);
    assert!(text.contains("Workload random-512"), "{text}");
    assert!(text.contains("winner +"), "{text}");
    assert!(text.contains("CRASHED (python_exception)"), "{text}");
    assert!(
        text.contains("Crossovers (the significant winner changes with load):"),
        "{text}"
    );
    assert!(text.contains("b on local (random-512 c=256): python_exception: AttributeError: 'NoneType' object has no attribute 'shape'"), "{text}");
    assert!(text.contains("at q.shape[0]"), "{text}");
}

#[test]
fn open_loop_levels_plot_against_request_rate() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = results(false);
    for l in &mut results.levels {
        let level = l.result.as_mut().unwrap().level.as_mut().unwrap();
        level.request_rate = level.concurrency.map(|c| f64::from(c) / 4.0);
        level.concurrency = None;
    }
    let compare = fleetbench_verdicts::compare::compare(&results);
    let labels: Vec<_> = compare
        .groups
        .iter()
        .map(|g| g.level_label.as_str())
        .collect();
    assert_eq!(labels, ["r=0.25/s", "r=4/s", "r=16/s", "r=64/s"]);
    let files = super::write_all(dir.path(), &results, &compare).unwrap();
    let html = std::fs::read_to_string(&files[2]).unwrap();
    assert!(html.contains("request rate (req/s)"));
    assert!(html.contains("Engine runs") && html.contains("run-b-1"));
}

#[test]
fn two_jobs_in_one_report_keep_their_configs_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = results(false);
    let mut second = self::results(false);
    for l in &mut second.levels {
        l.job_id = "job-2-later".into();
    }
    for c in &mut second.configs {
        c.job_id = "job-2-later".into();
    }
    second.jobs[0].id = "job-2-later".into();
    results.jobs.extend(second.jobs);
    results.configs.extend(second.configs);
    results.levels.extend(second.levels);
    let compare = fleetbench_verdicts::compare::compare(&results);
    assert_eq!(compare.groups[0].configs.len(), 4);
    let files = super::write_all(dir.path(), &results, &compare).unwrap();
    let html = std::fs::read_to_string(&files[2]).unwrap();
    for name in ["a@job-1", "b@job-1", "a@job-2-la", "b@job-2-la"] {
        assert!(
            html.contains(&format!("</span>{name}</th>")),
            "config table names {name}"
        );
    }
    assert!(html.contains("fleetbench report: 2 jobs"));
}

#[test]
fn a_deployment_gets_a_chart_per_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = results(false);
    let compare = fleetbench_verdicts::compare::compare(&results);
    let files = super::write_all(dir.path(), &results, &compare).unwrap();
    let html = std::fs::read_to_string(&files[2]).unwrap();
    assert!(!html.contains("per replica"), "a job without deployments");

    // Config "a" ran behind a router: replica 0 took 60% and 50% of the tokens in its two
    // repeats, so its line is at 55% and replica 1's at 45%.
    for l in results.levels.iter_mut().filter(|l| l.config_name == "a") {
        let first = if l.repeat == 0 { 0.6 } else { 0.5 };
        let r = l.result.as_mut().unwrap();
        r.deployment = Some(agentpb::Deployment {
            replicas: [first, 1.0 - first]
                .iter()
                .enumerate()
                .map(|(i, share)| agentpb::ReplicaLevel {
                    worker: format!("http://10.0.0.{i}:9931"),
                    share: Some(*share),
                    cache_hit_rate: Some(0.25 * (i as f64 + 1.0)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
    }
    let charts = super::replicas::charts(&results, &super::charts::Colors::new(&results, &compare));
    let titles: Vec<&str> = charts.iter().map(|c| c.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "random-512: share of output tokens per replica",
            "random-512: cache-hit rate per replica"
        ]
    );
    let names: Vec<&str> = charts[0].lines.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["a · replica 0", "a · replica 1"]);
    let ys = |line: &super::plots::Line| -> Vec<f64> {
        line.points
            .iter()
            .map(|p| (p.1 * 1e9).round() / 1e9)
            .collect()
    };
    // Crashed levels are left out; "a" crashed none of its four levels.
    assert_eq!(ys(&charts[0].lines[0]), [55.0; 4]);
    assert_eq!(ys(&charts[0].lines[1]), [45.0; 4]);
    assert_eq!(ys(&charts[1].lines[1]), [50.0; 4]);
    assert!(charts[0].lines[1].dashed && !charts[0].lines[0].dashed);
    let files = super::write_all(dir.path(), &results, &compare).unwrap();
    let html = std::fs::read_to_string(&files[2]).unwrap();
    assert!(html.contains("Replicas behind a router"), "{html}");
    assert!(html.contains("a · replica 1"));
}
