//! Parser tests.

use super::*;
use std::time::Duration;

fn p(s: &str) -> Result<SimArgs, ArgError> {
    let v: Vec<String> = s.split_whitespace().map(String::from).collect();
    parse_args(&v)
}

#[test]
fn parses_sglang_flags_and_aliases() {
    let a = p(
        "--host 127.0.0.1 --port 0 --model-path m --tp 2 --moe-runner-backend=triton \
               --disable-cuda-graph --max-running-requests 64 --enable-metrics",
    )
    .unwrap();
    assert_eq!(a.port, 0);
    assert_eq!(a.tp_size, 2);
    assert_eq!(a.moe_runner_backend, MoeBackend::Triton);
    assert!(a.disable_cuda_graph && a.enable_metrics);
    assert_eq!(a.max_running_requests, Some(64));
    assert_eq!(a.fixed_latency(), None);
}

#[test]
fn unknown_flag_is_named() {
    let e = p("--port 1 --frobnicate 3").unwrap_err();
    assert_eq!(e.to_string(), "unrecognized arguments: --frobnicate");
}

#[test]
fn bad_values_name_the_flag() {
    let e = p("--max-running-requests lots").unwrap_err();
    assert_eq!(
        e.to_string(),
        "argument --max-running-requests: invalid int value: 'lots'"
    );
    let e = p("--moe-runner-backend magic").unwrap_err();
    assert!(e.to_string().contains("invalid choice: 'magic'"), "{e}");
    assert_eq!(
        p("--port").unwrap_err(),
        ArgError::MissingValue {
            flag: "--port".into()
        }
    );
}

#[test]
fn sglang_compat_flags_are_accepted_and_typed() {
    let a = p(
        "--dp-size 2 --enable-mixed-chunk --schedule-policy lpm --kv-cache-dtype fp8_e4m3 \
               --cuda-graph-backend-decode disabled --moe-runner-backend marlin",
    )
    .unwrap();
    assert!(a.disable_cuda_graph);
    assert_eq!(a.kv_cache_dtype, "fp8_e4m3");
    assert_eq!(a.moe_runner_backend, MoeBackend::Other("marlin"));
    assert_eq!(a.accepted.len(), 3);
    assert!(
        p("--dp-size two")
            .unwrap_err()
            .to_string()
            .contains("--dp-size")
    );
    assert!(
        p("--schedule-policy best")
            .unwrap_err()
            .to_string()
            .contains("invalid choice")
    );
    assert!(matches!(
        p("--enable-mixed-chunk=1").unwrap_err(),
        ArgError::UnexpectedValue { .. }
    ));
}

#[test]
fn ambiguous_prefix() {
    assert!(matches!(
        p("--c 1").unwrap_err(),
        ArgError::Ambiguous { .. }
    ));
}

#[test]
fn faults_and_fixed_mode() {
    let a = p("--ttft-ms 50 --itl-ms 5 --fault hang-after-requests 3 --fault nan").unwrap();
    assert_eq!(
        a.fixed_latency(),
        Some((Duration::from_millis(50), Duration::from_millis(5)))
    );
    assert_eq!(a.faults.hang_after_requests, Some(3));
    assert!(a.faults.nan);
    let a = p("--fault slow-start --startup-delay-s 0.5").unwrap();
    assert_eq!(a.effective_startup_delay(), Duration::from_secs(5));
}

#[test]
fn rendezvous_flags_parse_and_must_agree() {
    let a = p("--nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000 --dist-timeout 3").unwrap();
    assert_eq!((a.nnodes, a.node_rank), (2, 1));
    assert_eq!(a.dist_init_addr.as_deref(), Some("10.0.0.1:5000"));
    assert_eq!(a.dist_timeout_s, 3.0);
    let single = p("--port 1").unwrap();
    assert_eq!((single.nnodes, single.node_rank), (1, 0));
    let e = p("--nnodes 2 --node-rank 2 --dist-init-addr h:1").unwrap_err();
    assert!(e.to_string().contains("--node-rank"), "{e}");
    let e = p("--nnodes 2 --node-rank 1").unwrap_err();
    assert!(e.to_string().contains("--dist-init-addr"), "{e}");
    let e = p("--nnodes 2 --dist-init-addr nohost").unwrap_err();
    assert!(e.to_string().contains("HOST:PORT"), "{e}");
    assert!(p("--nnodes 0").is_err());
}

#[test]
fn vllm_rendezvous_flags_read_as_the_same_gang() {
    // Exactly what the agent gives a vLLM rank (`fleetbench_engines::gang`).
    let gang = |rank| fleetbench_engines::gang::Gang {
        nnodes: 2,
        node_rank: rank,
        dist_init_addr: "10.0.0.1:5000".into(),
    };
    for rank in [0, 1] {
        let argv =
            fleetbench_engines::gang::gang_args(fleetbench_engines::EngineKind::Vllm, &gang(rank))
                .unwrap();
        let a = parse_args(&argv).unwrap();
        assert_eq!((a.nnodes, a.node_rank), (2, rank), "{argv:?}");
        assert_eq!(a.dist_init_addr.as_deref(), Some("10.0.0.1:5000"));
    }
    let e = p("--data-parallel-address 10.0.0.1").unwrap_err();
    assert!(e.to_string().contains("--data-parallel-rpc-port"), "{e}");
    let e = p("--data-parallel-size 2 --data-parallel-size-local 2 --data-parallel-address h --data-parallel-rpc-port 1")
        .unwrap_err();
    assert!(e.to_string().contains("--data-parallel-size-local"), "{e}");
}
