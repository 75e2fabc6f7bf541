//! From a valid spec to work: inheritance, trial order, and the requests the agent receives.

use std::collections::BTreeMap;

use fleetbench_engines::{EngineKind, config_id};
use fleetbench_proto::agentpb;
use fleetbench_spec::{Bound, JobSpec, Levels, Order, TrialPlan, parse};

const AB: &str = r#"
name = "ab"
repeats = 2

[[configs]]
name = "a"
engine = "sglang"
model = "/models/qwen3"
flags = { "--moe-runner-backend" = "triton", "--disable-cuda-graph" = true, "--tp-size" = 2 }
env = { NCCL_DEBUG = "WARN" }

[[configs]]
name = "b"
extends = "a"
profile = "sglang-nightly"
flags = { "--moe-runner-backend" = "flashinfer_cutlass", "--disable-cuda-graph" = false }
env = { SGLANG_FLAG = 1 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 128
output_len = 64
range_ratio = 0.75

[[workloads]]
name = "chat"
dataset = "sharegpt"
path = "/data/sharegpt.json"
api = "chat"
ignore_eos = false
seed = 7

[load]
concurrency = [1, 16, 256]
warmup = 4
requests = 200
percentiles = [90]
slo = { ttft_ms = 2000, tpot_ms = 50, itl_p99_ms = 50 }
"#;

fn ab() -> JobSpec {
    parse("ab.toml", AB).unwrap_or_else(|e| panic!("{e:?}"))
}

fn flags(list: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.map(str::to_string)))
        .collect()
}

#[test]
fn extends_inherits_overrides_and_switches_off() {
    let spec = ab();
    let (a, b) = (&spec.configs[0], &spec.configs[1]);
    assert_eq!(a.profile, "sglang");
    assert_eq!(b.profile, "sglang-nightly");
    assert_eq!(b.kind, EngineKind::Sglang);
    assert_eq!(b.model, "/models/qwen3");
    assert_eq!(
        a.flags,
        flags(&[
            ("--disable-cuda-graph", None),
            ("--moe-runner-backend", Some("triton")),
            ("--tp-size", Some("2")),
        ])
    );
    assert_eq!(
        b.flags,
        flags(&[
            ("--moe-runner-backend", Some("flashinfer_cutlass")),
            ("--tp-size", Some("2"))
        ])
    );
    let env: BTreeMap<String, String> = [("NCCL_DEBUG", "WARN"), ("SGLANG_FLAG", "1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(b.env, env);
    assert_eq!(
        a.config_id,
        config_id(EngineKind::Sglang, &a.model, &a.flags, &a.env)
    );
    assert_eq!(
        b.config_id,
        config_id(EngineKind::Sglang, &b.model, &b.flags, &b.env)
    );
    assert_ne!(a.config_id, b.config_id);
}

#[test]
fn interleaved_trials_measure_every_config_before_any_twice() {
    let mut spec = ab();
    // Blocked is the default; an explicit interleaved order is the fixed round robin.
    assert_eq!(spec.order, Order::Blocked { seed: None });
    spec.order = Order::Interleaved;
    let t = |config, workload, repeat| TrialPlan {
        config,
        workload,
        repeat,
    };
    assert_eq!(
        spec.expand_trials(),
        [
            t(0, 0, 0),
            t(1, 0, 0),
            t(0, 1, 0),
            t(1, 1, 0),
            t(0, 0, 1),
            t(1, 0, 1),
            t(0, 1, 1),
            t(1, 1, 1),
        ]
    );
    let seq = JobSpec {
        order: Order::Sequential,
        ..spec
    };
    assert_eq!(
        seq.expand_trials(),
        [
            t(0, 0, 0),
            t(0, 0, 1),
            t(0, 1, 0),
            t(0, 1, 1),
            t(1, 0, 0),
            t(1, 0, 1),
            t(1, 1, 0),
            t(1, 1, 1),
        ]
    );
}

#[test]
fn a_blocked_order_shuffles_each_block_reproducibly() {
    let blocked = |extra: &str| {
        parse(
            "ab.toml",
            &AB.replace("repeats = 2", &format!("repeats = 2\n{extra}")),
        )
    };
    let spec = blocked("order = \"blocked\"\norder_seed = 3").unwrap();
    assert_eq!(spec.order, Order::Blocked { seed: Some(3) });
    let trials = spec.expand_trials_seeded(spec.order_seed("any job"));
    assert_eq!(
        trials,
        spec.expand_trials_seeded(3),
        "order_seed wins over the job id"
    );
    // Every block (repeat, workload) holds each config once, contiguously.
    assert_eq!(trials.len(), 8);
    for chunk in trials.chunks(2) {
        assert_eq!(
            (chunk[0].repeat, chunk[0].workload),
            (chunk[1].repeat, chunk[1].workload)
        );
        assert_ne!(chunk[0].config, chunk[1].config);
    }
    // Over many seeds both orders of a block occur: the order is shuffled, not fixed.
    let firsts: std::collections::BTreeSet<usize> = (0..16)
        .map(|s| spec.expand_trials_seeded(s)[0].config)
        .collect();
    assert_eq!(firsts.len(), 2);
    // Without order_seed the job id seeds it; a seed with another order is an error.
    let unseeded = blocked("order = \"blocked\"").unwrap();
    assert_ne!(unseeded.order_seed("job-a"), unseeded.order_seed("job-b"));
    // The ambiguous itl_ms is refused, naming the two fields it meant.
    let err = parse(
        "ab.toml",
        &AB.replace("tpot_ms = 50, itl_p99_ms = 50", "itl_ms = 50"),
    )
    .unwrap_err();
    let text = err[0].to_string();
    assert!(
        text.contains("load.slo.itl_ms") && text.contains("tpot_ms") && text.contains("itl_p99_ms"),
        "{text}"
    );
    // Blocked is the default, so a seed alone pins it.
    assert_eq!(
        blocked("order_seed = 3").unwrap().order,
        Order::Blocked { seed: Some(3) }
    );
    let err = blocked("order = \"interleaved\"\norder_seed = 3").unwrap_err();
    assert!(
        err[0]
            .to_string()
            .contains("order_seed: only applies to order = \"blocked\""),
        "{err:?}"
    );
}

#[test]
fn engine_spec_carries_profile_model_flags_and_env() {
    let spec = ab();
    let es = spec.engine_spec(1);
    assert_eq!(es.profile, "sglang-nightly");
    assert_eq!(es.model, "/models/qwen3");
    let got: Vec<(String, Option<String>)> = es
        .flags
        .iter()
        .map(|f| (f.name.clone(), f.value.clone()))
        .collect();
    assert_eq!(got, spec.configs[1].flags);
    assert_eq!(es.env.get("SGLANG_FLAG").map(String::as_str), Some("1"));
    assert_eq!(es.port, 0);
    assert_eq!(spec.engine_kind_pb(0), agentpb::EngineKind::Sglang);
}

#[test]
fn benchmark_request_maps_dataset_levels_bound_and_slo() {
    let spec = ab();
    assert_eq!(spec.level_count(), 3);
    let req = spec.benchmark_request(0);
    let w = req.workload.as_ref().unwrap();
    assert_eq!(w.name, "short");
    assert_eq!(w.api(), agentpb::ApiKind::Completions);
    assert!(w.ignore_eos);
    match &w.dataset {
        Some(agentpb::workload::Dataset::Random(r)) => {
            assert_eq!((r.input_len, r.output_len), (128, 64));
            // bench_serving's 0.75 (lengths in [0.75 len, len]) is a 0.25 spread on the wire.
            assert!((r.range_ratio - 0.25).abs() < 1e-12, "{}", r.range_ratio);
        }
        other => panic!("{other:?}"),
    }
    let concurrencies: Vec<_> = req.levels.iter().map(|l| l.concurrency).collect();
    assert_eq!(concurrencies, [Some(1), Some(16), Some(256)]);
    assert!(req.levels.iter().all(|l| l.request_rate.is_none()));
    assert_eq!(req.warmup_requests, 4);
    assert_eq!(
        req.bound,
        Some(agentpb::run_benchmark_request::Bound::NumRequests(200))
    );
    assert_eq!(req.percentiles, [50.0, 90.0, 99.0]);
    let slo = req.slo.unwrap();
    assert_eq!(
        (slo.ttft_ms, slo.tpot_ms, slo.itl_p99_ms, slo.e2e_ms),
        (Some(2000.0), Some(50.0), Some(50.0), None)
    );
    assert_eq!(slo.itl_ms, None, "the deprecated field is never sent");
    assert!(req.run_id.is_empty() && req.skip_levels.is_empty());

    let chat = spec.benchmark_request(1);
    let w = chat.workload.unwrap();
    assert_eq!(
        (w.api(), w.ignore_eos, w.seed),
        (agentpb::ApiKind::Chat, false, 7)
    );
    assert!(matches!(
        w.dataset,
        Some(agentpb::workload::Dataset::Sharegpt(ref s)) if s.path == "/data/sharegpt.json" && s.output_len == 0
    ));
}

#[test]
fn open_loop_levels_carry_rate_cap_and_burstiness() {
    let text = AB.replace(
        "concurrency = [1, 16, 256]\nwarmup = 4\nrequests = 200",
        "request_rate = [0.5, 4]\nmax_concurrency = 64\nburstiness = 0.5\nduration = \"90s\"",
    );
    let spec = parse("open.toml", &text).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        spec.load.levels,
        Levels::RequestRate {
            rates: vec![0.5, 4.0],
            max_concurrency: Some(64),
            burstiness: 0.5
        }
    );
    assert_eq!(
        spec.load.bound,
        Bound::Duration(std::time::Duration::from_secs(90))
    );
    let req = spec.benchmark_request(0);
    let levels: Vec<_> = req
        .levels
        .iter()
        .map(|l| (l.request_rate, l.concurrency, l.burstiness))
        .collect();
    assert_eq!(
        levels,
        [(Some(0.5), Some(64), 0.5), (Some(4.0), Some(64), 0.5)]
    );
    assert_eq!(
        req.bound,
        Some(agentpb::run_benchmark_request::Bound::DurationS(90.0))
    );
}

#[test]
fn host_selector_matches_names_labels_and_gpus() {
    let text = AB.replace(
        "repeats = 2\n",
        "repeats = 2\n[hosts]\nlabels = { pool = \"h200\" }\ngpu_model = \"h200\"\ngpu_count = 2\n",
    );
    let spec = parse("hosts.toml", &text).unwrap_or_else(|e| panic!("{e:?}"));
    let sel = &spec.hosts;
    let labels: BTreeMap<String, String> = [("pool".to_string(), "h200".to_string())].into();
    let gpu = |name: &str| agentpb::GpuFacts {
        name: name.to_string(),
        ..Default::default()
    };
    let facts = |gpus: Vec<agentpb::GpuFacts>| agentpb::HostFacts {
        gpus,
        ..Default::default()
    };
    let two_h200 = facts(vec![gpu("NVIDIA H200"), gpu("NVIDIA H200")]);
    assert!(sel.matches("gpu-01", &labels, Some(&two_h200)));
    assert!(
        !sel.matches("gpu-01", &BTreeMap::new(), Some(&two_h200)),
        "label missing"
    );
    assert!(!sel.matches("gpu-01", &labels, None), "GPUs unknown");
    let mixed = facts(vec![gpu("NVIDIA H200"), gpu("NVIDIA A100")]);
    assert!(
        !sel.matches("gpu-01", &labels, Some(&mixed)),
        "one H200 only"
    );

    let any = parse("any.toml", AB).unwrap().hosts;
    assert!(any.matches("laptop", &BTreeMap::new(), None));
    let named = parse(
        "named.toml",
        &AB.replace(
            "repeats = 2\n",
            "repeats = 2\n[hosts]\nnames = [\"a\", \"b\"]\n",
        ),
    )
    .unwrap()
    .hosts;
    assert!(named.matches("b", &BTreeMap::new(), None));
    assert!(!named.matches("c", &BTreeMap::new(), None));
}
