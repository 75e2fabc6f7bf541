//! Model mode against the real binary: batching, flags, metrics, KV limits.

mod common;

use std::time::{Duration, Instant};

use common::Sim;

fn req(tokens: u32) -> String {
    format!(
        r#"{{"prompt":"a b c d e f g h","max_tokens":{tokens},"ignore_eos":true,"stream":true,"stream_options":{{"include_usage":true}}}}"#
    )
}

/// Output tokens per second of a closed loop of `conc` clients, `per_client` requests each.
fn closed_loop(port: u16, conc: usize, per_client: usize, tokens: u32) -> f64 {
    let t0 = Instant::now();
    let handles: Vec<_> = (0..conc)
        .map(|_| {
            let body = req(tokens);
            std::thread::spawn(move || {
                let mut n = 0;
                for _ in 0..per_client {
                    let r = common::stream_to(port, "/v1/completions", &body);
                    assert_eq!(r.status, 200);
                    n += r.token_indices().len();
                }
                n
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, conc * per_client * tokens as usize);
    total as f64 / t0.elapsed().as_secs_f64()
}

#[test]
fn larger_batch_gives_more_throughput_up_to_the_cap() {
    let sim = Sim::ready(&[
        "--time-scale",
        "0.2",
        "--jitter",
        "0",
        "--max-running-requests",
        "8",
    ]);
    let t1 = closed_loop(sim.port, 1, 3, 40);
    let t4 = closed_loop(sim.port, 4, 3, 40);
    let t8 = closed_loop(sim.port, 8, 3, 40);
    let t16 = closed_loop(sim.port, 16, 3, 40);
    assert!(t4 > 2.5 * t1, "t1 {t1:.0} t4 {t4:.0}");
    assert!(t8 > 1.5 * t4, "t4 {t4:.0} t8 {t8:.0}");
    // Beyond max-running-requests the extra requests queue: no gain.
    assert!(t16 < 1.2 * t8, "t8 {t8:.0} t16 {t16:.0}");
}

#[test]
fn disabling_cuda_graphs_is_slower_at_batch_one() {
    let timed = |flags: &[&str]| {
        let mut args = vec!["--time-scale", "0.2", "--jitter", "0"];
        args.extend_from_slice(flags);
        let sim = Sim::ready(&args);
        let t0 = Instant::now();
        for _ in 0..3 {
            let r = sim.stream("/v1/completions", &req(40));
            assert_eq!(r.token_indices().len(), 40);
        }
        t0.elapsed().as_secs_f64()
    };
    let graphs = timed(&[]);
    let eager = timed(&["--disable-cuda-graph"]);
    assert!(
        eager > 1.2 * graphs,
        "graphs {graphs:.3}s eager {eager:.3}s"
    );
}

#[test]
fn metrics_show_running_requests_and_tokens() {
    let sim = Sim::ready(&["--jitter", "0", "--model-path", "org/moe"]);
    let port = sim.port;
    let clients: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || common::stream_to(port, "/v1/completions", &req(100))))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (_, m) = sim.get("/metrics");
    let gauge = |m: &str, name: &str| -> f64 {
        m.lines()
            .find(|l| l.starts_with(name) && l.contains("model_name=\"org/moe\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{m}"))
    };
    assert_eq!(gauge(&m, "sglang:num_running_reqs{"), 6.0);
    assert!(gauge(&m, "sglang:token_usage{") > 0.0);
    for c in clients {
        let r = c.join().unwrap();
        let usage = r.json(r.events.len() - 2);
        assert_eq!(usage["usage"]["completion_tokens"], 100);
        assert_eq!(usage["usage"]["prompt_tokens"], 8);
    }
    let (_, m) = sim.get("/metrics");
    assert_eq!(gauge(&m, "sglang:generation_tokens_total{"), 600.0);
    assert_eq!(gauge(&m, "sglang:prompt_tokens_total{"), 48.0);
    assert_eq!(gauge(&m, "sglang:num_running_reqs{"), 0.0);
    assert_eq!(gauge(&m, "sglang:time_to_first_token_seconds_count{"), 6.0);
    let (_, info) = sim.get("/server_info");
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        gauge(&m, "sglang:max_total_num_tokens{"),
        v["max_total_num_tokens"].as_f64().unwrap()
    );
}

#[test]
fn kv_pool_limits_requests() {
    let sim = Sim::ready(&["--max-total-tokens", "100", "--time-scale", "0.2"]);
    let (st, body) = sim.post(
        "/v1/completions",
        r#"{"prompt":"a b c","max_tokens":200,"ignore_eos":true}"#,
    );
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("maximum context length"), "{body}");
    // Two requests that each reserve 60 of the 100 tokens run one after the other.
    let port = sim.port;
    let body =
        r#"{"prompt":"a b c d e f g h i j","max_tokens":50,"ignore_eos":true,"stream":true}"#;
    let t0 = Instant::now();
    let a = std::thread::spawn(move || common::stream_to(port, "/v1/completions", body));
    let b = std::thread::spawn(move || common::stream_to(port, "/v1/completions", body));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let first_end = |r: &common::Streamed| *r.times.last().unwrap();
    let (early, late) = if first_end(&a) < first_end(&b) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let late_first = late.times[late.token_indices()[0]];
    assert!(
        late_first >= first_end(early) - Duration::from_millis(2),
        "second request started before the first freed its KV"
    );
    assert!(t0.elapsed() > Duration::from_millis(100));
}

/// The library's prediction is what a client of the binary measures.
#[test]
fn measured_throughput_matches_the_library_prediction() {
    use fleetbench_sim::model::{ModelParams, closed_loop};
    // `closed_loop` below is the library's; the test's own client is `self::closed_loop`.
    let flags = [
        "--time-scale",
        "0.5",
        "--jitter",
        "0",
        "--moe-runner-backend",
        "flashinfer_cutlass",
    ];
    let sim = Sim::ready(&flags);
    let args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    let params = ModelParams::from_args(&fleetbench_sim::parse_args(&args).unwrap()).unwrap();
    // 4 clients x 4 requests of 8 prompt words and 40 tokens.
    let measured = self::closed_loop(sim.port, 4, 4, 40);
    let predicted = closed_loop(&params, 4, 8, 40, 16).output_tokens_per_s;
    let ratio = measured / predicted;
    assert!(
        (0.85..1.1).contains(&ratio),
        "measured {measured:.0} predicted {predicted:.0} tok/s"
    );
    let (_, m) = sim.get("/metrics");
    assert!(m.contains("sglang:queue_time_seconds_count{model_name=\"fleetbench/sim-moe-30b-a3b\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"} 16"), "{m}");
}
