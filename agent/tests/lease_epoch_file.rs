//! `<data_dir>/lease.epoch` fails closed, on a real agent process: epochs strictly increase
//! across restarts (a SIGKILL included); a corrupt or unreadable file stops the agent at start
//! with a message naming the file; a read-only or full data directory refuses every lease (an
//! epoch that could not be saved is never granted) and reports an engine start as the host's
//! fault naming the path, not as the config's crash.
//!
//! The read-only and full directories are real: a read-only bind mount and a 64 KiB tmpfs in a
//! mount namespace of the agent's own (`unshare --mount`), which needs root, as CI runs.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::{
    self, AcquireLeaseRequest, CrashClass, GetHostRequest, engine_event::Event,
};
use tonic::Code;

fn acquire(owner: &str, take: bool) -> AcquireLeaseRequest {
    AcquireLeaseRequest {
        owner: owner.into(),
        job_id: "job-epochs".into(),
        trial_id: "trial-1".into(),
        ttl_ms: 60_000,
        take,
        reason: if take { "test".into() } else { String::new() },
    }
}

async fn epoch(agent: &Agent, owner: &str) -> u64 {
    let mut c = agent.client().await.unwrap();
    c.acquire_lease(acquire(owner, true))
        .await
        .unwrap()
        .into_inner()
        .epoch
}

fn saved(agent: &Agent) -> String {
    std::fs::read_to_string(agent.data_dir().join("lease.epoch")).unwrap_or_default()
}

/// Whether mount namespaces can be made here; outside CI a non-root run says why it passes.
fn can_mount() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the read-only and full data directory tests need root (a mount namespace), and CI runs as root"
    );
    eprintln!("SKIPPED: not root, so no mount namespace for a read-only or full data directory");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_strictly_increase_across_restarts_and_a_sigkill() {
    let mut agent = Agent::start("").unwrap();
    let mut seen = Vec::new();
    for owner in ["a", "b", "c"] {
        seen.push(epoch(&agent, owner).await);
    }
    assert_eq!(saved(&agent).trim(), seen[2].to_string());
    assert!(agent.terminate(Duration::from_secs(20)));
    agent.relaunch();
    seen.push(epoch(&agent, "d").await);
    // SIGKILL right after a grant: the granted epoch was saved before it was handed out.
    agent.process.kill();
    assert_eq!(saved(&agent).trim(), seen[3].to_string());
    agent.relaunch();
    seen.push(epoch(&agent, "e").await);
    eprintln!("epochs over two restarts: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[1] > w[0]),
        "epochs did not strictly increase across restarts: {seen:?}"
    );
    assert!(
        !agent.data_dir().join("lease.epoch.tmp").exists(),
        "the temporary file was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_or_unreadable_epoch_file_stops_the_agent_naming_it() {
    let mut agent = Agent::start("").unwrap();
    let last = epoch(&agent, "ctl").await;
    assert!(agent.terminate(Duration::from_secs(20)));
    let file = agent.data_dir().join("lease.epoch");
    let named = file.display().to_string();
    for (what, corrupt) in [
        ("garbage", "seven\n"),
        ("empty (a torn write)", ""),
        ("zero", "0\n"),
    ] {
        std::fs::write(&file, corrupt).unwrap();
        let (status, stderr, listened) = agent.run_to_exit(Duration::from_secs(30));
        assert!(!status.success(), "{what}: the agent exited with {status}");
        assert!(!listened, "{what}: the agent bound its port: {stderr}");
        assert!(
            stderr.contains(&named) && stderr.contains("not a positive epoch number"),
            "{what}: the message does not name {named}: {stderr}"
        );
        eprintln!("{what}: exit {status}: {}", stderr.trim());
    }
    // A directory where the file should be cannot be read as one.
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let (status, stderr, listened) = agent.run_to_exit(Duration::from_secs(30));
    assert!(!status.success() && !listened, "{status}: {stderr}");
    assert!(
        stderr.contains(&named) && stderr.contains("cannot be read"),
        "{stderr}"
    );
    // Repaired as the message says, the agent counts on from the repaired number.
    std::fs::remove_dir(&file).unwrap();
    std::fs::write(&file, format!("{}\n", last + 40)).unwrap();
    agent.relaunch();
    assert_eq!(epoch(&agent, "ctl").await, last + 41);
}

/// `sh -c SCRIPT` in a mount namespace of its own, with the data directory as `$0`; the script
/// ends by exec-ing the agent (`"$@"`).
fn in_mount_ns(script: &str, data: &Path) -> Vec<String> {
    [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-ec",
        &format!("{script}\nexec \"$@\""),
    ]
    .into_iter()
    .map(String::from)
    .chain([data.display().to_string()])
    .collect()
}

/// On the agent relaunched with its data directory made unusable by `script`: a lease is
/// refused as the host's fault naming the epoch file, none is held after, and an engine start
/// fails as the host's fault naming the run's log, not as the config's crash.
async fn refuses_as_hosts_fault(agent: &mut Agent, script: &str, expect_error: &str) {
    let wrapper = in_mount_ns(script, &agent.data_dir());
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    agent.relaunch_through(&wrapper);
    let mut c = agent.client().await.unwrap();
    let refused = c.acquire_lease(acquire("ctl", false)).await.unwrap_err();
    let file = agent.data_dir().join("lease.epoch").display().to_string();
    eprintln!("AcquireLease: {:?}: {}", refused.code(), refused.message());
    assert_eq!(refused.code(), Code::Unavailable, "{}", refused.message());
    assert!(
        refused.message().starts_with("host fault:")
            && refused.message().contains(&file)
            && refused.message().contains(expect_error),
        "{}",
        refused.message()
    );
    let host = c.get_host(GetHostRequest {}).await.unwrap().into_inner();
    assert!(host.lease.is_none(), "a lease is held after the refusal");

    // An engine start (no lease held, so an operator's call) cannot create its log.
    let port = fleetbench_testkit::free_port();
    let events = apply(
        &mut c,
        spec("sim", "sim-model", port, &[]),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let crash = events
        .iter()
        .find_map(|e| match e {
            Event::Failed(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the engine start did not fail: {events:?}"));
    eprintln!("ApplyEngine failed: {}", crash.summary);
    assert_eq!(crash.class(), CrashClass::HostFault, "{crash:?}");
    let runs = agent.data_dir().join("runs").display().to_string();
    assert!(
        crash.summary.starts_with("host fault:")
            && crash.summary.contains(&runs)
            && crash.summary.contains(expect_error)
            && !crash.summary.contains("could not start"),
        "{}",
        crash.summary
    );
    assert!(
        spawned(&events).is_none(),
        "an engine was spawned: {events:?}"
    );
    assert!(agent.terminate(Duration::from_secs(20)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_directory_refuses_leases_as_the_hosts_fault() {
    if !can_mount() {
        return;
    }
    let mut agent = Agent::start("").unwrap();
    let before = epoch(&agent, "ctl").await;
    assert!(agent.terminate(Duration::from_secs(20)));
    refuses_as_hosts_fault(
        &mut agent,
        "mount --bind \"$0\" \"$0\"\nmount -o remount,bind,ro \"$0\"",
        "Read-only file system",
    )
    .await;
    assert_eq!(saved(&agent).trim(), before.to_string());
    // Writable again: the next epoch is above every one handed out, none was granted twice.
    agent.relaunch();
    let after = epoch(&agent, "ctl").await;
    assert_eq!(after, before + 1);
    let mut c = agent.client().await.unwrap();
    c.release_lease(agentpb::ReleaseLeaseRequest {
        epoch: after,
        keep_engine: false,
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_directory_refuses_leases_as_the_hosts_fault() {
    if !can_mount() {
        return;
    }
    let mut agent = Agent::start("").unwrap();
    let before = epoch(&agent, "ctl").await;
    assert!(agent.terminate(Duration::from_secs(20)));
    // A 64 KiB tmpfs over the data directory holding the epoch and runs/, then filled up.
    let script = format!(
        "mount -t tmpfs -o size=64k,mode=0700 fleetbench-full \"$0\"\nmkdir \"$0/runs\"\n\
         echo {before} > \"$0/lease.epoch\"\n\
         dd if=/dev/zero of=\"$0/filler\" bs=4k 2>/dev/null || true"
    );
    refuses_as_hosts_fault(&mut agent, &script, "No space left on device").await;
    // The real directory (under the namespace's tmpfs) was never touched.
    assert_eq!(saved(&agent).trim(), before.to_string());
}
