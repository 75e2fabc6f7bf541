//! One level's load split over 1, 2 and 4 client agents (`load.clients`), each a real agent
//! process, against one endpoint: a `fleetbench-sim` process with fixed latencies (40 ms to the
//! first token, 4 ms between tokens), so every split should measure the same server. The same
//! total load (concurrency 8, 96 requests) each time: the merged level counts every request
//! once (against the server's own request and token counters), its percentiles agree with the
//! single client's, and it says how the load was split and how far apart the clients began.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::{LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::{GetResultsRequest, JobState};
use fleetbench_testkit::servers::metric_sum;

const HOSTS: [&str; 4] = ["c1", "c2", "c3", "c4"];
const CONCURRENCY: u32 = 8;
const REQUESTS: u64 = 96;
const OUTPUT_LEN: u64 = 24;
/// Warm-up requests before the level: on one client (its own call) when the level is split.
const WARMUP: u64 = 4;

fn spec(clients: u32, origin: &str) -> String {
    format!(
        r#"name = "split-{clients}"
[hosts]
names = ["c1", "c2", "c3", "c4"]

[[configs]]
name = "endpoint"
engine = "sim"
[configs.target]
url = "{origin}"

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = {OUTPUT_LEN}

[load]
concurrency = [{CONCURRENCY}]
requests = {REQUESTS}
warmup = {WARMUP}
percentiles = [50, 90, 99]
clients = {clients}
"#
    )
}

/// `a` within `rel` of `b`, or within `abs` ms (scheduling on a loaded 2-core machine).
fn close(what: &str, a: f64, b: f64, rel: f64, abs: f64) {
    assert!(
        (a - b).abs() <= (rel * b).max(abs),
        "{what}: {a:.2} against the single client's {b:.2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_split_over_one_two_and_four_clients_measures_the_same_server_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = fleetbench_testkit::free_port();
    let _sim =
        fleetbench_testkit::process::Launch::new("fleetbench-sim", dir.path().join("sim.log"))
            .name("sim")
            .args([
                "--port",
                &port.to_string(),
                "--ttft-ms",
                "40",
                "--itl-ms",
                "4",
            ])
            .spawn();
    let origin = format!("http://127.0.0.1:{port}");
    let agents = spawn_external_agents(dir.path(), &HOSTS, &origin);
    let ctl = start_local(local_config(dir.path(), &agents.iter().collect::<Vec<_>>())).await;
    let mut c = client(ctl.addr).await;

    let mut levels: Vec<(u32, LevelResult)> = Vec::new();
    for k in [1u32, 2, 4] {
        let (requests0, tokens0) = (
            metric_sum(port, "sglang:num_requests_total"),
            metric_sum(port, "sglang:generation_tokens_total"),
        );
        let id = submit_toml(&mut c, &spec(k, &origin)).await;
        let job = wait_job(&mut c, &id, Duration::from_secs(120)).await;
        assert_eq!(
            job.state,
            JobState::Succeeded as i32,
            "clients = {k}: {job:?}"
        );
        let r = c
            .get_results(GetResultsRequest {
                job_ids: vec![id],
                include_telemetry: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.levels.len(),
            1,
            "one level stored, not one per client: {r:?}"
        );
        let l = r.levels[0].result.clone().unwrap();
        // Every request once: the load generator's counts, and the server's own.
        assert_eq!(l.outcome, LevelOutcome::Ok as i32, "{l:?}");
        assert_eq!((l.sent, l.completed, l.failed), (REQUESTS, REQUESTS, 0));
        assert_eq!(l.output_tokens, REQUESTS * OUTPUT_LEN);
        let served = metric_sum(port, "sglang:num_requests_total") - requests0;
        let generated = metric_sum(port, "sglang:generation_tokens_total") - tokens0;
        // The warm-up is served too, once, and left out of the level.
        assert_eq!(
            served as u64,
            REQUESTS + WARMUP,
            "the server's request counter, clients = {k}"
        );
        assert_eq!(
            generated as u64,
            l.output_tokens + WARMUP * OUTPUT_LEN,
            "the server's token counter"
        );
        assert_eq!(l.ttft_ms.as_ref().unwrap().count, REQUESTS);
        if k > 1 {
            let cl = l.clients.as_ref().expect("a split level says how");
            assert_eq!(cl.clients.len(), k as usize);
            let hosts: std::collections::BTreeSet<_> =
                cl.clients.iter().map(|x| x.host.as_str()).collect();
            assert_eq!(
                hosts.len(),
                k as usize,
                "each share on a host of its own: {cl:?}"
            );
            assert_eq!(
                cl.clients.iter().map(|x| x.completed).sum::<u64>(),
                REQUESTS
            );
            assert_eq!(
                cl.clients
                    .iter()
                    .map(|x| x.concurrency.unwrap())
                    .sum::<u32>(),
                CONCURRENCY
            );
            // One machine: the clocks agree to within a few ms, and the clients began within
            // a scheduling delay of each other.
            for x in &cl.clients {
                assert!(x.clock_offset_ms.abs() < 50.0, "{x:?}");
            }
            assert!(cl.start_spread_ms < 250.0, "{cl:?}");
            let note = &l.prefix_cache.as_ref().unwrap().note;
            assert!(note.contains(&format!("{k} client agents")), "{note}");
        } else {
            assert!(l.clients.is_none(), "{l:?}");
        }
        println!(
            "clients={k}: {:.1} tok/s, TTFT p50 {:.1} p99 {:.1} ms, ITL p50 {:.2} p99 {:.2} ms, \
             E2E p50 {:.1} ms{}",
            l.output_tokens_per_s,
            l.ttft_ms.as_ref().unwrap().percentiles["p50"],
            l.ttft_ms.as_ref().unwrap().percentiles["p99"],
            l.itl_ms.as_ref().unwrap().percentiles["p50"],
            l.itl_ms.as_ref().unwrap().percentiles["p99"],
            l.e2e_ms.as_ref().unwrap().percentiles["p50"],
            l.clients.as_ref().map_or(String::new(), |cl| format!(
                ", clients began within {:.1} ms (clocks known to ±{:.1} ms)",
                cl.start_spread_ms, cl.clock_uncertainty_ms
            )),
        );
        levels.push((k, l));
    }
    let one = &levels[0].1;
    let p = |d: &Option<fleetbench_proto::agentpb::Distribution>, k: &str| {
        d.as_ref().unwrap().percentiles[k]
    };
    for (k, l) in &levels[1..] {
        // Percentiles within 15% (or a few ms of scheduling), throughput within 20%.
        for (what, got, want, rel, abs) in [
            (
                "TTFT p50",
                p(&l.ttft_ms, "p50"),
                p(&one.ttft_ms, "p50"),
                0.15,
                5.0,
            ),
            (
                "ITL p50",
                p(&l.itl_ms, "p50"),
                p(&one.itl_ms, "p50"),
                0.15,
                1.0,
            ),
            (
                "E2E p50",
                p(&l.e2e_ms, "p50"),
                p(&one.e2e_ms, "p50"),
                0.15,
                10.0,
            ),
            (
                "output tok/s",
                l.output_tokens_per_s,
                one.output_tokens_per_s,
                0.2,
                0.0,
            ),
        ] {
            close(&format!("clients = {k}: {what}"), got, want, rel, abs);
        }
    }
    ctl.shutdown().await;
}
