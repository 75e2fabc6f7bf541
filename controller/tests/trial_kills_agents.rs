//! Issue 22: a trial that kills the agent running it (a spec that exhausts the host) was
//! retried on the next host and killed that agent too, up to `trial_attempts` hosts. Three real
//! agents on loopback; each agent running the one trial is SIGKILLed mid-level, as the memory
//! bomb killed them: the trial runs on one other host, then stops with a reason naming both
//! hosts, and the third host never runs it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use fleetbench_controller::store::Store;
use fleetbench_proto::Word;
use fleetbench_proto::agentpb::engine_event;
use fleetbench_proto::controllerpb::{JobState, RunState, TrialState, job_event};

/// One trial of four levels of 40 requests of about 180 ms each (7 s at concurrency 1, 2.4 s
/// at 3).
const SPEC: &str = r#"name = "killer"

[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = { "--ttft-ms" = 20, "--itl-ms" = 10 }

[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2, 3, 4]
requests = 40
"#;

/// SIGKILLs the agent `name` and the engines it spawned (the host dying takes both).
fn kill_host(agents: &mut [Proc], name: &str, engines: &BTreeMap<String, Vec<u32>>) {
    agents.iter_mut().find(|a| a.name == name).unwrap().kill();
    // Never pid 0 or 1: `kill 0` would hit this test's own process group.
    for pid in engines.get(name).into_iter().flatten() {
        if *pid > 1 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trial_that_killed_two_agents_stops_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut agents = spawn_agents(dir.path(), &["k1", "k2", "k3"]);
    let cfg = controller_config(
        dir.path(),
        "127.0.0.1:0",
        &agents.iter().collect::<Vec<_>>(),
    );
    let ctl = spawn_controller(&cfg, &dir.path().join("controller.log"));
    let mut client = client(ctl.addr).await;
    let job_id = submit_trials(&mut client, SPEC.to_string(), "killer.toml", 1).await;

    // Each time a level of the trial is stored on a host not yet killed, that host dies.
    let mut events = watch(&mut client, &job_id).await;
    let mut engines: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut killed: Vec<String> = Vec::new();
    let began = std::time::Instant::now();
    while killed.len() < 2 {
        match next_event(&mut events).await.event {
            Some(job_event::Event::Engine(e)) => {
                if let Some(engine_event::Event::Spawned(s)) = e.event.and_then(|e| e.event) {
                    engines.entry(e.host).or_default().push(s.pid);
                }
            }
            Some(job_event::Event::Level(l)) if !killed.contains(&l.host) => {
                kill_host(&mut agents, &l.host, &engines);
                eprintln!(
                    "killed {} after level {} at {:.1} s",
                    l.host,
                    l.result.unwrap().level_index,
                    began.elapsed().as_secs_f64()
                );
                killed.push(l.host);
            }
            _ => {}
        }
    }
    drop(events);

    let job = wait_job(&mut client, &job_id, Duration::from_secs(120)).await;
    eprintln!(
        "job {} after {:.1} s: {}",
        JobState::word_of(job.state),
        began.elapsed().as_secs_f64(),
        job.error
    );
    assert_eq!(job.state, JobState::Failed as i32, "{job:?}");
    assert!(
        job.error.contains("were lost while running it")
            && job
                .error
                .contains(&format!("{} and {}", killed[0], killed[1]))
            && job.error.contains("not retried on another host"),
        "{}",
        job.error
    );

    // The store: two attempts, on the two killed hosts, both lost; none on the third host.
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    let runs = store.runs(&job_id).await.unwrap();
    let hosts: Vec<(&str, u32)> = runs.iter().map(|r| (r.host.as_str(), r.attempt)).collect();
    assert_eq!(
        hosts,
        [(killed[0].as_str(), 1), (killed[1].as_str(), 2)],
        "{runs:#?}"
    );
    assert!(runs.iter().all(|r| r.state == RunState::HostLost as i32));
    let trials = store.trials(&job_id).await.unwrap();
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0].state, TrialState::HostLost);
    assert!(
        trials[0].reason.contains("not retried"),
        "{}",
        trials[0].reason
    );
    // The third host is alive and idle: it answers and ran nothing of this job.
    let third = agents
        .iter()
        .find(|a| !killed.contains(&a.name))
        .unwrap()
        .name
        .clone();
    assert!(!runs.iter().any(|r| r.host == third));
}
