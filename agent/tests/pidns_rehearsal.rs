//! The Helm chart's process model, rehearsed on this machine: the agent as an unprivileged uid
//! (10001, as in the agent images) inside its own PID namespace (`unshare --pid --fork
//! --mount-proc`, as a container without `hostPID`), with data and cache directories that start
//! root-owned 0755 (as the kubelet makes a hostPath) and are prepared by the chart's init
//! container command. It first shows the crash the issue describes (the agent cannot create
//! `data_dir/runs`), then starts an engine (the simulator), restarts it with another flag, and
//! checks who runs what: the engine as uid 10001 with HOME in the data dir, in the agent's PID
//! namespace where the agent is pid 1.
//!
//! Needs root (to create the namespace and to drop to uid 10001), as CI runs; elsewhere it says
//! so and passes only outside CI.

use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const UID: u32 = 10001;

fn chart_init_command() -> String {
    // The chart's init container, as the template writes it; the test runs the same command on
    // its own directories.
    let tpl = std::fs::read_to_string(
        fleetbench_testkit::repo_root()
            .join("deploy/helm/fleetbench/templates/agent-daemonset.yaml"),
    )
    .unwrap();
    let want = "chown {{ $.Values.agent.runAsUser }}:{{ $.Values.agent.runAsGroup }} /var/lib/fleetbench-agent /var/cache/fleetbench-agent &&\n              chmod 0750 /var/lib/fleetbench-agent /var/cache/fleetbench-agent";
    assert!(
        tpl.contains(want),
        "the chart's init container changed: update this rehearsal"
    );
    "chown 10001:10001 DATA CACHE && chmod 0750 DATA CACHE".to_string()
}

/// `fleetbench-agent --config CFG` as uid 10001 in a new PID namespace, with the chart's
/// environment (HOME and caches in the two volumes).
fn agent_in_pidns(cfg: &Path, data: &Path, cache: &Path, log: &Path) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
        .arg("setpriv")
        .args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--no-new-privs",
            "--",
        ])
        .arg(fleetbench_testkit::workspace_bin("fleetbench-agent"))
        .arg("--config")
        .arg(cfg)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", data)
        .env("XDG_CACHE_HOME", cache)
        .env("HF_HOME", cache.join("huggingface"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    c
}

fn agentctl(port: u16, args: &[&str]) -> Output {
    Command::new(fleetbench_testkit::workspace_bin("fleetbench-agentctl"))
        .arg("--agent")
        .arg(format!("http://127.0.0.1:{port}"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Host pids of processes whose command line contains all of `needles`.
fn find_procs(needles: &[&str]) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if needles.iter().all(|n| cmd.contains(n)) && !cmd.starts_with("unshare") {
            out.push(pid);
        }
    }
    out
}

/// (real uid, NSpid: the pid in each namespace from the host's down).
fn status(pid: u32) -> (u32, Vec<u32>) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| -> Vec<u32> {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect()
    };
    (field("Uid:")[0], field("NSpid:"))
}

/// `unshare` (which ignores SIGTERM while it waits) and the agent's host pid, once known.
struct Agent(Child, Option<u32>);
impl Drop for Agent {
    fn drop(&mut self) {
        // The agent stops its engine on SIGTERM and exits; unshare follows. Should unshare go
        // first, --kill-child ends the namespace's pid 1 (the agent) and with it the namespace.
        let target = self.1.unwrap_or(self.0.id());
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(target as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn agent_as_uid_10001_in_its_own_pid_namespace_starts_and_restarts_an_engine() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the PID-namespace rehearsal needs root, and CI runs as root"
        );
        eprintln!("SKIPPED: needs root (to create a PID namespace and drop to uid {UID})");
        return;
    }
    // A directory uid 10001 can traverse, like a pod's volume mount points.
    let tmp = tempfile::Builder::new()
        .prefix("fb-pidns")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (data, cache) = (tmp.path().join("data"), tmp.path().join("cache"));
    for d in [&data, &cache] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(std::fs::metadata(d).unwrap().uid(), 0, "starts root-owned");
    }
    let port = fleetbench_testkit::free_port();
    let cfg = tmp.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\ninsecure = true\ndata_dir = \"{}\"\n\
             [profiles.sim]\nkind = \"sim\"\nmodels = [\"sim-model\"]\n",
            data.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log = tmp.path().join("agent.log");

    // 1. Without the init container: the crash loop of the old DaemonSet.
    let out = agent_in_pidns(&cfg, &data, &cache, &log).output().unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        !out.status.success(),
        "the agent wrote into a root-owned 0755 dir: {said}"
    );
    assert!(
        said.contains(&data.display().to_string()),
        "the error names the data dir: {said}"
    );

    // 2. The chart's init container, then the agent as uid 10001 in its own PID namespace.
    let init = chart_init_command()
        .replace("DATA", &data.display().to_string())
        .replace("CACHE", &cache.display().to_string());
    let st = Command::new("sh").args(["-c", &init]).status().unwrap();
    assert!(st.success(), "{init}");
    let mut agent = Agent(
        agent_in_pidns(&cfg, &data, &cache, &log).spawn().unwrap(),
        None,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "agent did not listen: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // 3. Start an engine, then restart it with another flag (the agent stops the first and waits
    // until it is released, GPU memory included, before the second starts).
    let engine_port = fleetbench_testkit::free_port().to_string();
    let apply = |extra: &[&str]| {
        let mut a = vec![
            "apply",
            "--profile",
            "sim",
            "--model",
            "sim-model",
            "--port",
            &engine_port,
        ];
        a.extend_from_slice(extra);
        agentctl(port, &a)
    };
    let first = apply(&[]);
    assert!(first.status.success(), "first start: {}", text(&first));
    let first_pids = find_procs(&["fleetbench-sim", &engine_port]);
    assert_eq!(first_pids.len(), 1, "{first_pids:?}");
    let second = apply(&["--flag", "--max-running-requests=8"]);
    assert!(second.status.success(), "restart: {}", text(&second));
    let t = text(&second);
    assert!(
        t.to_lowercase().contains("stop"),
        "the old engine was stopped: {t}"
    );
    let second_pids = find_procs(&["fleetbench-sim", &engine_port, "--max-running-requests"]);
    assert_eq!(
        second_pids.len(),
        1,
        "one engine after the restart: {second_pids:?}"
    );
    assert!(
        !Path::new(&format!("/proc/{}", first_pids[0])).exists(),
        "the first engine is gone"
    );

    // 4. Who runs what: agent and engine as uid 10001, the agent as pid 1 of its namespace, the
    // engine in the same namespace under another pid than the host's.
    let agent_pids = find_procs(&["fleetbench-agent", &cfg.display().to_string()]);
    assert_eq!(agent_pids.len(), 1, "{agent_pids:?}");
    agent.1 = Some(agent_pids[0]);
    let (agent_uid, agent_ns) = status(agent_pids[0]);
    assert_eq!(agent_uid, UID);
    assert_eq!(
        agent_ns.len(),
        2,
        "the agent is in a child PID namespace: {agent_ns:?}"
    );
    assert_eq!(agent_ns[1], 1, "the agent is its namespace's pid 1");
    let (engine_uid, engine_ns) = status(second_pids[0]);
    assert_eq!(
        engine_uid, UID,
        "the engine runs as the agent's uid, never root"
    );
    assert_eq!(engine_ns.len(), 2);
    assert_ne!(engine_ns[0], engine_ns[1], "host and namespace pids differ");
    let environ = std::fs::read(format!("/proc/{}/environ", second_pids[0])).unwrap();
    let environ = String::from_utf8_lossy(&environ).replace('\0', "\n");
    assert!(
        environ.contains(&format!("HOME={}", data.display())),
        "the engine's HOME is the writable data dir"
    );

    // 5. The engine's run logs are in the prepared data dir, owned by the engine's uid.
    let runs: Vec<PathBuf> = std::fs::read_dir(data.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(runs.len() >= 2, "one log per run: {runs:?}");
    for r in &runs {
        assert_eq!(std::fs::metadata(r).unwrap().uid(), UID, "{}", r.display());
    }
    let stop = agentctl(port, &["stop"]);
    assert!(stop.status.success(), "{}", text(&stop));
    assert!(
        find_procs(&["fleetbench-sim", &engine_port]).is_empty(),
        "stopped"
    );
    drop(agent);
    assert!(
        find_procs(&["fleetbench-agent", &cfg.display().to_string()]).is_empty(),
        "the agent exits on SIGTERM, ending its namespace"
    );
}
