//! A fenced operator, with real processes on loopback (controller, agent, simulated engine,
//! `fleetbench-agentctl`): `agentctl stop` during a job's trial is refused and names the job;
//! `agentctl stop --take-lease` stops the engine, the job records why its trial was interrupted,
//! and the interrupted level is re-run: every level stored exactly once, none as failed.
//! `agentctl engine --watch` follows it all from the agent's `WatchEngine` stream.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use fleetbench_controller::store::Store;
use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::{JobState, RunState, TrialState, job_event};
use fleetbench_testkit::output_text as text;

fn agentctl(agent: &Proc, args: &[&str]) -> Output {
    Command::new(fleetbench_testkit::workspace_bin("fleetbench-agentctl"))
        .arg("--agent")
        .arg(format!("http://{}", agent.addr))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentctl_stop_is_refused_during_a_job_and_take_lease_interrupts_the_trial() {
    let dir = tempfile::tempdir().unwrap();
    let agent = spawn_agent(dir.path(), "op1", fleetbench_testkit::free_port());
    let store = format!("sqlite://{}", dir.path().join("controller.db").display());
    let cfg = write_controller_config(
        &dir.path().join("controller.toml"),
        "127.0.0.1:0",
        &store,
        "lease_ttl = \"3s\"\n",
        &[&agent],
    );
    let ctl = spawn_controller(&cfg, &dir.path().join("controller.log"));
    let mut client = client(ctl.addr).await;

    // One config, one repeat: one trial of four levels on the one host.
    let one_config = sim_spec("fenced", 1, &["op1"]).replacen(
        "[[configs]]\nname = \"B\"\nextends = \"A\"\nflags = { \"--itl-ms\" = 12 }\n",
        "",
        1,
    );
    let job_id = submit_trials(&mut client, one_config, "fenced.toml", 1).await;
    let mut events = watch(&mut client, &job_id).await;
    // Level 0 stored: the trial is in its benchmark, three levels to go.
    loop {
        let ev = next_event(&mut events).await;
        if let Some(job_event::Event::Level(l)) = ev.event
            && l.result.unwrap().level_index == 0
        {
            break;
        }
    }

    // `agentctl engine --watch` shows the engine under the job's lease at once, then every
    // change: here the operator's stop below.
    let mut watcher =
        std::process::Command::new(fleetbench_testkit::workspace_bin("fleetbench-agentctl"))
            .arg("--agent")
            .arg(format!("http://{}", agent.addr))
            .args(["engine", "--watch", "--json"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<serde_json::Value>();
    let out = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines_tx.send(serde_json::from_str(&line).expect("one JSON object a line"));
        }
    });
    let first = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("a first status");
    assert_eq!(first["state"], "ready", "{first}");
    assert_eq!(first["lease"]["job_id"], job_id.as_str(), "{first}");

    // An operator's stop without the lease is refused, naming the job.
    let refused = agentctl(&agent, &["stop"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let t = text(&refused);
    assert!(
        t.contains("FailedPrecondition") && t.contains(&job_id) && t.contains("--take-lease"),
        "{t}"
    );

    // With --take-lease it stops the engine and says whose lease it took.
    let taken = agentctl(
        &agent,
        &["stop", "--take-lease", "--lease-reason", "swap a GPU"],
    );
    let t = text(&taken);
    assert!(taken.status.success(), "{t}");
    assert!(
        t.contains("took the lease from fleetbench-controller") && t.contains(&job_id),
        "{t}"
    );
    assert!(t.contains("state: idle"), "{t}");
    // The watcher saw the engine go, under the operator's lease, without asking.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let s = lines
            .recv_timeout(left)
            .expect("the watcher reports the stop");
        if s["state"] == "idle" {
            assert_ne!(s["lease"]["job_id"], job_id.as_str(), "{s}");
            break;
        }
    }
    let _ = watcher.kill();
    let _ = watcher.wait();

    // The job records the interruption and re-runs the trial.
    let mut interrupted = None;
    let mut message = None;
    while interrupted.is_none() || message.is_none() {
        let ev = next_event(&mut events).await;
        match ev.event {
            Some(job_event::Event::Trial(tr)) if tr.state == TrialState::Interrupted as i32 => {
                interrupted = Some(tr.reason)
            }
            Some(job_event::Event::Message(m)) if m.contains("interrupted") => message = Some(m),
            _ => {}
        }
    }
    let reason = interrupted.unwrap();
    assert!(
        reason.contains("fenced") && reason.contains("swap a GPU"),
        "the trial's reason should say it was fenced and why: {reason}"
    );
    assert!(
        message.as_ref().unwrap().contains("re-running"),
        "{message:?}"
    );
    drop(events);

    let job = wait_job(&mut client, &job_id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total), (4, 4));

    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("controller.db").display()
    ))
    .await
    .unwrap();
    let levels = store.levels(&job_id).await.unwrap();
    let mut keys = BTreeSet::new();
    for l in &levels {
        let r = l.result.as_ref().unwrap();
        assert!(
            keys.insert(r.level_index),
            "level {} stored twice",
            r.level_index
        );
        assert_eq!(
            r.outcome,
            LevelOutcome::Ok as i32,
            "stored as {:?}",
            r.outcome()
        );
    }
    assert_eq!(keys.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    let runs = store.runs(&job_id).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[0].state, RunState::Interrupted as i32);
    assert!(runs[0].reason.contains("fenced"), "{}", runs[0].reason);
    assert_eq!(runs[1].state, RunState::Done as i32);
    assert!(runs[1].lease_epoch > runs[0].lease_epoch);
    // Level 0 was measured under the first epoch; the interrupted level and the rest under the
    // second.
    for l in &levels {
        let want = if l.result.as_ref().unwrap().level_index == 0 {
            runs[0].lease_epoch
        } else {
            runs[1].lease_epoch
        };
        assert_eq!(l.lease_epoch, want, "{l:?}");
    }
}
