//! The stand-in fleet against a real controller process: 50 stand-ins register, show up ready
//! with their facts, and a job spread one trial per host completes with every level stored
//! once. Keeps the stand-in (and the scale bench built on it) from rotting.

use fleetbench_fleetkit::swarm_fleet;

use std::time::Duration;

use fleetbench_proto::controllerpb::{AgentHealth, JobState, ListAgentsRequest};

const AGENTS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_stand_ins_register_and_a_job_spread_over_them_completes() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = swarm_fleet::controller(dir.path(), "500ms", "");
    // A 4 s start-up: every trial is placed before any host frees up, so each lands on its own.
    let swarm = swarm_fleet::swarm(dir.path(), ctl.addr, AGENTS, "4s");
    let mut c = swarm_fleet::client(ctl.addr).await;
    swarm_fleet::wait_ready(&mut c, AGENTS, Duration::from_secs(60)).await;

    let spec = swarm_fleet::spread_spec(AGENTS, 0.05);
    let id = swarm_fleet::submit(&mut c, &spec).await;
    let job = swarm_fleet::wait_job(
        &mut c,
        &id,
        Duration::from_secs(90),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        job.state,
        JobState::Succeeded as i32,
        "{job:?}\ncontroller log:\n{}\nswarm log:\n{}",
        ctl.log_text(),
        swarm.log_text()
    );
    assert_eq!(job.trials_total, AGENTS as u32);
    assert_eq!(job.levels_done, job.levels_total);
    let (levels, hosts) = swarm_fleet::levels_and_hosts(&mut c, &id).await;
    assert_eq!(levels, 2 * AGENTS, "every level stored once");
    assert_eq!(hosts, AGENTS, "one trial per stand-in");
}

/// Agents older than the heartbeat stream (`WatchEngine` UNIMPLEMENTED) are polled instead: they
/// become ready, a frozen one (SIGSTOP) is found unreachable by a `GetEngine`/`GetHost` that
/// gets no answer, and it is ready again once it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_without_watch_engine_are_polled_and_a_frozen_one_is_found_out() {
    const OLD: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let ctl = swarm_fleet::controller(dir.path(), "500ms", "");
    let swarm =
        swarm_fleet::swarm_with(dir.path(), ctl.addr, OLD, "1s", &["--without-watch-engine"]);
    let mut c = swarm_fleet::client(ctl.addr).await;
    swarm_fleet::wait_ready(&mut c, OLD, Duration::from_secs(60)).await;
    // Still ready after several intervals: the polls answer.
    tokio::time::sleep(Duration::from_secs(3)).await;
    swarm_fleet::wait_ready(&mut c, OLD, Duration::from_secs(1)).await;

    let pid = swarm.child.id().to_string();
    let signal = |s: &str| {
        std::process::Command::new("kill")
            .args([s, &pid])
            .status()
            .unwrap()
    };
    signal("-STOP");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let errors = loop {
        let agents = c
            .list_agents(ListAgentsRequest {})
            .await
            .unwrap()
            .into_inner()
            .agents;
        if agents
            .iter()
            .all(|a| a.health == AgentHealth::Unreachable as i32)
        {
            break agents.into_iter().map(|a| a.error).collect::<Vec<_>>();
        }
        if std::time::Instant::now() > deadline {
            signal("-CONT");
            panic!("not all found out: {agents:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    signal("-CONT");
    for e in &errors {
        assert!(
            e.contains("no answer within") && !e.contains("WatchEngine"),
            "a polled agent's error: {e}"
        );
    }
    swarm_fleet::wait_ready(&mut c, OLD, Duration::from_secs(30)).await;
}
