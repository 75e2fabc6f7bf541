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
#[path = "dashboards_common/mod.rs"]
mod dashboards_common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetbench_controller::metrics::Metrics;
use fleetbench_controller::{ControllerConfig, HostConfig};
use fleetbench_proto::agentpb::{GpuSample, MetricsSample};
use fleetbench_proto::controllerpb::{GetResultsRequest, JobState, SubmitJobRequest};
use serde_json::Value;

const SPEC: &str = r#"name = "prometheus-quickstart"
repeats = 1

[hosts]
names = ["h1"]

[[configs]]
name = "steady"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 20, "--itl-ms" = 4 }

[[configs]]
name = "fragile"
extends = "steady"
flags = { "--crash-above-batch" = 2, "--itl-ms" = 5 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2, 4]
requests = 8
"#;

struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(dir: &Path, target: SocketAddr) -> Prometheus {
    let bin = Path::new("/usr/bin/prometheus");
    assert!(
        bin.exists(),
        "/usr/bin/prometheus missing: install the Debian package `prometheus` (scripts/test.sh does)"
    );
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: fleetbench-controller\n    scrape_interval: 1s\n    \
             static_configs:\n      - targets: [\"{target}\"]\n"
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", fleetbench_testkit::free_port())
        .parse()
        .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let p = Prometheus { child, addr };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = http_get(addr, "/-/ready") {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// HTTP/1.0 GET (the server closes the connection and sends no chunked encoding).
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs a query; returns the `data.result` array.
fn query(prom: SocketAddr, expr: &str, range: Option<(f64, f64)>) -> Vec<Value> {
    let path = match range {
        Some((start, end)) => format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step=1",
            encode(expr)
        ),
        None => format!("/api/v1/query?query={}", encode(expr)),
    };
    let (status, body) = http_get(prom, &path).expect("query prometheus");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(status, 200, "{expr}: {body}");
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn has_finite_value(result: &[Value]) -> bool {
    let finite = |p: &Value| {
        p[1].as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    };
    result.iter().any(|series| {
        series["value"]
            .as_array()
            .is_some_and(|_| finite(&series["value"]))
            || series["values"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(finite))
    })
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

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
        let q = v["query"]["query"].as_str().unwrap();
        let (selector, label) =
            dashboards_common::parse_label_values(q).expect("label_values query");
        let as_ref: HashMap<&str, String> =
            vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let selector = dashboards_common::substitute(&selector, &as_ref);
        let mut values: Vec<String> = query(prom, &selector, None)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let agent = common::spawn_agent(dir.path(), "h1", fleetbench_testkit::free_port());
    let mut config = ControllerConfig::local(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ));
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    config.hosts = vec![HostConfig {
        name: "h1".into(),
        address: agent.addr.to_string(),
        labels: Default::default(),
    }];
    let metrics = Metrics::new();
    let handle = fleetbench_controller::start(config, metrics.clone())
        .await
        .expect("controller");
    let metrics_addr = handle.metrics_addr.expect("metrics served");
    let prom = start_prometheus(dir.path(), metrics_addr);
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

    // During the job: Prometheus sees the engine the agent runs, from the relayed telemetry.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = query(
            prom.addr,
            "fleetbench_host_config{fleetbench_host=\"h1\"} == 1",
            None,
        );
        if !r.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no host config series scraped during the job"
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
    assert!(checked >= 30, "only {checked} queries");
    assert!(
        failures.is_empty(),
        "{} of {checked} queries returned no data:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Only the NVLink panel may lack data, and only because the recorded H200 has no NVLink.
    assert!(exempt.len() <= 1, "{exempt:?}");
    for e in &exempt {
        eprintln!("no data, as the recording has none of {absent:?}: {e}");
    }

    // The values are the job's, not just present: the winner table names a config that won.
    let vars = resolve_variables(
        prom.addr,
        &dashboards
            .iter()
            .find(|(n, _)| n == "config-comparison.json")
            .unwrap()
            .1,
    );
    assert!(vars["job"].contains(&resp.job_id));
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
