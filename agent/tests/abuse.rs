//! An attacker with one valid credential (the controller's certificate) against a real agent
//! on loopback: every way issue 13 found to turn the agent into a shell, and issue 22's
//! in-range requests whose product would exhaust it, are refused with a message that names what
//! was refused, and nothing is started.

mod abuse_bounds;
mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::{self, agent_client::AgentClient};
use tonic::transport::Channel;

/// Profiles of real engine kinds whose programs exist on any host (`/bin/true`): were a check
/// to let a request through, the "engine" would start and the state would show it.
const PROFILES: &str = r#"
[profiles.sg]
kind = "sglang"
program = "/bin/true"
models = ["Qwen/Qwen3-8B"]
args = ["--model-path", "{model}", "--port", "{port}", "--tp-size", "8"]

[profiles.vl]
kind = "vllm"
program = "/bin/true"
models = ["Qwen/Qwen3-8B"]
allow_flags = ["--speculative-config"]
"#;

async fn refused(
    c: &mut AgentClient<Channel>,
    profile: &str,
    model: &str,
    flags: &[(&str, Option<&str>)],
    env: &[(&str, &str)],
) -> tonic::Status {
    let port = fleetbench_testkit::free_port();
    let mut s = spec(profile, model, port, flags);
    s.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match c
        .apply_engine(agentpb::ApplyEngineRequest {
            spec: Some(s),
            run_id: String::new(),
            ..Default::default()
        })
        .await
    {
        Ok(_) => panic!("{profile} {model} {flags:?} {env:?} was accepted"),
        Err(s) => {
            assert_eq!(s.code(), tonic::Code::InvalidArgument, "{}", s.message());
            s
        }
    }
}

/// Idle, no engine pid, no run log, no child of the agent.
async fn nothing_started(agent: &Agent, c: &mut AgentClient<Channel>) {
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32, "{st:?}");
    assert_eq!(st.pid, 0);
    let runs = std::fs::read_dir(agent.data_dir().join("runs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(runs, 0, "a run log was written");
    assert!(
        processes().iter().all(|p| p.2 != agent.pid() as i32),
        "the agent has a child"
    );
}

fn says(s: &tonic::Status, words: &[&str]) {
    for w in words {
        assert!(s.message().contains(w), "{w:?} not in {:?}", s.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_remote_code_and_an_unlisted_model_are_refused() {
    let agent = Agent::start(PROFILES).unwrap();
    let mut c = agent.client().await.unwrap();
    // The attack of the issue: a remote repository, remote code, and a file-writing variable.
    let s = refused(
        &mut c,
        "sg",
        "attacker/evil-repo",
        &[("--trust-remote-code", None)],
        &[("NCCL_DEBUG_FILE", "/tmp/x")],
    )
    .await;
    says(
        &s,
        &[
            "attacker/evil-repo",
            "not allowed by profile \"sg\"",
            "Qwen/Qwen3-8B",
        ],
    );
    // An allowed model does not make the switch acceptable, under any spelling.
    for flag in ["--trust-remote-code", "--trust-remote", "--trust"] {
        let s = refused(&mut c, "sg", "Qwen/Qwen3-8B", &[(flag, None)], &[]).await;
        says(&s, &[flag, "can load code or files", "allow_flags"]);
    }
    // The built-in profiles allow no model at all.
    let s = refused(&mut c, "sglang", "Qwen/Qwen3-8B", &[], &[]).await;
    says(&s, &["none: list models or model_roots"]);
    nothing_started(&agent, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_flag_smuggling_is_refused() {
    let agent = Agent::start(PROFILES).unwrap();
    let mut c = agent.client().await.unwrap();
    let m = "Qwen/Qwen3-8B";
    // A key that loads a draft model from anywhere.
    let s = refused(
        &mut c,
        "vl",
        m,
        &[(
            "--speculative-config",
            Some(r#"{"method": "eagle", "model": "attacker/evil-repo"}"#),
        )],
        &[],
    )
    .await;
    says(
        &s,
        &["--speculative-config", r#"key "model" is not allowed"#],
    );
    // Not an object; a nested object; a value out of range.
    for (v, word) in [
        (r#""{\"model\": 1}""#, "a JSON object"),
        (r#"{"method": {"class": "evil.Module"}}"#, "key \"method\""),
        (
            r#"{"num_speculative_tokens": 4000000000}"#,
            "between 1 and 64",
        ),
    ] {
        let s = refused(&mut c, "vl", m, &[("--speculative-config", Some(v))], &[]).await;
        says(&s, &[word]);
    }
    // JSON flags the profile does not name stay off, also through `=` and aliases.
    for (flag, value) in [
        ("--hf-overrides", Some("{}")),
        ("--compilation-config={}", None),
        ("-O", Some("{}")),
    ] {
        let s = refused(&mut c, "vl", m, &[(flag, value)], &[]).await;
        says(&s, &["can load code or files"]);
    }
    nothing_started(&agent, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_outside_the_allowlist_is_refused() {
    let agent = Agent::start(PROFILES).unwrap();
    let mut c = agent.client().await.unwrap();
    let m = "Qwen/Qwen3-8B";
    for (k, v, words) in [
        (
            "NCCL_DEBUG_FILE",
            "/tmp/nccl.%h",
            &["NCCL_DEBUG_FILE", "not allowed"][..],
        ),
        (
            "LD_PRELOAD",
            "/tmp/x.so",
            &["LD_PRELOAD", "not allowed"][..],
        ),
        (
            "TORCH_EXTENSIONS_DIR",
            "/tmp",
            &["TORCH_EXTENSIONS_DIR"][..],
        ),
        ("PYTHONPATH", "/tmp", &["PYTHONPATH"][..]),
        (
            "NCCL_DEBUG",
            "INFO;touch /tmp/x",
            &["NCCL_DEBUG", "one of VERSION, WARN, INFO"][..],
        ),
        ("NCCL_DEBUG_SUBSYS", "../../etc", &["no paths"][..]),
    ] {
        let s = refused(&mut c, "sg", m, &[], &[(k, v)]).await;
        says(&s, words);
    }
    nothing_started(&agent, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_cannot_override_a_pinned_argument() {
    let agent = Agent::start(PROFILES).unwrap();
    let mut c = agent.client().await.unwrap();
    let m = "Qwen/Qwen3-8B";
    for (flag, value) in [
        ("--tp-size", Some("1")),
        ("--tensor-parallel-size", Some("1")),
        ("--tensor-parallel-size=1", None),
        ("--tensor-par", Some("1")),
        ("--tp", Some("1")),
        ("--port", Some("1")),
    ] {
        let s = refused(&mut c, "sg", m, &[(flag, value)], &[]).await;
        says(
            &s,
            &[
                flag.split('=').next().unwrap(),
                "set by the agent from the profile",
            ],
        );
    }
    // Repeats under two spellings.
    let s = refused(
        &mut c,
        "vl",
        m,
        &[("--max-num-seqs", Some("8")), ("--max-num-seqs=9", None)],
        &[],
    )
    .await;
    says(&s, &["more than once"]);
    nothing_started(&agent, &mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_path_outside_the_roots_is_refused() {
    let agent = Agent::start("").unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();
    let events = apply_sim(&mut c, port, &[]).await;
    assert!(ready(&events).is_some(), "{events:?}");
    let outside = tempfile::NamedTempFile::new().unwrap();
    let inside = agent.dir.path().join("in.jsonl");
    std::fs::write(&inside, "\"hi\"\n").unwrap();
    let dotdot = format!("{}/../../etc/passwd", agent.dir.path().display());
    for (dataset, words) in [
        (
            agentpb::workload::Dataset::Sharegpt(agentpb::ShareGptDataset {
                path: "/etc/shadow".into(),
                output_len: 0,
            }),
            &["workload.sharegpt.path", "outside the dataset roots"][..],
        ),
        (
            agentpb::workload::Dataset::Jsonl(agentpb::JsonlDataset {
                path: outside.path().display().to_string(),
                output_len: 4,
            }),
            &["workload.jsonl.path", "outside the dataset roots"][..],
        ),
        (
            agentpb::workload::Dataset::Trace(agentpb::TraceDataset {
                path: dotdot,
                ..Default::default()
            }),
            &["workload.trace.path", "'..'"][..],
        ),
        (
            agentpb::workload::Dataset::Jsonl(agentpb::JsonlDataset {
                path: "in.jsonl".into(),
                output_len: 4,
            }),
            &["not an absolute path"][..],
        ),
    ] {
        let mut w = random_workload(8, 4);
        w.dataset = Some(dataset);
        let req = agentpb::RunBenchmarkRequest {
            workload: Some(w),
            levels: vec![closed(1)],
            bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(2)),
            run_id: "abuse".into(),
            ..Default::default()
        };
        let s = match c.run_benchmark(req).await {
            Ok(_) => panic!("accepted"),
            Err(s) => s,
        };
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{}", s.message());
        says(&s, words);
    }
    // Nothing was sent to the engine: its own request counter is still zero.
    let requests_served = |text: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with("sglang:num_requests_total{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .expect("the simulator counts requests")
    };
    assert_eq!(requests_served(&reqwest_like_get(port).await), 0.0);
    // A file under the root is read.
    let mut w = random_workload(8, 4);
    w.dataset = Some(agentpb::workload::Dataset::Jsonl(agentpb::JsonlDataset {
        path: inside.display().to_string(),
        output_len: 4,
    }));
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(w),
        levels: vec![closed(1)],
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(2)),
        run_id: "inside".into(),
        ..Default::default()
    };
    let (_, levels) = bench(&mut c, req, Duration::from_secs(60)).await.unwrap();
    assert_eq!(levels.len(), 1);
    assert_eq!(levels[0].completed, 2, "{:?}", levels[0]);
    assert!(requests_served(&reqwest_like_get(port).await) >= 2.0);
}

/// The engine's `/metrics` text (plain HTTP on loopback).
async fn reqwest_like_get(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_agent_certificate_cannot_call_an_agent() {
    use tonic::transport::Endpoint;
    let agent = Agent::start(PROFILES).unwrap();
    let certs = &agent.certs;
    // Every certificate the CA signed that is not the controller's: another agent's (the shared
    // agent certificate, as a compromised engine container would hold), an operator's, a
    // viewer's. Each passes the TLS handshake and is refused by identity.
    for (cert, key, who) in [
        (
            &certs.agent_cert,
            &certs.agent_key,
            "fleetbench-agent (role agent)",
        ),
        (&certs.operator.cert, &certs.operator.key, "(role operator)"),
        (&certs.viewer.cert, &certs.viewer.key, "(role viewer)"),
    ] {
        let tls =
            fleetbench_support::tls::client_tls(&certs.ca_cert, cert, key, "localhost").unwrap();
        let ch = Endpoint::from_shared(format!("https://{}", agent.addr))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut foreign = AgentClient::new(ch);
        let s = foreign
            .apply_engine(agentpb::ApplyEngineRequest {
                spec: Some(spec(
                    "sim",
                    "sim-model",
                    fleetbench_testkit::free_port(),
                    &[],
                )),
                run_id: String::new(),
                lease_epoch: 0,
            })
            .await
            .err()
            .unwrap_or_else(|| panic!("{who} was answered"));
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{}", s.message());
        says(
            &s,
            &[who, "may not call this agent", "fleetbench-controller"],
        );
        let s = foreign
            .get_host(agentpb::GetHostRequest {})
            .await
            .unwrap_err();
        assert_eq!(s.code(), tonic::Code::PermissionDenied);
    }
    let mut c = agent.client().await.unwrap();
    nothing_started(&agent, &mut c).await;
}

/// Issue 22: a pool the level budget allows but that is large (2,000 prompts of 128 Ki
/// tokens, 4 GiB as the budget counts it) is not built up front: the level starts at once and
/// the agent's peak memory stays far below the pool's size (each prompt is made from the seed
/// and its index when its request goes out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_budget_pool_of_long_prompts_is_not_built_up_front() {
    use agentpb::benchmark_event::Event as B;
    let agent = Agent::start("").unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();
    let events = apply_sim(&mut c, port, &[]).await;
    assert!(ready(&events).is_some(), "{events:?}");
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(random_workload(131_072, 1)),
        levels: vec![closed(4)],
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(2_000)),
        run_id: "abuse-pool".into(),
        ..Default::default()
    };
    let mut stream = c.run_benchmark(req).await.unwrap().into_inner();
    let first = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(e) = tokio_stream::StreamExt::next(&mut stream).await {
            if let Some(B::Progress(p)) = e.unwrap().event {
                return p;
            }
        }
        panic!("the benchmark ended without progress")
    })
    .await
    .expect("no level progress within 60 s: the prompts were being built up front");
    let hwm_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", agent.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    eprintln!(
        "first progress {first:?}; agent peak memory {} MiB",
        hwm_kib >> 10
    );
    assert!(
        hwm_kib < 1 << 20,
        "the agent's peak memory was {} MiB for a pool counted at 4 GiB",
        hwm_kib >> 10
    );
    drop(stream);
    c.stop_engine(agentpb::StopEngineRequest { lease_epoch: 0 })
        .await
        .unwrap();
}
