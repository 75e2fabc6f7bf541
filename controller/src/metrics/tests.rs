use std::collections::HashMap;

use super::*;
use fleetbench_proto::agentpb::{Distribution, GpuSample, LevelResult, LoadLevel};

fn dist(count: u64, min: f64, p50: f64, p99: f64, max: f64) -> Distribution {
    Distribution {
        count,
        mean: p50,
        min,
        max,
        percentiles: HashMap::from([("p50".to_string(), p50), ("p99".to_string(), p99)]),
    }
}

fn stored(
    config: &str,
    concurrency: u32,
    outcome: agentpb::LevelOutcome,
) -> controllerpb::StoredLevel {
    controllerpb::StoredLevel {
        job_id: "job-1".into(),
        run_id: "run-1".into(),
        trial_id: "trial-1".into(),
        host: "gpu-a".into(),
        config_id: format!("id-{config}"),
        config_name: config.into(),
        workload: "chat".into(),
        repeat: 0,
        attempt: 1,
        result: Some(LevelResult {
            level_index: 0,
            level: Some(LoadLevel {
                concurrency: Some(concurrency),
                request_rate: None,
                burstiness: 1.0,
            }),
            outcome: outcome as i32,
            completed: 100,
            failed: 2,
            input_tokens: 12_800,
            output_tokens: 6_400,
            output_tokens_per_s: 757.5,
            total_tokens_per_s: 2272.5,
            requests_per_s: 11.8,
            goodput_requests_per_s: 11.0,
            ttft_ms: Some(dist(100, 5.0, 20.0, 80.0, 95.0)),
            itl_ms: Some(dist(6_300, 1.0, 3.0, 9.0, 12.0)),
            e2e_ms: Some(dist(100, 300.0, 500.0, 900.0, 1000.0)),
            ..Default::default()
        }),
        gpu_power_w: None,
        lease_epoch: 0,
    }
}

fn line_value(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn level_results_become_gauges_counters_and_histograms() {
    let m = Metrics::new();
    m.level_stored(
        &stored("base", 64, agentpb::LevelOutcome::Ok),
        "sglang",
        "qwen",
    );
    let text = m.render_prometheus();
    let labels = "fleetbench_concurrency=\"64\",fleetbench_config_id=\"id-base\",fleetbench_config_name=\"base\",\
                  fleetbench_engine_kind=\"sglang\",fleetbench_host=\"gpu-a\",fleetbench_job_id=\"job-1\"";
    let out = line_value(
        &text,
        &format!(
            "fleetbench_level_output_tokens_per_second{{{labels},fleetbench_repeat=\"0\",fleetbench_workload=\"chat\",gen_ai_request_model=\"qwen\"}} "
        ),
    );
    assert_eq!(out, 757.5);
    let p99 = line_value(
        &text,
        &format!(
            "fleetbench_level_time_to_first_token_seconds{{{labels},fleetbench_quantile=\"p99\",fleetbench_repeat=\"0\",fleetbench_workload=\"chat\",gen_ai_request_model=\"qwen\"}} "
        ),
    );
    assert!((p99 - 0.08).abs() < 1e-12, "{p99}");
    assert_eq!(
        line_value(
            &text,
            &format!(
                "fleetbench_level_crashed{{{labels},fleetbench_repeat=\"0\",fleetbench_workload=\"chat\",gen_ai_request_model=\"qwen\"}} "
            )
        ),
        0.0
    );
    assert_eq!(
        line_value(
            &text,
            &format!(
                "fleetbench_tokens_total{{{labels},fleetbench_workload=\"chat\",gen_ai_request_model=\"qwen\",gen_ai_token_type=\"output\"}} "
            )
        ),
        6400.0
    );
    // The histogram has exactly `count` observations, all between min and max.
    let hist = format!(
        "gen_ai_client_operation_time_to_first_chunk_seconds_count{{{labels},fleetbench_workload=\"chat\",gen_ai_provider_name=\"sglang\",gen_ai_request_model=\"qwen\"}} "
    );
    assert_eq!(line_value(&text, &hist), 100.0);
    let itl = format!(
        "gen_ai_client_operation_time_per_output_chunk_seconds_count{{{labels},fleetbench_workload=\"chat\",gen_ai_provider_name=\"sglang\",gen_ai_request_model=\"qwen\"}} "
    );
    assert_eq!(line_value(&text, &itl), 6300.0);
    let le_004 = format!(
        "gen_ai_client_operation_time_to_first_chunk_seconds_bucket{{{labels},fleetbench_workload=\"chat\",gen_ai_provider_name=\"sglang\",gen_ai_request_model=\"qwen\",le=\"0.0025\"}} "
    );
    assert_eq!(
        line_value(&text, &le_004),
        0.0,
        "nothing below the minimum (5 ms)"
    );
    let le_02 = format!(
        "gen_ai_client_operation_time_to_first_chunk_seconds_bucket{{{labels},fleetbench_workload=\"chat\",gen_ai_provider_name=\"sglang\",gen_ai_request_model=\"qwen\",le=\"0.02\"}} "
    );
    assert_eq!(
        line_value(&text, &le_02),
        50.0,
        "half the requests at or below the median"
    );
}

#[test]
fn crashed_level_and_crash_counter() {
    let m = Metrics::new();
    let mut level = stored("fast", 512, agentpb::LevelOutcome::Crashed);
    level.result.as_mut().unwrap().ttft_ms = None;
    m.level_stored(&level, "sglang", "qwen");
    m.crash("gpu-a", "fast", agentpb::CrashClass::PythonException);
    let text = m.render_prometheus();
    assert!(text.contains("fleetbench_level_crashed{"));
    assert!(
        text.lines()
            .any(|l| l.starts_with("fleetbench_level_crashed{") && l.ends_with(" 1")),
        "{text}"
    );
    assert!(
        text.contains("fleetbench_levels_total{")
            && text.contains("fleetbench_outcome=\"crashed\"")
    );
    assert!(text.contains(
        "fleetbench_engine_crashes_total{fleetbench_config_name=\"fast\",fleetbench_crash_class=\"python_exception\",fleetbench_host=\"gpu-a\"} 1\n"
    ));
    // No TTFT data for this level: no TTFT gauge rather than a misleading zero.
    assert!(!text.contains("fleetbench_level_time_to_first_token_seconds"));
}

#[test]
fn gpu_samples_use_hardware_names_and_energy_accumulates() {
    let m = Metrics::new();
    let sample = |energy_mj: u64| agentpb::MetricsSample {
        unix_ms: 1,
        gpus: vec![GpuSample {
            index: 0,
            uuid: "GPU-abc".into(),
            utilization_pct: Some(87.0),
            memory_used_bytes: Some(70 << 30),
            memory_total_bytes: Some(141 << 30),
            power_w: Some(612.0),
            energy_mj: Some(energy_mj),
            temperature_c: Some(61),
            pcie_rx_bytes_per_s: Some(1.5e9),
            ..Default::default()
        }],
        engine: Some(agentpb::EngineMetrics {
            scraped: true,
            running_requests: Some(60.0),
            queued_requests: Some(4.0),
            kv_cache_usage: Some(0.42),
            ..Default::default()
        }),
        process: None,
        config_id: String::new(),
        hostname: "node-a".into(),
    };
    m.telemetry("gpu-a", "cfg-1", &sample(5_000_000));
    m.telemetry("gpu-a", "cfg-1", &sample(5_600_000));
    let text = m.render_prometheus();
    // dcgm-exporter's labels (Hostname, UUID, gpu) beside the semantic conventions' ones.
    let gpu = "Hostname=\"node-a\",UUID=\"GPU-abc\",fleetbench_gpu_index=\"0\",\
               fleetbench_host=\"gpu-a\",gpu=\"0\",hw_id=\"GPU-abc\",hw_type=\"gpu\"";
    assert_eq!(
        line_value(&text, &format!("hw_gpu_utilization_ratio{{{gpu}}} ")),
        0.87
    );
    assert_eq!(
        line_value(&text, &format!("hw_power_watts{{{gpu}}} ")),
        612.0
    );
    assert_eq!(
        line_value(&text, &format!("hw_temperature_celsius{{{gpu}}} ")),
        61.0
    );
    assert_eq!(
        line_value(&text, &format!("hw_gpu_memory_usage_bytes{{{gpu}}} ")),
        (70u64 << 30) as f64
    );
    // Cumulative like NVML's counter: 5,600 J after two samples, not 10,600.
    assert_eq!(
        line_value(&text, &format!("hw_energy_joules_total{{{gpu}}} ")),
        5600.0
    );
    assert_eq!(
        line_value(
            &text,
            &format!(
                "fleetbench_gpu_pcie_throughput_bytes_per_second{{{gpu},network_io_direction=\"receive\"}} "
            )
        ),
        1.5e9
    );
    let eng = "fleetbench_config_id=\"cfg-1\",fleetbench_host=\"gpu-a\"";
    assert_eq!(
        line_value(
            &text,
            &format!("fleetbench_engine_kv_cache_usage_ratio{{{eng}}} ")
        ),
        0.42
    );
    assert_eq!(
        line_value(
            &text,
            &format!("fleetbench_engine_queued_requests{{{eng}}} ")
        ),
        4.0
    );
}

#[test]
fn host_config_series_follows_the_running_config() {
    let m = Metrics::new();
    let empty = agentpb::MetricsSample::default();
    m.telemetry("gpu-a", "cfg-1", &empty);
    m.telemetry("gpu-b", "cfg-1", &empty);
    m.telemetry("gpu-a", "cfg-2", &empty);
    let text = m.render_prometheus();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("fleetbench_host_config{"))
        .collect();
    assert_eq!(
        series,
        vec![
            "fleetbench_host_config{fleetbench_config_id=\"cfg-1\",fleetbench_host=\"gpu-b\"} 1",
            "fleetbench_host_config{fleetbench_config_id=\"cfg-2\",fleetbench_host=\"gpu-a\"} 1",
        ]
    );
    m.telemetry("gpu-a", "", &empty);
    m.telemetry("gpu-b", "", &empty);
    assert!(!m.render_prometheus().contains("fleetbench_host_config{"));
}

#[test]
fn jobs_trials_and_regressions_are_counted() {
    let m = Metrics::new();
    m.job_submitted("sweep");
    m.job_finished("sweep", "succeeded");
    m.trial_finished("gpu-a", "base", controllerpb::TrialState::EngineFailed);
    m.regression_verdict("nightly", "output_tokens_per_s", "c64", true);
    m.regression_values("nightly", "output_tokens_per_s", "c64", 689.0, 757.0);
    let text = m.render_prometheus();
    assert!(text.contains("fleetbench_jobs_submitted_total{fleetbench_job_kind=\"sweep\"} 1\n"));
    assert!(text.contains(
        "fleetbench_jobs_finished_total{fleetbench_job_kind=\"sweep\",fleetbench_job_state=\"succeeded\"} 1\n"
    ));
    assert!(text.contains(
        "fleetbench_trials_total{fleetbench_config_name=\"base\",fleetbench_host=\"gpu-a\",fleetbench_trial_state=\"engine_failed\"} 1\n"
    ));
    let reg = "fleetbench_level_label=\"c64\",fleetbench_metric=\"output_tokens_per_s\",fleetbench_suite=\"nightly\"";
    assert!(text.contains(&format!(
        "fleetbench_regression_verdicts_total{{{reg},fleetbench_verdict=\"regressed\"}} 1\n"
    )));
    assert!(text.contains(&format!("fleetbench_regression_regressed{{{reg}}} 1\n")));
    assert!(text.contains(&format!("fleetbench_regression_baseline{{{reg}}} 757\n")));
}

#[test]
fn reconstruction_keeps_count_and_order() {
    let d = dist(1000, 10.0, 20.0, 80.0, 100.0);
    let v = reconstruct_seconds(&d);
    assert_eq!(v.len(), 1000);
    assert!(v.windows(2).all(|w| w[0] <= w[1]));
    assert!(v[0] >= 0.010 && *v.last().unwrap() <= 0.100);
    let below_median = v.iter().filter(|x| **x <= 0.020).count();
    assert_eq!(below_median, 500);
    assert!(reconstruct_seconds(&Distribution::default()).is_empty());
    assert!((parse_quantile("p99.9").unwrap() - 0.999).abs() < 1e-12);
    assert_eq!(parse_quantile("mean"), None);
}

#[tokio::test]
async fn serves_the_exposition_over_http() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let m = Metrics::new();
    m.job_submitted("sweep");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(m.clone(), listener));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{resp}"
    );
    assert!(resp.contains("fleetbench_jobs_submitted_total{fleetbench_job_kind=\"sweep\"} 1"));
    server.abort();
}

#[test]
fn client_histograms_name_the_operation() {
    let m = Metrics::new();
    let level = stored("base", 8, agentpb::LevelOutcome::Ok);
    m.level_stored_as(&level, "vllm", "qwen", agentpb::ApiKind::Chat);
    let text = m.render_prometheus();
    assert!(
        text.lines().any(
            |l| l.starts_with("gen_ai_client_operation_duration_seconds_count{")
                && l.contains("gen_ai_operation_name=\"chat\"")
                && l.contains("gen_ai_provider_name=\"vllm\"")
        ),
        "{text}"
    );
}

#[test]
fn a_finished_jobs_series_go_after_the_grace_period_and_no_other() {
    let m = Metrics::default();
    let mut a = stored("steady", 4, agentpb::LevelOutcome::Ok);
    a.job_id = "job-a".into();
    let mut b = stored("steady", 4, agentpb::LevelOutcome::Ok);
    b.job_id = "job-b".into();
    m.level_stored(&a, "sim", "m");
    m.level_stored(&b, "sim", "m");
    m.crash("gpu-a", "steady", agentpb::CrashClass::Oom);

    // Within the grace period the ended job is still served.
    m.set_job_series_ttl(std::time::Duration::from_secs(3600));
    m.job_series_expire("job-a");
    assert!(
        m.render_prometheus()
            .contains("fleetbench_job_id=\"job-a\"")
    );

    m.set_job_series_ttl(std::time::Duration::ZERO);
    m.job_series_expire("job-a");
    let text = m.render_prometheus();
    assert!(!text.contains("job-a"), "{text}");
    for family in [
        "fleetbench_level_output_tokens_per_second{",
        "fleetbench_levels_total{",
        "fleetbench_requests_total{",
        "gen_ai_client_operation_duration_seconds_bucket{",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(family) && l.contains("job-b")),
            "{family} of the running job is kept"
        );
    }
    // Series without a job are not per-job: the crash counter stays.
    assert!(text.contains("fleetbench_engine_crashes_total{"));
}

#[test]
fn a_lost_hosts_gpu_and_engine_series_go_and_the_others_stay() {
    let m = Metrics::default();
    let sample = |util: f64| agentpb::MetricsSample {
        gpus: vec![GpuSample {
            index: 0,
            uuid: "GPU-1".into(),
            utilization_pct: Some(util),
            energy_mj: Some(1000),
            ..Default::default()
        }],
        engine: Some(agentpb::EngineMetrics {
            scraped: true,
            running_requests: Some(3.0),
            ..Default::default()
        }),
        ..Default::default()
    };
    m.telemetry("h1", "cfg", &sample(50.0));
    m.telemetry("h2", "cfg", &sample(70.0));
    m.host_series_remove("h1");
    let text = m.render_prometheus();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(!l.contains("fleetbench_host=\"h1\""), "{l}");
    }
    for family in [
        "hw_gpu_utilization_ratio{",
        "hw_energy_joules_total{",
        "fleetbench_engine_running_requests{",
        "fleetbench_host_config{",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(family) && l.contains("fleetbench_host=\"h2\"")),
            "{family} of h2 kept:\n{text}"
        );
    }
    // It comes back with its next sample; the energy counter restarts from that reading.
    m.telemetry("h1", "cfg", &sample(60.0));
    assert_eq!(
        line_value(
            &m.render_prometheus(),
            "hw_gpu_utilization_ratio{UUID=\"GPU-1\",fleetbench_gpu_index=\"0\",fleetbench_host=\"h1\",gpu=\"0\",hw_id=\"GPU-1\",hw_type=\"gpu\"} "
        ),
        0.6
    );
}

#[test]
fn gpu_memory_utilization_is_the_fraction_used_and_the_controller_has_its_own_name() {
    let m = Metrics::new();
    let sample = |xids: u64, throttle: u64| agentpb::MetricsSample {
        gpus: vec![GpuSample {
            index: 1,
            uuid: "GPU-h200".into(),
            memory_utilization_pct: Some(61.0),
            memory_used_bytes: Some(132_509 << 20),
            memory_total_bytes: Some(143_771 << 20),
            sm_clock_mhz: Some(1980),
            memory_clock_mhz: Some(3201),
            clocks_throttle_reasons: Some(throttle),
            xid_errors: Some(xids),
            last_xid: (xids > 0).then_some(79),
            ..Default::default()
        }],
        hostname: "gpu-node-7".into(),
        ..Default::default()
    };
    m.telemetry("h200", "", &sample(0, 0x4 | 0x8));
    m.telemetry("h200", "", &sample(2, 0x1));
    let text = m.render_prometheus();
    let head = "Hostname=\"gpu-node-7\",UUID=\"GPU-h200\",fleetbench_gpu_index=\"1\"";
    let tail = "fleetbench_host=\"h200\",gpu=\"1\",hw_id=\"GPU-h200\",hw_type=\"gpu\"";
    let v = |name: &str| line_value(&text, &format!("{name}{{{head},{tail}}} "));
    assert_eq!(
        v("hw_gpu_memory_utilization_ratio"),
        132_509.0 / 143_771.0,
        "the conventions' fraction of memory in use"
    );
    assert_eq!(
        v("fleetbench_gpu_memory_controller_utilization_ratio"),
        0.61
    );
    assert_eq!(v("fleetbench_gpu_clock_sm_hertz"), 1.98e9);
    assert_eq!(v("fleetbench_gpu_clock_memory_hertz"), 3.201e9);
    assert_eq!(v("fleetbench_gpu_clocks_throttle_reasons"), 1.0);
    assert_eq!(v("fleetbench_gpu_xid_errors_total"), 2.0);
    assert_eq!(v("fleetbench_gpu_last_xid"), 79.0);
    let reason = |r: &str| {
        line_value(
            &text,
            &format!(
                "fleetbench_gpu_throttled{{{head},fleetbench_gpu_throttle_reason=\"{r}\",{tail}}} "
            ),
        )
    };
    // The last sample: idle only; the power cap and HW slowdown of the first are over.
    assert_eq!(reason("gpu_idle"), 1.0);
    assert_eq!(reason("sw_power_cap"), 0.0);
    assert_eq!(reason("hw_slowdown"), 0.0);
}
