//! Spec validation: every wrong file under `fixtures/specs/` yields exactly the listed errors,
//! each naming the file, the 1-based line and the field path.

use fleetbench_proto::controllerpb;
use fleetbench_spec::{SpecError, parse};

fn errors_of(file: &str) -> Vec<String> {
    let path = format!("{}/tests/fixtures/specs/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    match parse(file, &text) {
        Ok(spec) => panic!("{file} parsed but should not: {spec:?}"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[track_caller]
fn assert_errors(file: &str, expected: &[&str]) {
    let got = errors_of(file);
    assert_eq!(got, expected, "\n--- got ---\n{}\n", got.join("\n"));
}

#[test]
fn bad_configs() {
    assert_errors(
        "bad_configs.toml",
        &[
            "bad_configs.toml:5: configs[0].extends: extends forms a cycle: b -> a -> b",
            "bad_configs.toml:9: configs[1].extends: extends forms a cycle: a -> b -> a",
            "bad_configs.toml:13: configs[2].extends: no config named \"bsae\"",
            "bad_configs.toml:17: configs[3].engine: unknown engine kind \"sglangg\" (expected one of sglang, vllm, llamacpp, sim, generic, sglang-router)",
            "bad_configs.toml:20: configs[4].engine: missing: the engine kind, one of: sglang, vllm, llamacpp, sim, generic",
            "bad_configs.toml:23: configs[4].env.\"2FAST\": not a valid environment variable name (letters, digits and _, not starting with a digit)",
            "bad_configs.toml:23: configs[4].env.BAD: expected a string, got a list",
            "bad_configs.toml:25: configs[5].model: missing: the model (a path or name the engine loads)",
            "bad_configs.toml:30: configs[6].name: duplicate config name \"e\" (also configs[4])",
            "bad_configs.toml:33: configs[6].prfile: unknown key \"prfile\" (did you mean \"profile\"?)",
            "bad_configs.toml:36: configs[7].name: same engine, model, flags and env as configs[6] (\"e\"); a config must differ from the others",
            "bad_configs.toml:41: configs[8].name: same engine, model, flags and env as configs[6] (\"e\"); a config must differ from the others",
            "bad_configs.toml:46: configs[9].engine: sglang-router is a router, not an engine: a config runs it in front of replicas of an engine (engine = \"llamacpp\", replicas = 2, router = { engine = \"sglang-router\" }; see docs/deployments.md)",
        ],
    );
}

#[test]
fn bad_empty() {
    assert_errors(
        "bad_empty.toml",
        &[
            "bad_empty.toml: load: missing: a [load] table with the load levels",
            "bad_empty.toml:2: configs: must not be empty",
            "bad_empty.toml:3: workloads: must not be empty",
        ],
    );
}

#[test]
fn bad_flags() {
    assert_errors(
        "bad_flags.toml",
        &[
            "bad_flags.toml:14: configs[1].flags.\"--max-running-requests\": expected an integer >= 1, got \"lots\"",
            "bad_flags.toml:19: configs[2].flags.\"--disable-cuda-graph\": expected no value (the flag is a switch), got \"yes\" (write true to switch it on)",
            "bad_flags.toml:19: configs[2].flags.\"--mem-fracton-static\": not a flag engine sglang accepts (did you mean \"--mem-fraction-static\"?)",
            "bad_flags.toml:19: configs[2].flags.\"--moe-runner-backend\": expected one of auto, deep_gemm, triton, triton_kernel, flashinfer_trtllm, experimental_sgl_trtllm, flashinfer_trtllm_routed, flashinfer_cutlass, flashinfer_mxfp4, flashinfer_cutedsl, flashinfer_megamoe, cutlass, aiter, marlin, humming, experimental_sgl_marlin, lora_cutedsl, lora_triton, lora_marlin, hpc_ops, megamoe, intel_xpu, got \"cutlas\" (did you mean \"cutlass\"?)",
            "bad_flags.toml:19: configs[2].flags.\"--tp-size\": expected an integer >= 1 (the flag needs a value), got true (a switch)",
            "bad_flags.toml:25: configs[3].flags.\"--max-num-seqs\": expected a string, a number, or true/false to switch a flag on/off, got a list",
            "bad_flags.toml:25: configs[3].flags.\"max-num-seqs\": flag names start with \"-\" or \"--\", as on the command line (\"--max-num-seqs\"?)",
        ],
    );
}

#[test]
fn bad_load() {
    assert_errors(
        "bad_load.toml",
        &[
            "bad_load.toml:15: load.concurrency[1]: must be at least 1, got 0",
            "bad_load.toml:15: load.concurrency[2]: expected an integer, got \"eight\"",
            "bad_load.toml:16: load.max_concurrency: only applies to request_rate levels (concurrency is already a cap)",
            "bad_load.toml:17: load.warmup: must be at least 0, got -1",
            "bad_load.toml:19: load.duration: give either requests or duration per level, not both",
            "bad_load.toml:20: load.percentiles[1]: a percentile is between 0 and 100 (exclusive), got 100",
            "bad_load.toml:21: load.concurency: unknown key \"concurency\" (did you mean \"concurrency\"?)",
            "bad_load.toml:22: load.slo.itl: unknown key \"itl\" (expected one of: ttft_ms, tpot_ms, itl_p99_ms, e2e_ms, max_error_rate)",
            "bad_load.toml:22: load.slo.ttft_ms: must be greater than 0, got 0",
            "bad_load.toml:22: load.slo.max_error_rate: an error rate is a share of requests, between 0 and 1 (0.01 = one in a hundred), got 1.5",
        ],
    );
}

#[test]
fn bad_rates() {
    assert_errors(
        "bad_rates.toml",
        &[
            "bad_rates.toml:15: load.request_rate[1]: must be greater than 0, got -1",
            "bad_rates.toml:16: load.burstiness: must be greater than 0, got 0",
            "bad_rates.toml:17: load.duration: expected a duration such as \"30s\" or \"2m\", got \"3 fortnights\" (unknown time unit \"fortnights\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations))",
        ],
    );
}

#[test]
fn bad_syntax() {
    assert_errors(
        "bad_syntax.toml",
        &[
            "bad_syntax.toml:7: invalid TOML: missing comma between key-value pairs, expected `,`",
            "bad_syntax.toml:7: invalid TOML: unclosed inline table, expected `}`",
        ],
    );
}

#[test]
fn bad_top() {
    assert_errors(
        "bad_top.toml",
        &[
            "bad_top.toml: workloads: missing: at least one [[workloads]] table",
            "bad_top.toml: load: missing: a [load] table with the load levels",
            "bad_top.toml:1: name: must not be empty",
            "bad_top.toml:2: repeats: must be at least 1, got 0",
            "bad_top.toml:3: order: expected \"interleaved\", \"sequential\" or \"blocked\", got \"random\"",
            "bad_top.toml:4: descripton: unknown key \"descripton\" (did you mean \"description\"?)",
            "bad_top.toml:7: hosts.names: expected a list, got \"gpu-01\"",
            "bad_top.toml:8: hosts.gpu_count: must be at least 1, got 0",
            "bad_top.toml:9: hosts.labels.zone: expected a string, got a list",
            "bad_top.toml:16: search: tuning searches ([search]) are not supported by this version yet",
            "bad_top.toml:19: suite: this is a regression suite: run it with `fleetbench regress`, not as a job",
        ],
    );
}

#[test]
fn bad_workloads() {
    assert_errors(
        "bad_workloads.toml",
        &[
            "bad_workloads.toml:8: workloads[0].path: missing: required for dataset \"sharegpt\"",
            "bad_workloads.toml:11: workloads[0].input_len: \"input_len\" is not a parameter of dataset \"sharegpt\" (it takes: path, output_len)",
            "bad_workloads.toml:12: workloads[0].api: expected \"completions\" or \"chat\", got \"responses\"",
            "bad_workloads.toml:14: workloads[1].output_len: missing: required for dataset \"random\"",
            "bad_workloads.toml:15: workloads[1].name: duplicate workload name \"chat\" (also workloads[0])",
            "bad_workloads.toml:17: workloads[1].input_len: must be at least 1, got 0",
            "bad_workloads.toml:18: workloads[1].range_ratio: must be in (0, 1] (1 = exact lengths), got 1.5",
            "bad_workloads.toml:19: workloads[1].ignore_eos: expected true or false, got \"yes\"",
            "bad_workloads.toml:21: workloads[2].output_len: missing: required for dataset \"shared-prefix\"",
            "bad_workloads.toml:31: workloads[3].dataset: expected one of \"random\", \"sharegpt\", \"shared-prefix\", \"jsonl\", \"trace\", \"conversation\", got \"csv\"",
            "bad_workloads.toml:32: workloads[3].inputlen: unknown key \"inputlen\" (did you mean \"input_len\"?)",
        ],
    );
}

#[test]
fn error_fields_are_structured_and_survive_the_wire() {
    let path = format!(
        "{}/tests/fixtures/specs/bad_flags.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let errors = parse("job.toml", &text).unwrap_err();
    let first = &errors[0];
    assert_eq!(
        first,
        &SpecError {
            file: "job.toml".into(),
            line: 14,
            field: r#"configs[1].flags."--max-running-requests""#.into(),
            message: r#"expected an integer >= 1, got "lots""#.into(),
        }
    );
    let wire = controllerpb::SpecError::from(first);
    assert_eq!((wire.line, wire.field.as_str()), (14, first.field.as_str()));
    assert_eq!(SpecError::from(&wire), *first);
}

#[test]
fn an_error_without_a_line_prints_without_one() {
    let errors = parse("job.toml", "name = \"x\"\n").unwrap_err();
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        rendered,
        [
            "job.toml: configs: missing: at least one [[configs]] table",
            "job.toml: workloads: missing: at least one [[workloads]] table",
            "job.toml: load: missing: a [load] table with the load levels",
        ]
    );
}

#[test]
fn bad_bounds_huge() {
    assert_errors(
        "bad_bounds_huge.toml",
        &[
            "bad_bounds_huge.toml:4: repeats: must be between 1 and 100, got 4000000000",
            "bad_bounds_huge.toml:4: repeats: the job expands to 8000000000 trials (configs x workloads x repeats); at most 10000",
            "bad_bounds_huge.toml:7: hosts.gpu_count: must be between 1 and 1024, got 100000",
            "bad_bounds_huge.toml:17: workloads[0].input_len: must be between 1 and 1048576, got 4000000000",
            "bad_bounds_huge.toml:18: workloads[0].output_len: must be between 1 and 1048576, got 2000000",
            "bad_bounds_huge.toml:24: workloads[1].prompts_per_group: groups x prompts_per_group is 10000000000; at most 1000000",
            "bad_bounds_huge.toml:25: workloads[1].prefix_len: must be between 1 and 1048576, got 4000000000",
            "bad_bounds_huge.toml:30: load.request_rate[0]: must be between 0.01 and 100000, got 1e300",
            "bad_bounds_huge.toml:30: load.request_rate[1]: 4000000000 requests at 5 per second take 800000000 s; a level may take at most 604800 s",
            "bad_bounds_huge.toml:31: load.max_concurrency: must be between 1 and 65536, got 4000000000",
            "bad_bounds_huge.toml:32: load.burstiness: must be between 0.01 and 100, got 1e9",
            "bad_bounds_huge.toml:33: load.warmup: must be between 0 and 100000, got 4000000000",
            "bad_bounds_huge.toml:34: load.requests: must be between 1 and 1000000, got 4000000000",
            "bad_bounds_huge.toml:35: load.percentiles: at most 32 entries, got 33",
            "bad_bounds_huge.toml:38: load.slo.ttft_ms: must be between 0.001 and 3600000, got 1e300",
        ],
    );
}

#[test]
fn bad_bounds_tiny() {
    assert_errors(
        "bad_bounds_tiny.toml",
        &[
            "bad_bounds_tiny.toml:17: load.request_rate[0]: must be between 0.01 and 100000, got 1e-300",
            "bad_bounds_tiny.toml:17: load.request_rate[1]: must be between 0.01 and 100000, got 0.001",
            "bad_bounds_tiny.toml:18: load.burstiness: must be between 0.01 and 100, got 1e-300",
            "bad_bounds_tiny.toml:19: load.duration: seconds must be between 0.1 and 86400, got 0.001",
            "bad_bounds_tiny.toml:22: load.slo.itl_p99_ms: must be between 0.001 and 3600000, got 1e-300",
        ],
    );
}

mod props {
    use fleetbench_proto::limits as lim;
    use fleetbench_spec::{Bound, Levels, parse};
    use proptest::prelude::*;

    fn spec(repeats: i64, levels: &str, bound: &str, input_len: i64) -> String {
        format!(
            "name = \"p\"\nrepeats = {repeats}\n[[configs]]\nname = \"a\"\nengine = \"sim\"\nmodel = \"m\"\n\
             [[workloads]]\nname = \"w\"\ndataset = \"random\"\ninput_len = {input_len}\noutput_len = 8\n\
             [load]\n{levels}\n{bound}\n"
        )
    }

    fn number() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            (-5.0f64..7.0).prop_map(|e| 10f64.powf(e)),
            Just(1e-300),
            Just(1e300),
            Just(0.0),
        ]
    }

    /// The generator's template is a valid spec, so the property below is not vacuous.
    #[test]
    fn the_template_parses() {
        parse(
            "p.toml",
            &spec(2, "request_rate = [5e0]", "requests = 8", 8),
        )
        .unwrap();
        parse(
            "p.toml",
            &spec(2, "concurrency = [1, 4]", "duration = \"2000ms\"", 8),
        )
        .unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Any text: errors, never a panic.
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            let _ = parse("x.toml", &text);
        }

        /// A spec that parses has every number inside its documented range.
        #[test]
        fn what_parses_is_in_range(
            repeats in prop_oneof![any::<i64>(), 0i64..200],
            conc in prop::collection::vec(prop_oneof![any::<i64>(), 0i64..70_000], 1..4),
            rates in prop::collection::vec(number(), 1..4),
            open in any::<bool>(),
            requests in prop_oneof![any::<i64>(), 0i64..2_000_000],
            secs in number(),
            by_time in any::<bool>(),
            input_len in prop_oneof![any::<i64>(), 0i64..2_000_000],
        ) {
            let levels = if open {
                let r: Vec<String> = rates.iter().map(|r| format!("{r:e}")).collect();
                format!("request_rate = [{}]", r.join(", "))
            } else {
                let c: Vec<String> = conc.iter().map(i64::to_string).collect();
                format!("concurrency = [{}]", c.join(", "))
            };
            let bound = if by_time {
                format!("duration = \"{}ms\"", (secs.abs() * 1000.0).min(1e15) as u64)
            } else {
                format!("requests = {requests}")
            };
            let text = spec(repeats, &levels, &bound, input_len);
            if let Ok(s) = parse("p.toml", &text) {
                prop_assert!(lim::check_u32(s.repeats, lim::REPEATS).is_ok());
                match &s.load.levels {
                    Levels::Concurrency(v) => {
                        for c in v {
                            prop_assert!(lim::check_u32(*c, lim::CONCURRENCY).is_ok());
                        }
                    }
                    Levels::RequestRate { rates, .. } => {
                        for r in rates {
                            prop_assert!(lim::check_f64(*r, lim::REQUEST_RATE).is_ok());
                        }
                    }
                }
                match s.load.bound {
                    Bound::Requests(n) => prop_assert!(lim::check_u32(n, lim::REQUESTS).is_ok()),
                    Bound::Duration(d) => {
                        prop_assert!(lim::check_f64(d.as_secs_f64(), lim::DURATION_S).is_ok())
                    }
                }
                // Expanding it is bounded.
                prop_assert!(s.expand_trials().len() as u64 <= lim::MAX_TRIALS);
            }
        }
    }
}

#[test]
fn bad_target() {
    let got = errors_of("bad_target.toml");
    // Never the secret as written.
    assert!(
        got.iter().all(|e| !e.contains("sk-live-123456")),
        "{got:#?}"
    );
    assert_errors(
        "bad_target.toml",
        &[
            "bad_target.toml:7: configs[0].target.url: \"ftp://gw.example\" is not an http:// or https:// URL",
            "bad_target.toml:8: configs[0].target.api_key: a secret is written as a reference the agent resolves, \"env:NAME\" (A-Z, 0-9, _) or \"file:/absolute/path\", never as a value (the value given is not repeated here)",
            "bad_target.toml:9: configs[0].target.headers.Authorization: Authorization carries a secret: give it as api_key or under secret_headers, by reference",
            "bad_target.toml:10: configs[0].target.secret_headers.\"X-Token\": a secret is written as a reference the agent resolves, \"env:NAME\" (A-Z, 0-9, _) or \"file:/absolute/path\", never as a value (the value given is not repeated here)",
            "bad_target.toml:11: configs[0].target.metrics[0]: \"https://gw.example/metrics\" is not an http:// URL (engine metrics are scraped over http://)",
            "bad_target.toml:17: configs[1].flags.\"--disable-log-requests\": deprecated by engine vllm: use --no-enable-log-requests (request logging is off by default)",
        ],
    );
}

#[test]
fn bad_target_rules() {
    assert_errors(
        "bad_target_job.toml",
        &[
            "bad_target_job.toml:3: configs[0].flags: a config with a target starts no engine, so it takes no flags (the endpoint is configured where it runs)",
        ],
    );
    assert_errors(
        "bad_target_hosts.toml",
        &[
            "bad_target_hosts.toml: hosts.names: config \"gw\" is an external target: name the agent hosts that drive its load (hosts.names), so the load never comes from an arbitrary GPU host",
            "bad_target_hosts.toml: load.reset_cache: config \"gw\" is an external target, whose cache fleetbench cannot empty",
        ],
    );
}

#[test]
fn bad_clients() {
    let got = errors_of("bad_clients.toml");
    let text = got.join("\n");
    for want in [
        "load.clients: config \"local\" is an engine on the trial's host",
        "load.clients: 3 clients need 3 hosts to drive the load; hosts.names lists 2",
        "load.concurrency[1]: concurrency 2 cannot be split over 3 clients",
        "load.requests: 2 requests cannot be split over 3 clients: at least 3",
        "workloads[1].dataset: a trace is replayed by one client at its timestamps",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // And the bounds: at least one client, at most 64.
    let src = std::fs::read_to_string(format!(
        "{}/tests/fixtures/specs/bad_clients.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    for (k, want) in [
        ("0", "must be at least 1, got 0"),
        ("65", "must be between 1 and 64, got 65"),
    ] {
        let text = src.replace("clients = 3", &format!("clients = {k}"));
        let errors: Vec<String> = parse("c.toml", &text)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| e.contains("load.clients") && e.contains(want)),
            "clients = {k}: {errors:?}"
        );
    }
}

#[test]
fn bad_nodes() {
    assert_errors(
        "bad_nodes.toml",
        &[
            "bad_nodes.toml:7: configs[0].nodes: must be between 1 and 64, got 0",
            "bad_nodes.toml:13: configs[1].nodes: must be between 1 and 64, got 65",
            "bad_nodes.toml:19: configs[2].nodes: engine llamacpp cannot span hosts: nodes = 2 needs sglang, vllm or sim (a rank per host, started with the engine's own rendezvous flags)",
            "bad_nodes.toml:21: configs[3].nodes: a config with a target starts no engine, so it takes no nodes (the endpoint is configured where it runs)",
            "bad_nodes.toml:31: configs[4].flags.\"--node-rank\": --node-rank is set by the controller for each rank of a config with nodes > 1; a config gives nodes, never the rendezvous flags",
        ],
    );
}

#[test]
fn bad_deployment() {
    assert_errors(
        "bad_deployment.toml",
        &[
            "bad_deployment.toml:7: configs[0].replicas: replicas need a router in front of them: add router = { engine = \"sglang-router\", profile = \"...\" } (its agent profile allowlists the replicas' hosts)",
            "bad_deployment.toml:9: configs[1].replicas: missing: how many replicas the router fronts (replicas = N, one host each)",
            "bad_deployment.toml:19: configs[2].replicas: must be between 1 and 64, got 0",
            "bad_deployment.toml:27: configs[3].router.engine: vllm is an engine, not a router; routers: sglang-router",
            "bad_deployment.toml:34: configs[4].router.flags.\"--policy\": expected one of random, round_robin, cache_aware, power_of_two, manual, got \"fastest\"",
            "bad_deployment.toml:34: configs[4].router.flags.\"--worker-urls\": --worker-urls is set by the controller: a router's workers are its config's replicas (replicas = N), placed on hosts its profile allowlists",
            "bad_deployment.toml:41: configs[5].replicas: a replica spanning hosts is not supported: give replicas or nodes, not both (nodes = 2)",
            "bad_deployment.toml:44: configs[6].replicas: a config with a target starts no engine, so it takes no replicas (the endpoint is configured where it runs)",
            "bad_deployment.toml:54: configs[7].router.profle: unknown key \"profle\" (did you mean \"profile\"?)",
        ],
    );
}

#[test]
fn a_deployment_is_a_config_of_its_own_and_its_router_is_specified() {
    let text = r#"name = "routing"
[[configs]]
name = "one"
engine = "llamacpp"
model = "m"
[[configs]]
name = "cache-aware"
extends = "one"
replicas = 2
router = { profile = "router", flags = { "--policy" = "cache_aware", "--cache-threshold" = 0.5 } }
[[configs]]
name = "round-robin"
extends = "cache-aware"
router = { flags = { "--policy" = "round_robin" } }
[[configs]]
name = "three"
extends = "round-robin"
replicas = 3
[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 16
[load]
concurrency = [1]
requests = 4
"#;
    let spec = parse("routing.toml", text).unwrap();
    let ids: Vec<&str> = spec.configs.iter().map(|c| c.config_id.as_str()).collect();
    // The same engine flags: every deployment's id starts with the one server's, and differs by
    // its replica count and its router.
    for id in &ids[1..] {
        assert!(id.starts_with(ids[0]), "{ids:?}");
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{ids:?}");
    assert!(spec.configs[0].deployment.is_none());
    let d = spec.configs[2].deployment.as_ref().unwrap();
    assert_eq!(d.replicas, 2);
    assert_eq!(d.router.profile, "router");
    // `extends` merged the router field by field: the policy replaced, the threshold kept.
    assert_eq!(
        d.router.flags,
        vec![
            ("--cache-threshold".to_string(), Some("0.5".to_string())),
            ("--policy".to_string(), Some("round_robin".to_string())),
        ]
    );
    assert_eq!(spec.configs[3].deployment.as_ref().unwrap().replicas, 3);
    // The router's engine spec carries its workers and their engine; a replica's has none.
    let workers = vec!["http://10.0.0.1:9931".to_string()];
    let r = spec.router_spec(2, workers.clone()).unwrap();
    assert_eq!((r.profile.as_str(), r.workers.clone()), ("router", workers));
    assert_eq!(
        r.workers_kind,
        fleetbench_proto::agentpb::EngineKind::Llamacpp as i32
    );
    assert!(spec.engine_spec(2).workers.is_empty());
    assert!(spec.router_spec(0, Vec::new()).is_none());
}

#[test]
fn nodes_make_a_config_of_their_own() {
    let text = r#"name = "gang"
[[configs]]
name = "one"
engine = "sim"
model = "m"
[[configs]]
name = "two"
extends = "one"
nodes = 2
[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 16
[load]
concurrency = [1]
requests = 4
"#;
    let spec = parse("gang.toml", text).unwrap();
    assert_eq!((spec.configs[0].nodes, spec.configs[1].nodes), (1, 2));
    assert_ne!(spec.configs[0].config_id, spec.configs[1].config_id);
    assert!(
        spec.configs[1]
            .config_id
            .starts_with(&spec.configs[0].config_id)
    );
}
