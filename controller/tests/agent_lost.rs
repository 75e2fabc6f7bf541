//! Three real agents on loopback, a job spread across them, one agent killed (SIGKILL) while its
//! trial runs: the trial finishes on another agent, as a new attempt, and the store holds every
//! level of every trial exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use fleetbench_controller::store::Store;
use fleetbench_proto::agentpb::engine_event;
use fleetbench_proto::controllerpb::{
    AgentHealth, JobState, ListAgentsRequest, RunState, job_event,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agents_trial_finishes_elsewhere_and_nothing_is_lost_or_doubled() {
    let dir = tempfile::tempdir().unwrap();
    let mut agents = spawn_agents(dir.path(), &["a1", "a2", "a3"]);
    let cfg = controller_config(
        dir.path(),
        "127.0.0.1:0",
        &agents.iter().collect::<Vec<_>>(),
    );
    let ctl = spawn_controller(&cfg, &dir.path().join("controller.log"));
    let mut client = client(ctl.addr).await;

    // 2 configs x 3 repeats = 6 trials over 3 hosts.
    let spec = sim_spec("spread", 3, &["a1", "a2", "a3"]);
    let job_id = submit_trials(&mut client, spec, "spread.toml", 6).await;

    // Wait until some host has stored a level of its trial, then kill that host's agent.
    let mut events = watch(&mut client, &job_id).await;
    let mut engine_pids: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut hosts_with_trials = BTreeSet::new();
    let victim = loop {
        let ev = next_event(&mut events).await;
        match ev.event {
            Some(job_event::Event::Trial(t)) => {
                hosts_with_trials.insert(t.host);
            }
            Some(job_event::Event::Engine(e)) => {
                if let Some(engine_event::Event::Spawned(s)) = e.event.and_then(|e| e.event) {
                    engine_pids.entry(e.host).or_default().push(s.pid);
                }
            }
            Some(job_event::Event::Level(l)) => {
                let r = l.result.unwrap();
                // First level stored on a trial with levels left: the trial is mid-way.
                if r.level_index == 0 {
                    break (l.host, l.trial_id);
                }
            }
            _ => {}
        }
    };
    let (victim_host, victim_trial) = victim;
    let a = agents.iter_mut().find(|a| a.name == victim_host).unwrap();
    a.kill();
    // The agent's engine outlives a SIGKILLed agent; end it too (as the host dying would).
    // (Never pid 0 or 1: `kill 0` would hit this test's own process group.)
    for pid in engine_pids.get(&victim_host).into_iter().flatten() {
        if *pid > 1 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    drop(events);

    let job = wait_job(&mut client, &job_id, Duration::from_secs(300)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.trials_done, job.trials_total), (6, 6));
    assert_eq!((job.levels_done, job.levels_total), (24, 24));
    assert!(
        hosts_with_trials.len() >= 2,
        "the job should spread over hosts: {hosts_with_trials:?}"
    );

    // The store: every (trial, level) exactly once; the victim's trial has a lost attempt on
    // the killed host and a finished one elsewhere.
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    let levels = store.levels(&job_id).await.unwrap();
    let mut keys = BTreeSet::new();
    for l in &levels {
        let idx = l.result.as_ref().unwrap().level_index;
        assert!(
            keys.insert((l.trial_id.clone(), idx)),
            "stored twice: {} {idx}",
            l.trial_id
        );
    }
    assert_eq!(levels.len(), 24);
    for t in store.trials(&job_id).await.unwrap() {
        assert_eq!(
            store.stored_level_indices(&t.id).await.unwrap(),
            vec![0, 1, 2, 3],
            "trial {}",
            t.id
        );
    }
    let runs = store.runs(&job_id).await.unwrap();
    let victim_runs: Vec<_> = runs.iter().filter(|r| r.trial_id == victim_trial).collect();
    assert_eq!(victim_runs.len(), 2, "{victim_runs:#?}");
    assert_eq!(victim_runs[0].host, victim_host);
    assert_eq!(victim_runs[0].state, RunState::HostLost as i32);
    assert_eq!(victim_runs[0].attempt, 1);
    assert_ne!(victim_runs[1].host, victim_host);
    assert_eq!(victim_runs[1].state, RunState::Done as i32);
    assert_eq!(victim_runs[1].attempt, 2);
    // Level 0 of the victim's trial was measured on the killed host and kept; the rest came
    // from the second attempt.
    let victim_levels: Vec<_> = levels
        .iter()
        .filter(|l| l.trial_id == victim_trial)
        .collect();
    assert_eq!(victim_levels[0].host, victim_host);
    assert!(
        victim_levels[1..]
            .iter()
            .all(|l| l.attempt == 2 && l.host != victim_host)
    );
    // Every other trial ran once.
    let other_runs = runs.iter().filter(|r| r.trial_id != victim_trial);
    assert!(
        other_runs
            .clone()
            .all(|r| r.state == RunState::Done as i32 && r.attempt == 1)
    );
    assert_eq!(other_runs.count(), 5);
}

/// A host that hangs without closing its connections (SIGSTOP: no RST, no FIN) is found out: the
/// inventory by its heartbeat stream's late keep-alive, the trial by HTTP/2 keep-alive and its
/// lease; its trial moves to the other host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_agent_is_detected_and_its_trial_moves() {
    let dir = tempfile::tempdir().unwrap();
    let mut agents = spawn_agents(dir.path(), &["f1", "f2"]);
    let cfg = controller_config(
        dir.path(),
        "127.0.0.1:0",
        &agents.iter().collect::<Vec<_>>(),
    );
    let ctl = spawn_controller(&cfg, &dir.path().join("controller.log"));
    let mut client = client(ctl.addr).await;
    let job_id = submit(
        &mut client,
        sim_spec("frozen", 1, &["f1", "f2"]),
        "frozen.toml",
    )
    .await;
    let mut events = watch(&mut client, &job_id).await;
    let (host, trial) = loop {
        let ev = next_event(&mut events).await;
        if let Some(job_event::Event::Level(l)) = ev.event
            && l.result.unwrap().level_index == 0
        {
            break (l.host, l.trial_id);
        }
    };
    drop(events);
    let frozen = agents.iter_mut().find(|a| a.name == host).unwrap();
    let pid = frozen.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    // The heartbeat stream's keep-alive is what finds a frozen agent out (a stream alone would
    // stay open): unreachable once nothing came for the interval (500 ms) plus its slack (2 s).
    let frozen_at = std::time::Instant::now();
    let error = loop {
        let agents = client
            .list_agents(ListAgentsRequest {})
            .await
            .unwrap()
            .into_inner()
            .agents;
        let a = agents.iter().find(|a| a.name == host).unwrap();
        if a.health == AgentHealth::Unreachable as i32 {
            break a.error.clone();
        }
        assert!(
            frozen_at.elapsed() < Duration::from_secs(30),
            "the frozen agent is still {a:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = frozen_at.elapsed();
    println!("frozen agent unreachable after {took:.2?}: {error}");
    assert!(error.contains("WatchEngine"), "{error}");
    // 2.5 s, and the margin of a loaded test machine.
    assert!(took < Duration::from_secs(8), "{took:?}");

    let job = wait_job(&mut client, &job_id, Duration::from_secs(300)).await;
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total), (8, 8));
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    let runs: Vec<_> = store
        .runs(&job_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.trial_id == trial)
        .collect();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(
        (runs[0].host.as_str(), runs[0].state),
        (host.as_str(), RunState::HostLost as i32)
    );
    assert_ne!(runs[1].host, host);
    assert_eq!(runs[1].state, RunState::Done as i32);
    assert_eq!(
        store.stored_level_indices(&trial).await.unwrap(),
        vec![0, 1, 2, 3]
    );
}
