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
