//! A job against an endpoint fleetbench does not own: a real `llama-server` started with
//! `--api-key`, behind a TLS-terminating proxy on loopback whose certificate only a local CA
//! vouches for. The load comes from a real agent process whose `[external]` section allows the
//! proxy's origin, the CA file and one environment variable, which holds the key. No engine is
//! started. Without the key the job is refused by the server (401 in the level); with the key
//! by reference it is measured; a reference the agent does not allow is refused by name; and
//! neither the controller's store, its events nor either log ever holds the key.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::{
    GetResultsRequest, JobState, WatchJobRequest, controller_client::ControllerClient,
};
use fleetbench_testkit::servers::{LlamaServer, start_tls_proxy};

const KEY: &str = "sk-fleetbench-external-7f3a9c";
const KEY_VAR: &str = "FLEETBENCH_TEST_GATEWAY_KEY";
const REQUESTS: u64 = 4;
const OUTPUT_LEN: u64 = 8;

fn spec(name: &str, url: &str, ca: &str, extra: &str) -> String {
    format!(
        r#"name = "{name}"
[hosts]
names = ["driver"]

[[configs]]
name = "gateway"
engine = "llamacpp"
[configs.target]
url = "{url}"
ca_cert = "{ca}"
headers = {{ "X-Tenant" = "bench" }}
{extra}

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = {OUTPUT_LEN}
model = "m"

[load]
concurrency = [1, 2]
requests = {REQUESTS}
"#
    )
}

/// Every event of a finished job, as the API replays it, in debug form.
async fn events(c: &mut ControllerClient<tonic::transport::Channel>, id: &str) -> String {
    let mut s = c
        .watch_job(WatchJobRequest { job_id: id.into() })
        .await
        .unwrap()
        .into_inner();
    let mut out = String::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(5), s.message())
        .await
        .unwrap_or(Ok(None))
    {
        out.push_str(&format!("{ev:?}\n"));
    }
    out
}

/// Whether `needle` occurs in any file under `dir` (the SQLite store with its WAL, logs).
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                hits.push(p.display().to_string());
            }
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_target_is_refused_without_the_key_and_measured_with_it_by_reference() {
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(
        &["--api-key", KEY, "--metrics"],
        Some(&dir.path().join("llama.log")),
    );
    let certs = fleetbench_support::tls::generate_dev_certs(&dir.path().join("pki"), &[], false)
        .expect("certificates");
    let tls_port = start_tls_proxy(&certs.agent_cert, &certs.agent_key, llama.port);
    let url = format!("https://127.0.0.1:{tls_port}");
    let ca = certs.ca_cert.display().to_string();

    let agent_toml = format!(
        "name = \"driver\"\nlisten = \"127.0.0.1:0\"\ninsecure = true\ndata_dir = \"{}\"\n\
         [external]\norigins = [\"{url}\", \"http://127.0.0.1:{}\"]\n\
         secret_env = [\"{KEY_VAR}\"]\nca_files = [\"{ca}\"]\n",
        dir.path().join("driver").display(),
        llama.port,
    );
    let agent = fleetbench_testkit::process::agent(dir.path(), "driver", &agent_toml)
        .env(KEY_VAR, KEY)
        .spawn();
    let ctl = start_local(local_config(dir.path(), &[&agent])).await;
    let mut c = client(ctl.addr).await;
    let metrics = format!("metrics = [\"http://127.0.0.1:{}/metrics\"]", llama.port);

    // No key: the server refuses every request, and the level says so.
    let id = submit_toml(&mut c, &spec("no-key", &url, &ca, "")).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(120)).await;
    let r = c
        .get_results(GetResultsRequest {
            job_ids: vec![id.clone()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.levels.is_empty(), "{job:?} {r:#?}");
    for l in &r.levels {
        let res = l.result.as_ref().unwrap();
        assert_eq!(res.outcome, LevelOutcome::Failed as i32, "{res:?}");
        assert_eq!(
            res.failures_by_kind.get("http_401"),
            Some(&REQUESTS),
            "{res:?}"
        );
        assert!(res.error.contains("http_401"), "{}", res.error);
    }

    // A reference the agent does not allow: refused by the agent, naming the field; nothing runs.
    let id = submit_toml(
        &mut c,
        &spec("not-allowed", &url, &ca, "api_key = \"env:HOME\""),
    )
    .await;
    let job = wait_job(&mut c, &id, Duration::from_secs(60)).await;
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    let ev = events(&mut c, &id).await;
    assert!(
        ev.contains("target.api_key") && ev.contains("env:HOME is not allowed"),
        "{ev}"
    );

    // The key by reference, resolved on the agent: measured, with the engine's own metrics.
    let with_key = format!("api_key = \"env:{KEY_VAR}\"\n{metrics}");
    let id = submit_toml(&mut c, &spec("with-key", &url, &ca, &with_key)).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(180)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    let r = c
        .get_results(GetResultsRequest {
            job_ids: vec![id.clone()],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.levels.len(), 2, "{r:#?}");
    for l in &r.levels {
        let res = l.result.as_ref().unwrap();
        assert_eq!(res.outcome, LevelOutcome::Ok as i32, "{res:?}");
        assert_eq!((res.completed, res.failed), (REQUESTS, 0), "{res:?}");
        assert_eq!(res.output_tokens, REQUESTS * OUTPUT_LEN, "{res:?}");
        let cache = res
            .prefix_cache
            .as_ref()
            .expect("a cache figure or its reason");
        assert!(cache.prompt_tokens_sent > 0, "{cache:?}");
        println!(
            "level {}: {:.1} output tok/s, ttft p50 {:.1} ms; engine cache: {:?} {:?} ({})",
            res.level_index,
            res.output_tokens_per_s,
            res.ttft_ms.as_ref().unwrap().percentiles["p50"],
            cache.source,
            cache.prompt_tokens_engine,
            cache.note
        );
    }
    // No engine was started for it: the run has no argv.
    assert!(r.runs.iter().all(|run| run.argv.is_empty()), "{:?}", r.runs);

    // The key is nowhere the controller keeps or says anything: store, events, logs.
    let ev = events(&mut c, &id).await;
    assert!(ev.contains(&format!("env:{KEY_VAR}")) || !ev.is_empty());
    assert!(!ev.contains(KEY), "an event holds the key");
    ctl.shutdown().await;
    drop(agent);
    let holding: Vec<String> = files_holding(dir.path(), KEY.as_bytes())
        .into_iter()
        .filter(|p| !p.ends_with("llama.log"))
        .collect();
    assert!(holding.is_empty(), "files holding the key: {holding:?}");
    let db = std::fs::read(dir.path().join("controller.db")).unwrap();
    assert!(
        db.windows(KEY_VAR.len()).any(|w| w == KEY_VAR.as_bytes()),
        "the store keeps the reference (the spec), so the check above looked in the right file"
    );
}

/// One endpoint, two hosts, two configs (two tenants of one gateway) and two repeats: four
/// trials placed on both hosts at once, run one at a time against the endpoint (no two runs
/// overlap), so no trial measures another's load as the server's. The endpoint is a
/// `fleetbench-sim` process (the test is about the scheduling, not the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trials_against_one_endpoint_run_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let sim_port = fleetbench_testkit::free_port();
    let _sim =
        fleetbench_testkit::process::Launch::new("fleetbench-sim", dir.path().join("sim.log"))
            .name("sim")
            .args([
                "--port",
                &sim_port.to_string(),
                "--ttft-ms",
                "20",
                "--itl-ms",
                "5",
            ])
            .spawn();
    let origin = format!("http://127.0.0.1:{sim_port}");
    let agents = spawn_external_agents(dir.path(), &["e1", "e2"], &origin);
    let ctl = start_local(local_config(dir.path(), &agents.iter().collect::<Vec<_>>())).await;
    let mut c = client(ctl.addr).await;
    let spec = format!(
        r#"name = "one-endpoint"
repeats = 2
order = "interleaved"

[hosts]
names = ["e1", "e2"]

[[configs]]
name = "tenant-a"
engine = "sim"
[configs.target]
url = "{origin}/"
headers = {{ "X-Tenant" = "a" }}

[[configs]]
name = "tenant-b"
engine = "sim"
[configs.target]
url = "{origin}"
headers = {{ "X-Tenant" = "b" }}

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 4]
requests = 8
"#
    );
    let id = submit_toml(&mut c, &spec).await;
    let job = wait_job(&mut c, &id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    let r = c
        .get_results(GetResultsRequest {
            job_ids: vec![id],
            include_telemetry: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.levels.len(), 8, "{:?}", r.levels);
    let mut runs = r.runs.clone();
    assert_eq!(runs.len(), 4, "{runs:?}");
    let hosts: std::collections::BTreeSet<_> = runs.iter().map(|r| r.host.clone()).collect();
    assert_eq!(hosts.len(), 2, "trials were placed on both hosts: {runs:?}");
    runs.sort_by_key(|r| r.started_unix_ms);
    for w in runs.windows(2) {
        assert!(
            w[0].finished_unix_ms <= w[1].started_unix_ms,
            "two runs loaded the endpoint at once: {} on {} [{}, {}] and {} on {} from {}",
            w[0].config_name,
            w[0].host,
            w[0].started_unix_ms,
            w[0].finished_unix_ms,
            w[1].config_name,
            w[1].host,
            w[1].started_unix_ms
        );
    }
    ctl.shutdown().await;
}
