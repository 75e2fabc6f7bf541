//! A real Prometheus (the distribution's package, `/usr/bin/prometheus`) scrapes the
//! controller's `/metrics` every second during and after a quickstart-sized job (controller in
//! this process, agent and simulated engine as processes). Then EVERY PromQL query of EVERY
//! dashboard panel runs through Prometheus' HTTP API, with the template variables resolved the
//! way Grafana resolves them (their `label_values` queries against the same Prometheus), and
//! must return data with at least one finite value.
//!
//! Two inputs that this machine cannot produce go through the same `Metrics` calls their real
//! producers use, and are labelled as what they are:
//! - GPU telemetry: there is no GPU here, so samples recorded with `fleetbench-gpu-check` on an
//!   H200 host (`prometheus_fixtures/h200_gpu_samples.jsonl`, NVML values as read) are replayed
//!   through `Metrics::telemetry`, the call the agent relay makes, for a host named
//!   `h200-recorded`.
//! - Regression verdicts: `fleetbench regress` is not built yet, so the test compares the job's
//!   own two configs level by level (the fragile config against the steady one as baseline)
//!   and records the outcome through `Metrics::regression_values`/`regression_verdict`, the
//!   calls a regression runner makes.

mod common;
mod dashboards_common;
mod prometheus_server;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetbench_controller::metrics::Metrics;
use fleetbench_proto::agentpb::{GpuSample, MetricsSample};
use fleetbench_proto::controllerpb::{GetResultsRequest, JobState, SubmitJobRequest};
use serde_json::Value;

use prometheus_server::*;

const SPEC: &str = r#"name = "prometheus-quickstart"
repeats = 1

[hosts]
names = ["h1"]

[[configs]]
name = "steady"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 20, "--itl-ms" = 20 }

[[configs]]
name = "fragile"
extends = "steady"
flags = { "--crash-above-batch" = 2, "--itl-ms" = 25 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

# Levels of a few seconds: a host's engine and config series live only while its trial's
# telemetry runs, and Prometheus scrapes once a second.
[load]
concurrency = [1, 2, 4]
requests = 8
"#;

/// GPU samples recorded on an H200 host, one JSON object per line (fleetbench-gpu-check's
/// sample output: the fields of `GpuSample`).
fn recorded_gpu_samples() -> Vec<Vec<GpuSample>> {
    let path = fleetbench_testkit::repo_root()
        .join("controller/tests/prometheus_fixtures/h200_gpu_samples.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rounds: BTreeMap<u64, Vec<GpuSample>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let f = |k: &str| v[k].as_f64();
        let u = |k: &str| v[k].as_u64();
        let sample = GpuSample {
            index: u("index").unwrap() as u32,
            uuid: v["uuid"].as_str().unwrap_or_default().to_string(),
            utilization_pct: f("utilization_pct"),
            memory_utilization_pct: f("memory_utilization_pct"),
            memory_used_bytes: u("memory_used_bytes"),
            memory_total_bytes: u("memory_total_bytes"),
            power_w: f("power_w"),
            energy_mj: u("energy_mj"),
            sm_clock_mhz: u("sm_clock_mhz").map(|x| x as u32),
            memory_clock_mhz: u("memory_clock_mhz").map(|x| x as u32),
            temperature_c: u("temperature_c").map(|x| x as u32),
            pcie_tx_bytes_per_s: f("pcie_tx_bytes_per_s"),
            pcie_rx_bytes_per_s: f("pcie_rx_bytes_per_s"),
            nvlink_tx_bytes_per_s: f("nvlink_tx_bytes_per_s"),
            nvlink_rx_bytes_per_s: f("nvlink_rx_bytes_per_s"),
            clocks_throttle_reasons: u("clocks_throttle_reasons"),
            xid_errors: u("xid_errors"),
            last_xid: u("last_xid"),
        };
        rounds
            .entry(u("round").unwrap_or(0))
            .or_default()
            .push(sample);
    }
    rounds.into_values().collect()
}

/// Replays the recorded rounds once, one per second, as they were recorded.
fn replay_gpus(
    metrics: Arc<Metrics>,
    rounds: Vec<Vec<GpuSample>>,
) -> tokio::task::JoinHandle<usize> {
    assert!(rounds.len() >= 3, "at least three recorded rounds");
    tokio::spawn(async move {
        let mut n = 0;
        for gpus in rounds {
            let sample = MetricsSample {
                unix_ms: fleetbench_proto::now_unix_ms(),
                gpus,
                ..Default::default()
            };
            metrics.telemetry("h200-recorded", "recorded", &sample);
            n += 1;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        n
    })
}

/// Prometheus names of GPU metrics the recording has no value for (a host without NVLink has
/// no NVLink counters): a panel showing only those cannot have data from it.
fn absent_from_recording(rounds: &[Vec<GpuSample>]) -> Vec<&'static str> {
    let all = || rounds.iter().flatten();
    let mut out = Vec::new();
    if all().all(|g| g.nvlink_tx_bytes_per_s.is_none() && g.nvlink_rx_bytes_per_s.is_none()) {
        out.push("fleetbench_gpu_nvlink_throughput_bytes_per_second");
    }
    if all().all(|g| g.pcie_tx_bytes_per_s.is_none() && g.pcie_rx_bytes_per_s.is_none()) {
        out.push("fleetbench_gpu_pcie_throughput_bytes_per_second");
    }
    // Recorded before fleetbench read throttle reasons and XID events.
    if all().all(|g| g.clocks_throttle_reasons.is_none()) {
        out.push("fleetbench_gpu_throttled");
    }
    if all().all(|g| g.xid_errors.is_none() && g.last_xid.is_none()) {
        out.push("fleetbench_gpu_xid_errors_total");
        out.push("fleetbench_gpu_last_xid");
    }
    out
}

/// Resolves a dashboard's variables in order, as Grafana does: datasource variables need no
/// value here; query variables take every value their `label_values` query finds (multi/all:
/// an alternation; single: the first).
fn resolve_variables(prom: SocketAddr, dashboard: &Value) -> HashMap<String, String> {
    let mut vars: HashMap<String, String> = HashMap::new();
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = v["name"].as_str().unwrap().to_string();
        if v["type"] != "query" {
            continue;
        }
        if v["datasource"]["type"] != "prometheus" {
            // A variable read from the store (postgres_dashboards.rs runs those queries against
            // PostgreSQL): any value, as Grafana's "All" becomes a regex for PromQL.
            vars.insert(name, ".+".into());
            continue;
        }
        let q = v["query"]["query"].as_str().unwrap();
        let (selector, label) =
            dashboards_common::parse_label_values(q).expect("label_values query");
        let as_ref: HashMap<&str, String> =
            vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let selector = dashboards_common::substitute(&selector, &as_ref);
        // Grafana asks for the series of the dashboard's time range, not only those live now
        // (a finished trial's engine series are gone from /metrics but not from the range).
        let mut values: Vec<String> = query(prom, &format!("last_over_time({selector}[1h])"), None)
            .iter()
            .filter_map(|s| s["metric"][label.as_str()].as_str().map(str::to_string))
            .collect();
        values.sort();
        values.dedup();
        assert!(!values.is_empty(), "variable {name}: {q} finds no value");
        let multi =
            v["multi"].as_bool().unwrap_or(false) || v["includeAll"].as_bool().unwrap_or(false);
        let value = if multi {
            values.join("|")
        } else {
            values[0].clone()
        };
        vars.insert(name, value);
    }
    vars
}

/// Starts a controller in this process with `config` and `/metrics` on a free loopback port,
/// and a real Prometheus scraping it every second; returns once the first scrape is in (a
/// loaded machine may take seconds to it).
async fn scraped_controller(
    dir: &std::path::Path,
    mut config: fleetbench_controller::ControllerConfig,
) -> (
    fleetbench_controller::ControllerHandle,
    Arc<Metrics>,
    Prometheus,
) {
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let metrics = Metrics::new();
    let handle = fleetbench_controller::start(config, metrics.clone())
        .await
        .expect("controller");
    let prom = start_prometheus(dir, handle.metrics_addr.expect("metrics served"));
    wait_query(
        prom.addr,
        "up{job=\"fleetbench-controller\"} == 1",
        Duration::from_secs(60),
        "the controller scraped",
        |r| !r.is_empty(),
    )
    .await;
    (handle, metrics, prom)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let agent = common::spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let config = common::sqlite_config(dir.path(), &[&agent]);
    let (handle, metrics, prom) = scraped_controller(dir.path(), config).await;
    let start = now_s();

    let rounds = recorded_gpu_samples();
    let absent = absent_from_recording(&rounds);
    let replay = replay_gpus(metrics.clone(), rounds);
    let mut client = common::client(handle.addr).await;
    let resp = client
        .submit_job(SubmitJobRequest {
            spec_toml: SPEC.into(),
            file_name: "prometheus-quickstart.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.errors.is_empty(), "{:?}", resp.errors);

    // During the job: Prometheus sees the config the agent runs, from the relayed telemetry.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = query(
            prom.addr,
            // Over the last minutes: the series lives only while the trial's telemetry runs.
            "max_over_time(fleetbench_host_config{fleetbench_host=\"h1\"}[10m]) == 1",
            None,
        );
        if !r.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no host config series scraped during the job; scrape target: {}\n/metrics:\n{}",
            http_get(prom.addr, "/api/v1/targets")
                .map(|r| r.1)
                .unwrap_or_default(),
            metrics.render_prometheus()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let job = common::wait_job(&mut client, &resp.job_id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    // The regression stand-in: fragile against steady, per level, output tokens/s.
    let results = client
        .get_results(GetResultsRequest {
            job_ids: vec![resp.job_id.clone()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut tps: BTreeMap<(String, u32), f64> = BTreeMap::new();
    for l in &results.levels {
        let r = l.result.as_ref().unwrap();
        let c = r.level.as_ref().and_then(|x| x.concurrency).unwrap_or(0);
        tps.insert((l.config_name.clone(), c), r.output_tokens_per_s);
    }
    let mut verdicts = 0;
    for c in [1u32, 2, 4] {
        let (Some(base), Some(cur)) = (
            tps.get(&("steady".into(), c)),
            tps.get(&("fragile".into(), c)),
        ) else {
            continue;
        };
        let level = format!("c{c}");
        metrics.regression_values("quickstart", "output_tokens_per_s", &level, *cur, *base);
        metrics.regression_verdict(
            "quickstart",
            "output_tokens_per_s",
            &level,
            *cur < base * 0.95,
        );
        // A change point as the trend analysis exports it (the annotation query reads it).
        metrics.regression_change_point(
            "quickstart",
            "output_tokens_per_s",
            &level,
            &resp.job_id,
            *cur / *base - 1.0,
            fleetbench_proto::now_unix_ms(),
        );
        verdicts += 1;
    }
    assert_eq!(verdicts, 3, "both configs stored every level: {tps:?}");

    // After the job and the replay: a few more scrapes, so that everything recorded last is in
    // Prometheus.
    let replayed = replay.await.unwrap();
    assert!(replayed >= 3, "GPU rounds replayed: {replayed}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let end = now_s();

    let dashboards = dashboards_common::load_all();
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut exempt = Vec::new();
    for (name, d) in &dashboards {
        let vars = resolve_variables(prom.addr, d);
        let as_ref: HashMap<&str, String> =
            vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        for q in dashboards_common::promql_queries(std::slice::from_ref(&(name.clone(), d.clone())))
        {
            let expr = dashboards_common::substitute(&q.text, &as_ref);
            let result = query(
                prom.addr,
                &expr,
                if q.instant { None } else { Some((start, end)) },
            );
            checked += 1;
            if !has_finite_value(&result) {
                let ast = promql_parser::parser::parse(&expr).unwrap();
                let used = dashboards_common::used_names(&ast);
                if used.metrics.iter().all(|m| absent.contains(&m.as_str())) {
                    exempt.push(format!("{name} / {}", q.panel));
                } else {
                    failures.push(format!(
                        "{name} / {} [{}]: no data\n    {expr}",
                        q.panel, q.ref_id
                    ));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} queries");
    assert!(
        failures.is_empty(),
        "{} of {checked} queries returned no data:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Only the NVLink, throttle-reason and XID panels may lack data, and only because the
    // recording has none of them.
    assert!(exempt.len() <= 4, "{exempt:?}");
    for e in &exempt {
        eprintln!("no data, as the recording has none of {absent:?}: {e}");
    }

    // The values are the job's, not just present.
    let crashed = query(
        prom.addr,
        &format!(
            "max(fleetbench_level_crashed{{fleetbench_job_id=\"{}\",fleetbench_config_name=\"fragile\"}})",
            resp.job_id
        ),
        None,
    );
    assert_eq!(
        crashed[0]["value"][1], "1",
        "the fragile config's crash is marked"
    );

    handle.shutdown().await;
    drop(agent);
}

/// Prometheus keeps live series only: a real Prometheus scraping the controller sees a job's
/// per-job series while it runs and none once its grace period (`metrics_job_ttl`, 8 s here)
/// is over; the engine series of a host go when its trial's telemetry stops; a host's GPU
/// series go when the host is lost (its agent killed), while another host's stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_and_lost_hosts_leave_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let a1 = common::spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let mut a2 = common::spawn_agent(dir.path(), "h2", fleetbench_testkit::free_port());
    let mut config = common::sqlite_config(dir.path(), &[&a1, &a2]);
    config.metrics_job_ttl = Duration::from_secs(8);
    config.heartbeat_interval = Duration::from_millis(500);
    // The job is shorter than a loaded machine's wait for the first scrape: it starts after it.
    let (handle, metrics, prom) = scraped_controller(dir.path(), config).await;
    let mut client = common::client(handle.addr).await;
    let resp = client
        .submit_job(SubmitJobRequest {
            spec_toml: common::sim_spec("expiry", 1, &["h1", "h2"]),
            file_name: "expiry.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.errors.is_empty(), "{:?}", resp.errors);
    let job = resp.job_id;
    let per_job =
        format!("fleetbench_level_output_tokens_per_second{{fleetbench_job_id=\"{job}\"}}");
    let engine = "fleetbench_engine_running_requests";

    // While it runs: its level series and the engines' series are scraped.
    wait_query(
        prom.addr,
        &per_job,
        Duration::from_secs(120),
        "level series during the job",
        |r| !r.is_empty(),
    )
    .await;
    // Over the last minutes: a short trial's engine series may come and go between polls.
    wait_query(
        prom.addr,
        &format!("max_over_time({engine}[10m])"),
        Duration::from_secs(60),
        "engine series during the job",
        |r| !r.is_empty(),
    )
    .await;
    let done = common::wait_job(&mut client, &job, Duration::from_secs(180)).await;
    assert_eq!(done.state, JobState::Succeeded as i32, "{done:?}");
    let ended = Instant::now();

    // The job's series stay for the grace period, then go; the counters of every job stay.
    let all_job_series = format!("{{fleetbench_job_id=\"{job}\"}}");
    assert!(
        !query(prom.addr, &all_job_series, None).is_empty(),
        "the job's series are still served right after it ended"
    );
    // The engines stopped with their trials: their series are gone at once (Prometheus marks a
    // series stale in the first scrape without it).
    wait_query(
        prom.addr,
        engine,
        Duration::from_secs(10),
        "engine series after the job",
        |r| r.is_empty(),
    )
    .await;
    wait_query(
        prom.addr,
        &all_job_series,
        Duration::from_secs(20),
        "per-job series after the grace period",
        |r| r.is_empty(),
    )
    .await;
    assert!(
        ended.elapsed() >= Duration::from_secs(7),
        "went before the grace period"
    );
    assert!(!query(prom.addr, "fleetbench_jobs_finished_total", None).is_empty());
    let exposition = metrics.render_prometheus();
    assert!(
        !exposition.contains(&job),
        "the registry itself holds none of the job's series"
    );
    // Nothing is lost: the store still holds every level.
    let results = client
        .get_results(GetResultsRequest {
            job_ids: vec![job.clone()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(results.levels.len(), 2 * 4, "2 configs x 4 levels stored");

    // GPU telemetry of both hosts (recorded H200 samples, relayed through the call the agent
    // relay makes; there is no GPU here), then h2's agent dies.
    let round = recorded_gpu_samples().remove(0);
    let gpu_sample = MetricsSample {
        unix_ms: fleetbench_proto::now_unix_ms(),
        gpus: round,
        ..Default::default()
    };
    metrics.telemetry("h1", "", &gpu_sample);
    metrics.telemetry("h2", "", &gpu_sample);
    wait_query(
        prom.addr,
        "hw_gpu_utilization_ratio{fleetbench_host=\"h2\"}",
        Duration::from_secs(10),
        "h2's GPU series",
        |r| !r.is_empty(),
    )
    .await;
    a2.kill();
    wait_query(
        prom.addr,
        "hw_gpu_utilization_ratio{fleetbench_host=\"h2\"}",
        Duration::from_secs(20),
        "a lost host's GPU series",
        |r| r.is_empty(),
    )
    .await;
    wait_query(
        prom.addr,
        "{fleetbench_host=\"h2\", __name__=~\"hw_.*\"}",
        Duration::from_secs(5),
        "every hw series of the lost host",
        |r| r.is_empty(),
    )
    .await;
    assert!(
        !query(
            prom.addr,
            "hw_gpu_utilization_ratio{fleetbench_host=\"h1\"}",
            None
        )
        .is_empty(),
        "the reachable host's GPU series stay"
    );

    handle.shutdown().await;
    drop(a1);
}
