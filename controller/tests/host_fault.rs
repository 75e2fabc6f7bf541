//! Issue 22: an agent whose data directory is read-only once granted leases it could not save
//! and reported the engine it could not log as the config's crash. Now it refuses the lease as
//! a host fault naming its epoch file; the controller takes that as the host's fault, runs the
//! trial on another host, and charges nothing to the config. Real agents and controller; the
//! read-only directory is a bind mount in the agent's own mount namespace (root, as CI runs).

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use fleetbench_controller::store::Store;
use fleetbench_proto::controllerpb::{JobState, RunState, job_event};
use fleetbench_testkit::process;

/// Agent `name` whose data directory `dir/name` is mounted read-only once its config is
/// written and its `runs/` made (as a host whose disk went read-only after setup).
fn read_only_agent(dir: &Path, name: &str) -> Proc {
    let data = dir.join(name);
    std::fs::create_dir_all(data.join("runs")).unwrap();
    std::fs::write(data.join("lease.epoch"), "41\n").unwrap();
    let toml = process::sim_agent_config(
        name,
        &data,
        fleetbench_testkit::free_port(),
        "insecure = true",
    );
    let d = data.display().to_string();
    process::agent(dir, name, &toml)
        .through(&[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-ec",
            "mount --bind \"$0\" \"$0\"\nmount -o remount,bind,ro \"$0\"\nexec \"$@\"",
            &d,
        ])
        .spawn()
}

/// Whether this test runs as root (its effective uid, from `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_host_refuses_the_lease_and_its_trial_runs_elsewhere() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "a read-only data directory needs a mount namespace (root), and CI runs as root"
        );
        eprintln!("SKIPPED: not root, so no mount namespace for a read-only data directory");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ro = read_only_agent(dir.path(), "ro");
    let ok = spawn_agent(dir.path(), "ok", fleetbench_testkit::free_port());
    let cfg = controller_config(dir.path(), "127.0.0.1:0", &[&ro, &ok]);
    let ctl = spawn_controller(&cfg, &dir.path().join("controller.log"));
    let mut client = client(ctl.addr).await;
    // 2 configs x 2 repeats in two blocks (one per repeat): each host gets a block at once.
    let job_id = submit_trials(&mut client, sim_spec("ro", 2, &["ro", "ok"]), "ro.toml", 4).await;
    let mut events = watch(&mut client, &job_id).await;
    let epoch_file = dir.path().join("ro/lease.epoch").display().to_string();
    // Every message of the job, until its event stream ends with the job.
    let mut messages = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(120), events.message())
        .await
        .expect("job events keep coming")
        .unwrap()
    {
        if let Some(job_event::Event::Message(m)) = ev.event {
            messages.push(m);
        }
    }
    let refusal = messages
        .iter()
        .find(|m| m.contains("lost host ro"))
        .unwrap_or_else(|| panic!("no trial lost host ro: {messages:#?}"))
        .clone();
    drop(events);
    eprintln!("{refusal}");
    assert!(
        refusal.contains("host fault: cannot save lease epoch 42")
            && refusal.contains(&epoch_file)
            && refusal.contains("Read-only file system")
            && refusal.contains("retrying on another host"),
        "{refusal}"
    );

    let job = wait_job(&mut client, &job_id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.trials_done, job.levels_done), (4, 16));
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    // Every level was measured on the healthy host; nothing ran or was charged on the other.
    let levels = store.levels(&job_id).await.unwrap();
    assert!(levels.iter().all(|l| l.host == "ok"), "{levels:#?}");
    let runs = store.runs(&job_id).await.unwrap();
    assert!(
        runs.iter()
            .all(|r| r.host == "ok" && r.state == RunState::Done as i32),
        "{runs:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ro/lease.epoch")).unwrap(),
        "41\n"
    );
}

/// The pid of the simulated engine an agent runs on `port` (its command line names the port).
fn sim_engine_on(port: u16) -> Option<i32> {
    let port = port.to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let is_sim = args.first().is_some_and(|a| a.ends_with(b"fleetbench-sim"));
        (is_sim && args.contains(&port.as_bytes())).then_some(pid)
    })
}

/// Issue 22: an engine SIGKILLed from outside (an operator, another program) was charged to the
/// config as its crash and decided the verdict. Now the agent tells that kill from its own stops
/// and from the kernel's OOM killer and says `killed_externally`; the controller stores nothing
/// of the interrupted level, keeps the config's record clean, and runs the trial again, which
/// skips the level already stored. One host: the trial runs again there (nothing else could).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_killed_from_outside_mid_level_decides_nothing_and_its_trial_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let port = fleetbench_testkit::free_port();
    let agent = spawn_agent(dir.path(), "h1", port);
    let cfg = controller_config(dir.path(), "127.0.0.1:0", &[&agent]);
    let ctl = spawn_controller(&cfg, &dir.path().join("controller.log"));
    let mut client = client(ctl.addr).await;
    // Two levels of 3 s each: the kill lands in the second, after the first is stored.
    let spec = r#"name = "outside"

[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 20, "--itl-ms" = 10 }

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2]
duration = "3s"
"#;
    let job_id = submit_trials(&mut client, spec.to_string(), "outside.toml", 1).await;
    let mut events = watch(&mut client, &job_id).await;
    let mut messages = Vec::new();
    let mut killed = None;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(120), events.message())
        .await
        .expect("job events keep coming")
        .unwrap()
    {
        match ev.event {
            Some(job_event::Event::Level(_)) if killed.is_none() => {
                // The first level is stored and the second has begun: kill its engine.
                tokio::time::sleep(Duration::from_millis(800)).await;
                let pid = sim_engine_on(port).expect("the engine of the running level");
                let st = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .unwrap();
                assert!(st.success());
                killed = Some(pid);
            }
            Some(job_event::Event::Message(m)) => messages.push(m),
            _ => {}
        }
    }
    assert!(
        killed.is_some(),
        "no level was stored before the end: {messages:#?}"
    );
    let note = messages
        .iter()
        .find(|m| m.contains("interrupted on host h1"))
        .unwrap_or_else(|| panic!("the trial was not interrupted: {messages:#?}"));
    eprintln!("{note}");
    assert!(
        note.contains("killed_externally") && note.contains("re-running the trial"),
        "{note}"
    );

    let job = wait_job(&mut client, &job_id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    // Both levels stored once, neither crashed: the first from the first attempt, the second
    // measured again by the second.
    let levels = store.levels(&job_id).await.unwrap();
    let outcomes: Vec<(u32, u32, i32)> = levels
        .iter()
        .map(|l| {
            let r = l.result.as_ref().unwrap();
            (r.level_index, l.attempt, r.outcome)
        })
        .collect();
    let done = fleetbench_proto::agentpb::LevelOutcome::Ok as i32;
    assert_eq!(outcomes, [(0, 1, done), (1, 2, done)], "{levels:#?}");
    // The first run carries the kill, named as such; nothing is charged to the config.
    let runs = store.runs(&job_id).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let crash = runs[0].crash.as_ref().expect("the first run's end");
    assert_eq!(
        crash.class(),
        fleetbench_proto::agentpb::CrashClass::KilledExternally,
        "{crash:?}"
    );
    assert!(crash.summary.contains("SIGKILL"), "{}", crash.summary);
    assert_eq!(runs[1].state, RunState::Done as i32, "{runs:#?}");
    assert!(runs[1].crash.is_none(), "{runs:#?}");
    drop(agent);
}
