//! `fleetbench bench` as a user runs it: the binary starts the simulated engine itself
//! (`--sim`), prints a table per level, writes the JSON document users script against and the
//! per-request details; `--ramp-up` spreads a closed-loop level's first requests.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_against_the_sim_writes_the_documented_json_and_ramps_its_streams() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("levels.json");
    let details = dir.path().join("requests.jsonl");
    let out = Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
        .args([
            "bench",
            "--sim",
            "--sim-ttft-ms",
            "20",
            "--sim-itl-ms",
            "5",
            "--concurrency",
            "1,4",
            "--num-prompts",
            "8",
            "--dataset",
            "random",
            "--input-len",
            "16",
            "--output-len",
            "8",
            "--ramp-up",
            "40ms",
            "--percentiles",
            "50,99",
        ])
        .arg("--output-json")
        .arg(&json)
        .arg("--output-details")
        .arg(&details)
        .output()
        .expect("run fleetbench bench");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let levels = doc["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2, "{doc}");
    for (l, c) in levels.iter().zip([1, 4]) {
        assert_eq!(l["concurrency"], c, "{l}");
        assert_eq!(l["completed"], 8, "{l}");
        assert_eq!(l["failed"], 0, "{l}");
        assert_eq!(l["output_tokens"], 64, "exact token counts: {l}");
        for key in ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms"] {
            assert!(
                l[key]["mean"].is_number() && l[key]["p99"].is_number(),
                "{key}: {l}"
            );
        }
        // The fixed-latency server's values, within what a loaded machine adds.
        let itl = l["itl_ms"]["p50"].as_f64().unwrap();
        assert!((itl - 5.0).abs() < 2.0, "ITL p50 {itl}: {l}");
        let ttft = l["ttft_ms"]["p50"].as_f64().unwrap();
        assert!((20.0..40.0).contains(&ttft), "TTFT p50 {ttft}: {l}");
    }

    // At 4 streams and a 40 ms ramp, stream s first becomes due 10·s ms after the first
    // (each request takes about 55 ms, so these four are the level's first intended times):
    // spread, not one instant.
    let records: Vec<Value> = std::fs::read_to_string(&details)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 16);
    let mut due: Vec<f64> = records
        .iter()
        .filter(|r| r["level_index"] == 1)
        .map(|r| r["intended_ms"].as_f64().unwrap())
        .collect();
    due.sort_by(f64::total_cmp);
    for s in 1..4 {
        let step = due[s] - due[0];
        assert!(
            (step - 10.0 * s as f64).abs() < 0.5,
            "stream {s} due {step} ms after stream 0: {due:?}"
        );
    }
    // The summary table has a row per level.
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().take(3).eq(["4", "-", "8"])),
        "{text}"
    );
}

/// A `vllm bench serve` command line, flag for flag, with `--save-result`: the vLLM-format file
/// holds vLLM's keys, agrees with fleetbench's own document, and carries the simulated server's
/// latencies.
#[test]
fn a_vllm_bench_serve_command_line_runs_and_saves_vllm_results() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("levels.json");
    let out = Command::new(fleetbench_testkit::workspace_bin("fleetbench"))
        .args(["bench", "--sim", "--sim-ttft-ms", "20", "--sim-itl-ms", "5"])
        .args(["--backend", "vllm", "--endpoint", "/v1/completions"])
        .args(["--dataset-name", "random", "--random-input-len", "16"])
        .args(["--random-output-len", "8", "--num-prompts", "8"])
        .args(["--request-rate", "inf", "--max-concurrency", "2"])
        .args(["--metric-percentiles", "50,99", "--save-result"])
        .arg("--result-dir")
        .arg(dir.path().join("results"))
        .args(["--result-filename", "run.json"])
        .arg("--output-json")
        .arg(&ours)
        .output()
        .expect("run fleetbench bench");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let path = dir.path().join("results/run.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect(&text)).unwrap();
    let own: Value = serde_json::from_str(&std::fs::read_to_string(&ours).unwrap()).unwrap();
    let own = &own["levels"][0];
    assert_eq!(
        own["concurrency"], 2,
        "--max-concurrency with rate inf: {own}"
    );
    assert_eq!(v["request_rate"], "inf", "{v}");
    assert_eq!(v["max_concurrency"], 2, "{v}");
    assert_eq!(v["backend"], "openai", "{v}");
    assert_eq!(v["completed"], 8, "{v}");
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(v["total_output_tokens"], 64, "{v}");
    assert_eq!(v["total_input_tokens"], own["input_tokens"], "{v}");
    assert_eq!(v["request_throughput"], own["requests_per_s"], "{v}");
    assert_eq!(v["output_throughput"], own["output_tokens_per_s"], "{v}");
    assert_eq!(v["ttfts"].as_array().unwrap().len(), 8, "{v}");
    assert_eq!(v["output_lens"], serde_json::json!(vec![8; 8]), "{v}");
    for key in [
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p50_tpot_ms",
        "mean_itl_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "p99_e2el_ms",
        "duration",
        "total_token_throughput",
    ] {
        assert!(v[key].is_number(), "{key}: {v}");
    }
    // The simulated server's latencies, within what a loaded machine adds; the mean TTFT is
    // the same figure as fleetbench's own (from the same requests).
    let ttft = v["median_ttft_ms"].as_f64().unwrap();
    assert!((20.0..40.0).contains(&ttft), "median TTFT {ttft}: {v}");
    let itl = v["median_itl_ms"].as_f64().unwrap();
    assert!((itl - 5.0).abs() < 2.0, "median ITL {itl}: {v}");
    let own_mean = own["ttft_ms"]["mean"].as_f64().unwrap();
    assert!(
        (v["mean_ttft_ms"].as_f64().unwrap() - own_mean).abs() < 0.01,
        "{v} vs {own}"
    );
    // vLLM's ttfts are seconds.
    let first = v["ttfts"][0].as_f64().unwrap();
    assert!((0.015..0.1).contains(&first), "{first}");
}
