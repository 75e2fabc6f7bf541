//! A stopped engine leaves no process behind, including workers that left its process group
//! (the SGLang scheduler / vLLM worker pitfall): a `generic` engine that forks one worker in its
//! group and one in its own session that ignores SIGTERM.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb;

const FAKE_ENGINE: &str = r#"
import http.server, os, signal, subprocess, sys
port, pidfile = int(sys.argv[1]), sys.argv[2]
inner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
detached = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"],
    start_new_session=True)
with open(pidfile, "w") as f:
    f.write(f"{os.getpid()} {inner.pid} {detached.pid}\n")
sick = False
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global sick
        if self.path == "/sick":
            sick = True
        self.send_response(503 if sick and self.path == "/health" else 200)
        self.end_headers()
        self.wfile.write(b"ok")
        if self.path == "/crash":
            self.wfile.flush()
            print("fake engine: exiting on request", flush=True)
            os._exit(3)
    def log_message(self, *a):
        pass
print("fake engine serving on", port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

fn profile(dir: &std::path::Path) -> String {
    let script = write(&dir.join("fake_engine.py"), FAKE_ENGINE);
    format!(
        "[profiles.fake]\nkind = \"generic\"\nprogram = {:?}\nargs = [{:?}, \"{{port}}\", {:?}]\nhealth_path = \"/health\"\nmetrics_path = \"\"\ngrace_s = 1\nstart_timeout_s = 60\nrun_as_root = true\nport = {}\n",
        venv_python(),
        script,
        dir.join("pids"),
        fleetbench_testkit::free_port(),
    )
}

fn read_pids(dir: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_shutdown_leave_no_process_behind() {
    let work = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(&profile(work.path())).unwrap();
    let mut c = agent.client().await.unwrap();

    // StopEngine.
    let ev = apply(&mut c, spec("fake", "", 0, &[]), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    let pids = read_pids(work.path());
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|p| alive(*p)));
    let st = c
        .stop_engine(agentpb::StopEngineRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
    for p in &pids {
        assert!(!alive(*p), "pid {p} survived StopEngine");
    }
    assert!(group_members(pids[0]).is_empty());

    // Agent shutdown (SIGTERM) stops the engine too.
    std::fs::remove_file(work.path().join("pids")).unwrap();
    let ev = apply(&mut c, spec("fake", "", 0, &[]), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(ready(&ev).is_some(), "{ev:?}");
    let pids = read_pids(work.path());
    assert!(
        agent.terminate(Duration::from_secs(30)),
        "agent did not exit on SIGTERM"
    );
    for p in &pids {
        assert!(!alive(*p), "pid {p} survived the agent's shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_dies_is_classified_and_its_workers_are_stopped() {
    let work = tempfile::tempdir().unwrap();
    let agent = Agent::start(&profile(work.path())).unwrap();
    let mut c = agent.client().await.unwrap();
    let ev = apply(&mut c, spec("fake", "", 0, &[]), Duration::from_secs(60))
        .await
        .unwrap();
    let r = ready(&ev).expect("ready").clone();
    let pids = read_pids(work.path());
    // Let a health check record the tree, then make the main process exit.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let url = format!("{}/crash", r.base_url);
    let http = fleetbench_agent::http::HttpClient::new();
    let _ = http.get(&url, Duration::from_secs(2), 1024).await;

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut failed = false;
    while !failed && std::time::Instant::now() < deadline {
        let st = c
            .get_engine(agentpb::GetEngineRequest {})
            .await
            .unwrap()
            .into_inner();
        failed = st.state == agentpb::EngineState::Failed as i32;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(failed, "engine death not reported\n{}", agent.log_text());
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    let crash = st.last_crash.expect("crash recorded");
    assert_eq!(
        crash.class,
        agentpb::CrashClass::ExitCode as i32,
        "{crash:?}"
    );
    assert_eq!(crash.exit_code, Some(3));
    assert!(
        crash
            .log_tail
            .iter()
            .any(|l| l.contains("exiting on request")),
        "{:?}",
        crash.log_tail
    );
    assert!(
        eventually(Duration::from_secs(10), || pids.iter().all(|p| !alive(*p))).await,
        "workers of the dead engine survived: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_turns_unhealthy_is_classified_and_stopped() {
    let work = tempfile::tempdir().unwrap();
    let agent = Agent::start(&profile(work.path())).unwrap();
    let mut c = agent.client().await.unwrap();
    let ev = apply(&mut c, spec("fake", "", 0, &[]), Duration::from_secs(60))
        .await
        .unwrap();
    let r = ready(&ev).expect("ready").clone();
    let pids = read_pids(work.path());
    let http = fleetbench_agent::http::HttpClient::new();
    http.get(
        &format!("{}/sick", r.base_url),
        Duration::from_secs(2),
        1024,
    )
    .await
    .unwrap();

    // Three failed health checks two seconds apart, then the verdict.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    while st.state != agentpb::EngineState::Failed as i32 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        st = c
            .get_engine(agentpb::GetEngineRequest {})
            .await
            .unwrap()
            .into_inner();
    }
    let crash = st
        .last_crash
        .clone()
        .unwrap_or_else(|| panic!("not failed: {st:?}\n{}", agent.log_text()));
    assert_eq!(
        crash.class,
        agentpb::CrashClass::Unhealthy as i32,
        "{crash:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || pids.iter().all(|p| !alive(*p))).await,
        "the unhealthy engine was not stopped"
    );
}

/// An engine whose worker, in the engine's group, ignores SIGTERM: what a SIGKILLed agent's
/// kernel-sent SIGTERM (PR_SET_PDEATHSIG) leaves behind.
const STUBBORN_ENGINE: &str = r#"
import http.server, os, subprocess, sys
port, pidfile = int(sys.argv[1]), sys.argv[2]
worker = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"])
with open(pidfile, "w") as f:
    f.write(f"{os.getpid()} {worker.pid}\n")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_agent_stops_what_a_killed_agents_engine_left() {
    let work = tempfile::tempdir().unwrap();
    let script = write(&work.path().join("stubborn.py"), STUBBORN_ENGINE);
    let profile = format!(
        "[profiles.stubborn]\nkind = \"generic\"\nprogram = {:?}\nargs = [{:?}, \"{{port}}\", {:?}]\nhealth_path = \"/health\"\nmetrics_path = \"\"\ngrace_s = 1\nstart_timeout_s = 60\nrun_as_root = true\nport = {}\n",
        venv_python(),
        script,
        work.path().join("pids"),
        fleetbench_testkit::free_port(),
    );
    let mut agent = Agent::start(&profile).unwrap();
    let mut c = agent.client().await.unwrap();
    let ev = apply(
        &mut c,
        spec("stubborn", "", 0, &[]),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert!(ready(&ev).is_some(), "{ev:?}\n{}", agent.log_text());
    let pids = read_pids(work.path());
    let (leader, worker) = (pids[0], pids[1]);

    // SIGKILL: the agent runs no code. The kernel's SIGTERM ends the engine's own process; its
    // worker ignores it and stays.
    agent.process.kill();
    assert!(
        eventually(Duration::from_secs(20), || !alive(leader)).await,
        "the engine outlived its agent: PR_SET_PDEATHSIG did not fire"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        alive(worker),
        "the test needs a worker that outlives the agent"
    );

    // The next agent on the same data directory stops it before it serves.
    agent.relaunch();
    assert!(
        !alive(worker),
        "pid {worker} survived the next agent's start"
    );
    // (It ignores SIGTERM: only the SIGKILL after the grace period could end it.)
    let log = agent.log_text();
    assert!(
        log.contains("stopped the engine a previous agent left running"),
        "{log}"
    );
    let mut c = agent.client().await.unwrap();
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
}
