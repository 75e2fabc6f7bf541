//! Flag parsing of `fleetbench bench`: flags become a configuration, bad ones are named, and
//! `vllm bench serve`'s command lines are understood.

use clap::Parser;
use fleetbench_loadgen::{Bound, DatasetSpec};

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn parse(line: &str) -> anyhow::Result<BenchConfig> {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(line.split_whitespace()))?;
    config(&cli.args, "http://127.0.0.1:1".into())
}

#[test]
fn flags_become_a_config() {
    let c = parse(
        "--concurrency 1,64,512 --num-prompts 50 --input-len 32 --output-len 64 --slo ttft_ms=100",
    )
    .unwrap();
    assert_eq!(
        c.levels
            .iter()
            .map(|l| l.concurrency.unwrap())
            .collect::<Vec<_>>(),
        vec![1, 64, 512]
    );
    assert_eq!(c.bound, Bound::Requests(50));
    assert_eq!(
        c.dataset,
        DatasetSpec::Random {
            input_len: 32,
            output_len: 64,
            range_ratio: 1.0
        }
    );
    assert_eq!(c.slo.unwrap().ttft_ms, Some(100.0));
    let c =
        parse("--request-rate 5,20 --max-concurrency 8 --burstiness 0.5 --duration 2s").unwrap();
    assert_eq!(c.levels[1].request_rate, Some(20.0));
    assert_eq!(c.levels[1].concurrency, Some(8));
    assert_eq!(c.bound, Bound::Duration(Duration::from_secs(2)));
}

#[test]
fn bad_flags_are_named() {
    let err = |line: &str| format!("{:#}", parse(line).unwrap_err());
    assert!(err("--num-prompts 5").contains("--concurrency"));
    assert!(err("--concurrency 0").contains("--concurrency"));
    assert!(err("--concurrency 2 --range-ratio 2").contains("--range-ratio"));
    assert!(err("--concurrency 2 --percentiles 150").contains("--percentiles"));
    assert!(err("--concurrency 2 --dataset jsonl").contains("--dataset-path"));
    assert!(
        err("--concurrency 2 --dataset-path /nonexistent --dataset sharegpt")
            .contains("--dataset-path")
    );
    assert!(err("--concurrency 2 --slo ttft=3").contains("--slo"));
    assert!(err("--concurrency 2 --api grpc").contains("--api"));
    assert!(err("--concurrency 2 --duration soon").contains("--duration"));
    assert!(err("--concurrency 2 --ramp-up soon").contains("--ramp-up"));
    assert!(err("--request-rate 2 --ramp-up 1s").contains("--concurrency"));
    assert!(err("--concurrency 2 --header NoColon").contains("--header"));
    assert!(err("--concurrency 2 --header Host:x").contains("--header"));
    assert!(err("--concurrency 2 --header Bad_Name?:x").contains("--header"));
    assert!(err("--concurrency 2 --ca-cert /nonexistent.pem").contains("--ca-cert"));
    let both = err("--concurrency 2 --api-key k --header Authorization:Bearer_x");
    assert!(both.contains("--api-key"), "{both}");
    assert!(!both.contains("Bearer_x"), "the value is a secret: {both}");
}

#[test]
fn vllm_bench_serve_flags_are_understood() {
    // `vllm bench serve`'s closed loop: --request-rate inf (its default) and a cap.
    let c = parse(
        "--backend openai-chat --dataset-name random --random-input-len 32 \
         --random-output-len 16 --num-prompts 20 --max-concurrency 4 --request-rate inf \
         --metric-percentiles 50,99 --goodput ttft:500 tpot:50 --ignore-eos",
    )
    .unwrap();
    assert_eq!(c.api, Api::Chat);
    assert_eq!(c.levels, vec![Level::closed(4)]);
    assert_eq!(c.bound, Bound::Requests(20));
    assert_eq!(c.percentiles, vec![50.0, 99.0]);
    assert_eq!(
        c.dataset,
        DatasetSpec::Random {
            input_len: 32,
            output_len: 16,
            range_ratio: 1.0
        }
    );
    let slo = c.slo.unwrap();
    assert_eq!(
        (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms),
        (Some(500.0), Some(50.0), None)
    );
    assert!(c.ignore_eos);
    // --max-concurrency alone is the same closed loop; --endpoint picks the API.
    let c = parse("--max-concurrency 8 --endpoint /v1/completions").unwrap();
    assert_eq!(c.levels, vec![Level::closed(8)]);
    assert_eq!(c.api, Api::Completions);
    // A finite rate keeps the cap as a cap.
    let c = parse("--request-rate 5 --max-concurrency 8").unwrap();
    assert_eq!(c.levels[0].concurrency, Some(8));
    assert_eq!(c.levels[0].request_rate, Some(5.0));
    // vLLM's KEY=VALUE header form.
    let c = parse("--concurrency 1 --header X-Tenant=a:b").unwrap();
    assert_eq!(c.client.headers, [("X-Tenant".into(), "a:b".into())]);
    let err = |line: &str| format!("{:#}", parse(line).unwrap_err());
    assert!(err("--concurrency 1 --endpoint /v1/embeddings").contains("--endpoint"));
    assert!(err("--backend tgi --concurrency 1").contains("--backend"));
    assert!(err("--request-rate inf,5").contains("--request-rate"));
    assert!(err("--request-rate inf").contains("--max-concurrency"));
    assert!(err("--concurrency 2 --max-concurrency 4").contains("--max-concurrency"));
    assert!(err("--concurrency 1 --goodput ttft=5").contains("--goodput"));
    assert!(err("--concurrency 1 --goodput itl:5").contains("--goodput"));
}

#[test]
fn access_flags_become_client_options() {
    let c =
        parse("--concurrency 1 --api-key sk-1 --header X-Tenant:a --header X-Tenant:b").unwrap();
    assert_eq!(c.client.api_key.as_deref(), Some("sk-1"));
    assert_eq!(
        c.client.headers,
        [
            ("X-Tenant".into(), "a".into()),
            ("X-Tenant".into(), "b".into())
        ]
    );
}
