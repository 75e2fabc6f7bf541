//! The job commands against a separate controller (`--controller`, `--token`): `agents`, `run`,
//! `watch`, `jobs`. Controller and agent run in this test process on loopback ports; the CLI
//! is the real binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use fleetbench_controller::{ControllerConfig, HostConfig, metrics::Metrics};

const SPEC: &str = r#"name = "remote"
[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 5, "--itl-ms" = 4 }

[[workloads]]
name = "w"
dataset = "random"
input_len = 8
output_len = 8

[load]
concurrency = [1, 2]
requests = 6
"#;

fn fleetbench(cwd: &Path, args: &[&str], token: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleetbench"));
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("FLEETBENCH_CONTROLLER");
    match token {
        Some(t) => cmd.env("FLEETBENCH_TOKEN", t),
        None => cmd.env_remove("FLEETBENCH_TOKEN"),
    };
    cmd.output().expect("run fleetbench")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_watch_jobs_and_agents_against_a_controller_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    // The sim program sits next to the `fleetbench` binary, not next to this test executable.
    let mut agent_cfg = fleetbench_agent::AgentConfig::local(dir.path().join("agent"));
    agent_cfg
        .profiles
        .get_mut("sim")
        .expect("built-in sim profile")
        .program = Path::new(env!("CARGO_BIN_EXE_fleetbench"))
        .with_file_name("fleetbench-sim")
        .display()
        .to_string();
    let agent = fleetbench_agent::start(agent_cfg).await.unwrap();
    let mut cfg =
        ControllerConfig::local(&format!("sqlite://{}", dir.path().join("c.db").display()));
    cfg.api_token = Some("t0ken".into());
    cfg.hosts = vec![HostConfig {
        name: "gpu-a".into(),
        address: agent.addr.to_string(),
        labels: BTreeMap::from([("rack".to_string(), "r1".to_string())]),
    }];
    let ctl = fleetbench_controller::start(cfg, Metrics::new())
        .await
        .unwrap();
    let url = ctl.url();
    std::fs::write(dir.path().join("remote.toml"), SPEC).unwrap();
    let cwd = dir.path().to_path_buf();

    let out = tokio::task::spawn_blocking({
        let (cwd, url) = (cwd.clone(), url.clone());
        move || {
            // Without the token the controller refuses, and the message says what is missing.
            let denied = fleetbench(&cwd, &["jobs", "--controller", &url], None);
            // Wait until the host's first heartbeat made it ready.
            let mut agents = fleetbench(&cwd, &["agents", "--controller", &url], Some("t0ken"));
            for _ in 0..50 {
                if String::from_utf8_lossy(&agents.stdout).contains("ready") {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
                agents = fleetbench(&cwd, &["agents", "--controller", &url], Some("t0ken"));
            }
            let agents_json = fleetbench(
                &cwd,
                &["agents", "--controller", &url, "--json"],
                Some("t0ken"),
            );
            let doc: serde_json::Value = serde_json::from_slice(&agents_json.stdout)
                .unwrap_or_else(|e| panic!("agents --json: {e}: {}", text(&agents_json)));
            assert_eq!(doc[0]["name"], "gpu-a", "{doc}");
            assert_eq!(doc[0]["health"], "ready", "{doc}");
            assert_eq!(doc[0]["labels"]["rack"], "r1", "{doc}");
            let run = fleetbench(
                &cwd,
                &[
                    "run",
                    "remote.toml",
                    "--controller",
                    &url,
                    "--output",
                    "out",
                ],
                Some("t0ken"),
            );
            (denied, agents, run)
        }
    })
    .await
    .unwrap();
    let (denied, agents, run) = out;
    assert!(!denied.status.success(), "{}", text(&denied));
    assert!(text(&denied).contains("Bearer"), "{}", text(&denied));
    let a = text(&agents);
    assert!(
        a.contains("gpu-a") && a.contains("ready") && a.contains("rack=r1"),
        "{a}"
    );
    let r = text(&run);
    assert!(run.status.success(), "{r}");
    assert!(!r.contains("embedded"), "{r}");
    assert!(dir.path().join("out/report.html").exists(), "{r}");
    let job_id = r
        .lines()
        .find_map(|l| {
            l.strip_prefix("job ")?
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .expect("job id printed");

    let (watch, jobs, watch_json) = tokio::task::spawn_blocking(move || {
        (
            fleetbench(
                &cwd,
                &["watch", &job_id, "--controller", &url],
                Some("t0ken"),
            ),
            fleetbench(&cwd, &["jobs", "--controller", &url], Some("t0ken")),
            fleetbench(
                &cwd,
                &["watch", &job_id, "--controller", &url, "--json"],
                Some("t0ken"),
            ),
        )
    })
    .await
    .unwrap();
    // The same replay as JSON Lines: both levels, then the job's final state.
    assert!(watch_json.status.success(), "{}", text(&watch_json));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&watch_json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let levels: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "level")
        .map(|e| e["level"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["c=1", "c=2"], "{events:?}");
    let last = events.last().expect("events");
    assert_eq!(last["event"], "job", "{last}");
    assert_eq!(last["state"], "succeeded", "{last}");
    // Watching a finished job replays its levels and ends with its final state.
    let w = text(&watch);
    assert!(watch.status.success(), "{w}");
    assert!(
        w.contains("c=1") && w.contains("c=2") && w.contains("succeeded"),
        "{w}"
    );
    let j = text(&jobs);
    assert!(
        j.contains("remote") && j.contains("succeeded") && j.contains("2/2"),
        "{j}"
    );

    ctl.shutdown().await;
    agent.shutdown().await;
}
