//! Every bounded field of `RunBenchmark`, huge and tiny, refused by name (issue 22's in-range
//! memory bomb among them).

use super::*;

/// The in-range memory bomb of issue 22: 1.1 million prompts of 1 Mi tokens.
fn bomb(r: &mut agentpb::RunBenchmarkRequest) {
    r.workload = Some(random_workload(1_048_576, 128));
    r.bound = Some(agentpb::run_benchmark_request::Bound::NumRequests(
        1_000_000,
    ));
    r.warmup_requests = 100_000;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_tiny_numbers_in_every_bounded_field_are_refused() {
    use agentpb::run_benchmark_request::Bound;
    use agentpb::workload::Dataset;
    let agent = Agent::start(PROFILES).unwrap();
    let mut c = agent.client().await.unwrap();
    let base = || agentpb::RunBenchmarkRequest {
        workload: Some(random_workload(8, 4)),
        levels: vec![closed(1)],
        bound: Some(Bound::NumRequests(2)),
        run_id: "bounds".into(),
        ..Default::default()
    };
    let rate = |r: f64| agentpb::LoadLevel {
        concurrency: None,
        request_rate: Some(r),
        burstiness: 1.0,
    };
    type Mutate = Box<dyn Fn(&mut agentpb::RunBenchmarkRequest)>;
    let shared = |f: fn(&mut agentpb::SharedPrefixDataset)| -> Mutate {
        Box::new(move |r: &mut agentpb::RunBenchmarkRequest| {
            let mut d = agentpb::SharedPrefixDataset {
                groups: 4,
                prompts_per_group: 4,
                prefix_len: 8,
                suffix_len: 8,
                output_len: 8,
            };
            f(&mut d);
            r.workload.as_mut().unwrap().dataset = Some(Dataset::SharedPrefix(d));
        })
    };
    let cases: Vec<(&str, Mutate)> = vec![
        (
            "levels[0].request_rate",
            Box::new(move |r| r.levels = vec![rate(1e-300)]),
        ),
        (
            "levels[0].request_rate",
            Box::new(move |r| r.levels = vec![rate(1e300)]),
        ),
        (
            "levels[0].request_rate",
            Box::new(move |r| r.levels = vec![rate(f64::NAN)]),
        ),
        (
            "levels[0].request_rate",
            Box::new(move |r| r.levels = vec![rate(-1.0)]),
        ),
        (
            "levels[0].concurrency",
            Box::new(|r| r.levels = vec![closed(4_000_000_000)]),
        ),
        (
            "levels[0].concurrency",
            Box::new(|r| r.levels = vec![closed(0)]),
        ),
        (
            "levels[0].burstiness",
            Box::new(move |r| {
                let mut l = rate(1.0);
                l.burstiness = 1e-300;
                r.levels = vec![l];
            }),
        ),
        (
            "levels[0].burstiness",
            Box::new(move |r| {
                let mut l = rate(1.0);
                l.burstiness = f64::INFINITY;
                r.levels = vec![l];
            }),
        ),
        (
            "levels",
            Box::new(|r| r.levels = (1..=65).map(closed).collect()),
        ),
        (
            "num_requests",
            Box::new(|r| r.bound = Some(Bound::NumRequests(4_000_000_000))),
        ),
        (
            "num_requests",
            Box::new(|r| r.bound = Some(Bound::NumRequests(0))),
        ),
        (
            "num_requests",
            Box::new(move |r| {
                r.levels = vec![rate(0.01)];
                r.bound = Some(Bound::NumRequests(1_000_000));
            }),
        ),
        (
            "duration_s",
            Box::new(|r| r.bound = Some(Bound::DurationS(1e300))),
        ),
        (
            "duration_s",
            Box::new(|r| r.bound = Some(Bound::DurationS(1e-300))),
        ),
        (
            "duration_s",
            Box::new(|r| r.bound = Some(Bound::DurationS(f64::NAN))),
        ),
        (
            "warmup_requests",
            Box::new(|r| r.warmup_requests = 4_000_000_000),
        ),
        ("percentiles", Box::new(|r| r.percentiles = vec![50.0; 33])),
        ("skip_levels", Box::new(|r| r.skip_levels = vec![0; 65])),
        (
            "slo.ttft_ms",
            Box::new(|r| {
                r.slo = Some(agentpb::Slo {
                    ttft_ms: Some(1e300),
                    itl_ms: None,
                    e2e_ms: None,
                    ..Default::default()
                })
            }),
        ),
        (
            "slo.itl_ms",
            Box::new(|r| {
                r.slo = Some(agentpb::Slo {
                    ttft_ms: None,
                    itl_ms: Some(0.0),
                    e2e_ms: None,
                    ..Default::default()
                })
            }),
        ),
        ("run_id", Box::new(|r| r.run_id = "x".repeat(5000))),
        (
            "workload.random.input_len",
            Box::new(|r| r.workload = Some(random_workload(4_000_000_000, 4))),
        ),
        (
            "workload.random.output_len",
            Box::new(|r| r.workload = Some(random_workload(8, 0))),
        ),
        ("workload.shared_prefix.groups", shared(|d| d.groups = 0)),
        (
            "workload.shared_prefix.prompts_per_group",
            shared(|d| {
                d.groups = 100_000;
                d.prompts_per_group = 100_000;
            }),
        ),
        (
            "workload.shared_prefix.prefix_len",
            shared(|d| d.prefix_len = 4_000_000_000),
        ),
        (
            "workload.shared_prefix.suffix_len",
            shared(|d| d.suffix_len = 0),
        ),
        // Issue 22: every field in range, the product over the level's budget (memory, time).
        ("workload.random.input_len", Box::new(bomb)),
        (
            "workload.random.input_len",
            Box::new(|r| {
                r.workload = Some(random_workload(1, 1_048_576));
                r.bound = Some(Bound::NumRequests(1_000_000));
            }),
        ),
    ];
    for (field, mutate) in &cases {
        let mut req = base();
        mutate(&mut req);
        let s = match c.run_benchmark(req).await {
            Ok(_) => panic!("{field}: accepted"),
            Err(s) => s,
        };
        assert_eq!(
            s.code(),
            tonic::Code::InvalidArgument,
            "{field}: {}",
            s.message()
        );
        assert!(
            s.message()
                .starts_with(&format!("benchmark request: {field}: ")),
            "{field}: {}",
            s.message()
        );
    }
    let mut req = base();
    bomb(&mut req);
    let Err(s) = c.run_benchmark(req).await else {
        panic!("the memory bomb was accepted");
    };
    says(
        &s,
        &[
            "16.8 TiB",
            "memory budget of 4.0 GiB",
            "warmup_requests 100000",
        ],
    );
    // ApplyEngine: too many flags, an endless model name.
    let many: Vec<(&str, Option<&str>)> = vec![("--max-num-seqs", Some("8")); 300];
    let s = refused(&mut c, "vl", "Qwen/Qwen3-8B", &many, &[]).await;
    assert_eq!(s.message(), "spec.flags: at most 256 entries, got 300");
    let long = "m".repeat(5000);
    let s = refused(&mut c, "vl", &long, &[], &[]).await;
    says(&s, &["spec.model: at most 1024 bytes"]);
    // The agent is alive, answers, and started nothing.
    assert!(agent.log_text().lines().all(|l| !l.contains("panicked")));
    c.get_host(agentpb::GetHostRequest {}).await.unwrap();
    nothing_started(&agent, &mut c).await;
}
