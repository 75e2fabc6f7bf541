//! A quickstart-sized job exported over OTLP/gRPC to a real receiver (a tonic server built from
//! `opentelemetry-proto`) on loopback: the controller runs in this process (library API), the
//! agent is its own process with the simulated engine. The job's trace must hold the span tree
//! job → trial → engine.apply, bench.level with their attributes, the agent's spans in the same
//! trace (trace context across gRPC), and the metrics documented in docs/observability.md.

mod common;
mod dashboards_common;
mod otlp_receiver;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use fleetbench_controller::metrics::Metrics;
use fleetbench_controller::metrics::names;
use fleetbench_proto::controllerpb::{JobState, SubmitJobRequest};
use fleetbench_support::telemetry;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric;

#[derive(Debug, Clone, PartialEq)]
enum Val {
    S(String),
    F(f64),
    I(i64),
    B(bool),
    Other,
}

fn val(v: &Option<AnyValue>) -> Val {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Val::S(s.clone()),
        Some(any_value::Value::DoubleValue(f)) => Val::F(*f),
        Some(any_value::Value::IntValue(i)) => Val::I(*i),
        Some(any_value::Value::BoolValue(b)) => Val::B(*b),
        _ => Val::Other,
    }
}

fn attrs(kvs: &[KeyValue]) -> HashMap<String, Val> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), val(&kv.value)))
        .collect()
}

#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    attrs: HashMap<String, Val>,
    events: Vec<String>,
    status_code: i32,
}

impl Span {
    fn s(&self, k: &str) -> String {
        match self.attrs.get(k) {
            Some(Val::S(s)) => s.clone(),
            other => panic!(
                "{} span: attribute {k} is {other:?}; all: {:?}",
                self.name, self.attrs
            ),
        }
    }
    fn num(&self, k: &str) -> f64 {
        match self.attrs.get(k) {
            Some(Val::F(f)) => *f,
            Some(Val::I(i)) => *i as f64,
            other => panic!(
                "{} span: attribute {k} is {other:?}; all: {:?}",
                self.name, self.attrs
            ),
        }
    }
}

fn flatten(reqs: &[ExportTraceServiceRequest]) -> Vec<Span> {
    let mut out = Vec::new();
    for req in reqs {
        for rs in &req.resource_spans {
            let res = attrs(
                rs.resource
                    .as_ref()
                    .map(|r| r.attributes.as_slice())
                    .unwrap_or(&[]),
            );
            let service = match res.get("service.name") {
                Some(Val::S(s)) => s.clone(),
                _ => String::new(),
            };
            for ss in &rs.scope_spans {
                for sp in &ss.spans {
                    out.push(Span {
                        service: service.clone(),
                        name: sp.name.clone(),
                        trace: sp.trace_id.clone(),
                        id: sp.span_id.clone(),
                        parent: sp.parent_span_id.clone(),
                        attrs: attrs(&sp.attributes),
                        events: sp.events.iter().map(|e| e.name.clone()).collect(),
                        status_code: sp.status.as_ref().map_or(0, |s| s.code),
                    });
                }
            }
        }
    }
    out
}

/// A loopback agent with the simulated engine, exporting its spans to `otlp`.
fn spawn_agent(dir: &Path, name: &str, otlp: &str) -> common::Proc {
    fleetbench_testkit::process::sim_agent(dir, name)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        .env("OTEL_SERVICE_NAME", "fleetbench-agent")
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env_remove("OTEL_SDK_DISABLED")
        .spawn()
}

pub const SPEC: &str = r#"name = "otel-quickstart"
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
flags = { "--crash-above-batch" = 2 }

[[configs]]
name = "no-memory"
extends = "steady"
flags = { "--fault" = "oom-at-start" }

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2, 4]
requests = 8
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_exports_its_span_tree_agent_spans_and_metrics_over_otlp() {
    // The receiver.
    let (receiver, otlp) = otlp_receiver::Receiver::start();

    // Telemetry of this process (the controller), then the controller, then the agent.
    let guard = telemetry::init(telemetry::TelemetryConfig {
        service_name: "fleetbench-controller".into(),
        otlp_endpoint: Some(otlp.clone()),
        ..Default::default()
    })
    .expect("telemetry");
    assert!(guard.exports_traces() && guard.exports_metrics());
    let dir = tempfile::tempdir().unwrap();
    let mut agent = spawn_agent(dir.path(), "h1", &otlp);
    let config = common::sqlite_config(dir.path(), &[&agent]);
    let handle = fleetbench_controller::start(config, Metrics::new())
        .await
        .expect("controller");
    let mut client = common::client(handle.addr).await;
    let resp = client
        .submit_job(SubmitJobRequest {
            spec_toml: SPEC.into(),
            file_name: "otel-quickstart.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.errors.is_empty(), "{:?}", resp.errors);
    assert_eq!(resp.trial_count, 3);
    // A host's GPU and engine gauges leave /metrics when its trial's telemetry stops: the
    // scrape side of the name check reads what /metrics served while the job ran.
    let served_types =
        std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let scraper = {
        let (metrics, served) = (handle.metrics.clone(), served_types.clone());
        tokio::spawn(async move {
            loop {
                let text = metrics.render_prometheus();
                served.lock().unwrap().extend(
                    text.lines()
                        .filter(|l| l.starts_with("# TYPE "))
                        .map(str::to_string),
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let job = common::wait_job(&mut client, &resp.job_id, Duration::from_secs(180)).await;
    scraper.abort();
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    // A P2P probe through the controller's agent client, inside a span of this process: the
    // agent's p2p.probe span must join that trace (no GPUs here: the probe reports why).
    let probe_span = tracing::info_span!("p2p.probe", fleetbench.host = "h1");
    let agent_client = fleetbench_controller::agents::AgentConnector::new(None)
        .client(&agent.addr.to_string())
        .unwrap();
    let report = tracing::Instrument::instrument(
        async move {
            let mut c = agent_client;
            c.probe_p2p(fleetbench_proto::agentpb::ProbeP2pRequest::default())
                .await
        },
        probe_span.clone(),
    )
    .await
    .expect("ProbeP2P")
    .into_inner();
    drop(probe_span);
    assert!(report.pairs.is_empty() || report.unavailable_reason.is_empty());

    let mut exposition = handle.metrics.render_prometheus();
    for line in served_types.lock().unwrap().iter() {
        exposition.push_str(line);
        exposition.push('\n');
    }
    handle.shutdown().await;
    agent.terminate(); // the agent flushes its spans as it exits
    drop(guard); // spans, then metrics
    let spans = flatten(&receiver.traces.lock().unwrap());
    let metrics = receiver.metrics.lock().unwrap().clone();

    // --- the span tree -------------------------------------------------------------------
    let ctl: Vec<&Span> = spans
        .iter()
        .filter(|s| s.service == "fleetbench-controller")
        .collect();
    let agent_spans: Vec<&Span> = spans
        .iter()
        .filter(|s| s.service == "fleetbench-agent")
        .collect();
    let jobs: Vec<&&Span> = ctl.iter().filter(|s| s.name == "job").collect();
    assert_eq!(
        jobs.len(),
        1,
        "one job span: {:?}",
        ctl.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let job_span = jobs[0];
    assert!(job_span.parent.is_empty(), "the job span is a trace root");
    assert_eq!(job_span.s("fleetbench.job.id"), resp.job_id);
    assert_eq!(job_span.s("fleetbench.job.name"), "otel-quickstart");
    let trace = &job_span.trace;
    let in_trace: Vec<&Span> = spans.iter().filter(|s| &s.trace == trace).collect();
    let by_id: HashMap<&[u8], &Span> = in_trace.iter().map(|s| (s.id.as_slice(), *s)).collect();
    let parent_of = |s: &Span| by_id.get(s.parent.as_slice()).copied();

    let trials: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "trial")
        .collect();
    assert_eq!(trials.len(), 3, "one trial span per trial");
    let mut trial_configs = BTreeSet::new();
    for t in &trials {
        assert_eq!(parent_of(t).map(|p| p.name.as_str()), Some("job"));
        assert_eq!(t.s("fleetbench.host"), "h1");
        trial_configs.insert(t.s("fleetbench.config.name"));
        assert_eq!(t.s("fleetbench.workload"), "short");
        assert!(!t.s("fleetbench.run.id").is_empty());
        assert!(!t.s("fleetbench.config.id").is_empty());
    }
    assert_eq!(
        trial_configs,
        BTreeSet::from(["fragile".into(), "no-memory".into(), "steady".to_string()])
    );

    let applies: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "engine.apply" && s.service == "fleetbench-controller")
        .collect();
    assert!(
        applies.len() >= 3,
        "an engine.apply per trial: {}",
        applies.len()
    );
    let mut failed_starts = 0;
    for a in &applies {
        let trial = parent_of(a).expect("engine.apply has a parent");
        assert_eq!(trial.name, "trial");
        assert_eq!(a.s("fleetbench.host"), "h1");
        assert!(
            a.events.iter().any(|e| e == "engine spawned"),
            "spawn event: {:?}",
            a.events
        );
        if trial.s("fleetbench.config.name") == "no-memory" {
            // The classification on failure: status ERROR, the crash class, the event.
            failed_starts += 1;
            assert_eq!(a.status_code, 2, "a failed start ends in ERROR: {a:?}");
            assert_eq!(a.s("fleetbench.crash.class"), "oom");
            assert!(
                a.events.iter().any(|e| e == "engine failed to start"),
                "{:?}",
                a.events
            );
            assert!(!a.events.iter().any(|e| e == "engine ready"));
        } else {
            assert!(a.num("fleetbench.engine.start_s") >= 0.0);
            assert!(
                a.events.iter().any(|e| e == "engine ready"),
                "ready event: {:?}",
                a.events
            );
            assert_ne!(a.status_code, 2, "{a:?}");
        }
    }
    assert!(failed_starts >= 1, "the no-memory config fails at start");

    let levels: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "bench.level" && s.service == "fleetbench-controller")
        .collect();
    assert_eq!(levels.len(), 6, "2 configs x 3 levels");
    let mut crashed_levels = 0;
    for l in &levels {
        assert_eq!(parent_of(l).map(|p| p.name.as_str()), Some("trial"));
        assert_eq!(l.s("fleetbench.engine.kind"), "sim");
        assert_eq!(l.s("gen_ai.request.model"), "sim-model");
        assert_eq!(l.s("fleetbench.host"), "h1");
        assert_eq!(l.s("fleetbench.workload"), "short");
        assert!(!l.s("fleetbench.config.id").is_empty());
        let conc = l.num("fleetbench.concurrency");
        assert!([1.0, 2.0, 4.0].contains(&conc), "{conc}");
        let crashed = l.attrs.get("fleetbench.level.crashed") == Some(&Val::B(true));
        if crashed {
            crashed_levels += 1;
            assert_eq!(l.s("fleetbench.config.name"), "fragile");
            assert!(!l.s("fleetbench.crash.class").is_empty());
        } else {
            assert_eq!(
                l.attrs.get("fleetbench.level.crashed"),
                Some(&Val::B(false))
            );
            assert!(l.num("fleetbench.level.output_tokens_per_s") > 0.0);
            assert!(l.num("fleetbench.level.requests_per_s") > 0.0);
            for k in ["ttft", "itl", "e2e"] {
                let p50 = l.num(&format!("fleetbench.level.{k}_p50_ms"));
                let p99 = l.num(&format!("fleetbench.level.{k}_p99_ms"));
                assert!(p50 > 0.0 && p99 >= p50, "{k}: p50 {p50} p99 {p99}");
            }
            // The sim's configured TTFT is 20 ms: the measured one cannot be below it.
            assert!(l.num("fleetbench.level.ttft_p50_ms") >= 19.0);
            assert_eq!(l.num("fleetbench.level.errors"), 0.0);
        }
    }
    assert!(
        crashed_levels >= 1,
        "the fragile config crashes above batch 2"
    );

    // --- agent spans in the same trace --------------------------------------------------
    let agent_in_trace: Vec<&Span> = agent_spans
        .iter()
        .copied()
        .filter(|s| &s.trace == trace)
        .collect();
    let rpcs: Vec<&Span> = agent_in_trace
        .iter()
        .copied()
        .filter(|s| s.name.starts_with("fleetbench.agent.v1.Agent/"))
        .collect();
    let methods: BTreeSet<&str> = rpcs
        .iter()
        .map(|s| s.name.trim_start_matches("fleetbench.agent.v1.Agent/"))
        .collect();
    for m in ["ApplyEngine", "RunBenchmark", "StreamMetrics"] {
        assert!(
            methods.contains(m),
            "agent rpc.server span for {m} in the job's trace: {methods:?}"
        );
    }
    for r in &rpcs {
        let p = parent_of(r).unwrap_or_else(|| panic!("{} has no parent in the trace", r.name));
        assert_eq!(
            p.service, "fleetbench-controller",
            "{} continues a controller span",
            r.name
        );
        assert_eq!(r.s("rpc.system"), "grpc");
    }
    let agent_applies: Vec<&Span> = agent_in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "engine.apply")
        .collect();
    assert!(
        agent_applies.len() >= 2,
        "the agent's engine.apply spans join the trace"
    );
    for a in &agent_applies {
        assert!(parent_of(a).is_some_and(|p| p.name.ends_with("/ApplyEngine")));
        assert_eq!(a.s("fleetbench.engine.kind"), "sim");
    }
    let agent_levels = agent_in_trace
        .iter()
        .filter(|s| s.name == "bench.level")
        .count();
    assert_eq!(
        agent_levels, 6,
        "the agent's bench.level spans join the trace"
    );
    let probes: Vec<&&Span> = agent_spans
        .iter()
        .filter(|s| s.name == "p2p.probe")
        .collect();
    assert_eq!(probes.len(), 1);
    let ctl_probe = ctl
        .iter()
        .find(|s| s.name == "p2p.probe")
        .expect("this process's probe span");
    assert_eq!(
        probes[0].trace, ctl_probe.trace,
        "the agent's p2p.probe joins the caller's trace"
    );

    // --- every span attribute the job-timeline dashboard asks Tempo for exists -------------
    let dashboards = dashboards_common::load_all();
    for q in dashboards_common::traceql_queries(&dashboards) {
        for a in dashboards_common::traceql_span_attributes(&q.text) {
            if a.starts_with("fleetbench.crash") || a == "fleetbench.request_rate" {
                continue; // only on crashed levels / open-loop levels; checked above or not run
            }
            assert!(
                spans.iter().any(|s| s.attrs.contains_key(&a)),
                "{}/{}: no received span carries {a}",
                q.dashboard,
                q.panel
            );
        }
    }
    assert!(
        spans
            .iter()
            .any(|s| s.attrs.contains_key("fleetbench.crash.class"))
    );

    // --- metrics -------------------------------------------------------------------------
    let docs =
        std::fs::read_to_string(fleetbench_testkit::repo_root().join("docs/observability.md"))
            .unwrap();
    let mut received: HashMap<String, (String, Option<metric::Data>)> = HashMap::new();
    for req in &metrics {
        for rm in &req.resource_metrics {
            let res = attrs(
                rm.resource
                    .as_ref()
                    .map(|r| r.attributes.as_slice())
                    .unwrap_or(&[]),
            );
            assert_eq!(
                res.get("service.name"),
                Some(&Val::S("fleetbench-controller".into()))
            );
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    received.insert(m.name.clone(), (m.unit.clone(), m.data.clone()));
                }
            }
        }
    }
    let expected = [
        &names::JOBS_SUBMITTED,
        &names::JOBS_FINISHED,
        &names::TRIALS,
        &names::LEVELS,
        &names::CRASHES,
        &names::REQUESTS,
        &names::TOKENS,
        &names::LEVEL_OUTPUT_TOKENS,
        &names::LEVEL_REQUESTS,
        &names::LEVEL_TTFT,
        &names::LEVEL_ITL,
        &names::LEVEL_E2E,
        &names::LEVEL_ERRORS,
        &names::LEVEL_CRASHED,
        &names::CLIENT_DURATION,
        &names::CLIENT_TTFC,
        &names::CLIENT_TPOC,
        &names::HOST_CONFIG,
    ];
    for m in expected {
        let (unit, data) = received.get(m.name).unwrap_or_else(|| {
            panic!(
                "metric {} not received; got {:?}",
                m.name,
                received.keys().collect::<BTreeSet<_>>()
            )
        });
        assert_eq!(unit, m.unit, "{}", m.name);
        let kind_ok = match (m.kind, data) {
            (names::Kind::Counter, Some(metric::Data::Sum(s))) => s.is_monotonic,
            (names::Kind::Gauge, Some(metric::Data::Gauge(_))) => true,
            (names::Kind::Histogram, Some(metric::Data::Histogram(h))) => h
                .data_points
                .iter()
                .all(|p| p.explicit_bounds == m.buckets && p.count > 0),
            _ => false,
        };
        assert!(kind_ok, "{}: {:?} data {data:?}", m.name, m.kind);
    }
    for (name, (unit, data)) in &received {
        assert!(
            docs.contains(&format!("`{name}`")),
            "metric {name} is not documented in docs/observability.md"
        );
        // The OTLP series and the scrape endpoint meet under one Prometheus name.
        let (kind, prom_type) = match data {
            Some(metric::Data::Sum(s)) if s.is_monotonic => (names::Kind::Counter, "counter"),
            Some(metric::Data::Gauge(_)) => (names::Kind::Gauge, "gauge"),
            Some(metric::Data::Histogram(_)) => (names::Kind::Histogram, "histogram"),
            other => panic!("{name}: unexpected data {other:?}"),
        };
        let prom = names::prometheus_name(name, unit, kind);
        assert!(
            exposition.contains(&format!("# TYPE {prom} {prom_type}\n")),
            "{name} [{unit}] is {prom} on the OTLP path, but /metrics does not serve it"
        );
    }
}
