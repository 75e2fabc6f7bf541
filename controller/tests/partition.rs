//! Partitions for real: the test builds its own network (namespaces, veth pairs, a bridge, a
//! private subnet 10.213.x.0/24), runs the controller in one namespace and three agents (each
//! with the simulated engine, over mTLS) in three others, cuts one agent's link in the middle of
//! its trial, and heals it later. It checks that:
//!
//! - the partitioned agent ends its lease at the expiry (3 s TTL) and stops its engine by
//!   itself: the engine's process is gone, and the agent says so in GetEngine;
//! - the trial finishes on another agent, as a new attempt;
//! - the healed agent's late reports are fenced off: the level it finished during the
//!   partition is not in the store (that level was measured again elsewhere), and a call under
//!   the old epoch is refused (ABORTED);
//! - the store holds every level exactly once, each with the epoch it was measured under.
//!
//! Needs root (namespaces and links), as CI runs; elsewhere it says so and passes only outside
//! CI, as the other root-only tests do. Everything it builds is removed when it ends, failed or
//! not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetbench_controller::store::Store;
use fleetbench_proto::agentpb::{
    self, EngineState, GetEngineRequest, RenewLeaseRequest, agent_client::AgentClient, engine_event,
};
use fleetbench_proto::controllerpb::{
    GetJobRequest, JobState, RunState, SubmitJobRequest, WatchJobRequest,
    controller_client::ControllerClient, job_event,
};
use fleetbench_support::tls::{DevCerts, client_tls, generate_dev_certs};

mod common;
use common::netns::{Fleet, Net, in_netns, set_link, start_fleet};
use tonic::transport::{Channel, Endpoint};

const AGENTS: [&str; 3] = ["a1", "a2", "a3"];
const API_PORT: u16 = 7070;
const AGENT_PORT: u16 = 7443;
const LEASE_TTL_S: u64 = 3;

fn spec(hosts: &[&str]) -> String {
    let names: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        r#"name = "partition"
repeats = 3

[hosts]
names = [{}]

[[configs]]
name = "A"
engine = "sim"
model = "sim-model"
flags = {{ "--ttft-ms" = 20, "--itl-ms" = 10 }}

[[workloads]]
name = "short"
dataset = "random"
input_len = 16
output_len = 16

[load]
concurrency = [1, 2, 4, 8]
requests = 16
"#,
        names.join(", ")
    )
}

async fn agent_client(certs: &DevCerts, addr: &str) -> AgentClient<Channel> {
    let tls = client_tls(
        &certs.ca_cert,
        &certs.controller_cert,
        &certs.controller_key,
        "localhost",
    )
    .unwrap();
    let ch = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("agent at {addr}: {e}"));
    AgentClient::new(ch)
}

fn pid_alive(pid: u32) -> bool {
    pid > 1 && Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_partitioned_agent_stops_its_engine_and_its_trial_finishes_elsewhere() {
    if !common::netns::have_root("the partition test") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = generate_dev_certs(&dir.path().join("certs"), &[], false).unwrap();
    let mut members = vec!["c"];
    members.extend(AGENTS);
    let net = Net::build(&members);

    let Fleet { agents, controller } = start_fleet(
        &net,
        dir.path(),
        &certs,
        &AGENTS,
        AGENT_PORT,
        API_PORT,
        LEASE_TTL_S,
        |_| String::new(),
    );

    let ns_c = net.ns("c");
    let db = dir.path().join("controller.db");
    let cut = {
        let prefix = net.prefix.clone();
        let certs = certs.clone();
        let agent_addrs: BTreeMap<String, String> = agents
            .iter()
            .map(|(k, (_, a))| (k.clone(), a.clone()))
            .collect();
        in_netns(&ns_c, move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(scenario(prefix, certs, agent_addrs, db))
        })
        .join()
    };
    let report = match cut {
        Ok(r) => r,
        Err(e) => {
            for (name, (p, _)) in &agents {
                eprintln!(
                    "--- agent {name} log (tail) ---\n{}",
                    tail(&p.log_text(), 40)
                );
            }
            eprintln!(
                "--- controller log (tail) ---\n{}",
                tail(&controller.log_text(), 60)
            );
            std::panic::resume_unwind(e);
        }
    };
    let victim_log = agents[&report.victim].0.log_text();
    assert!(
        victim_log.contains("lease expired: stopping the engine")
            && victim_log.contains("engine stopped after the lease expired"),
        "the partitioned agent's log does not say it ended the lease:\n{}",
        tail(&victim_log, 40)
    );
    eprintln!(
        "partitioned agent {}: engine gone {:.2} s after the cut (lease TTL {LEASE_TTL_S} s, \
         renewed every {:.1} s); link healed after {:.2} s; job done {:.2} s after the cut",
        report.victim,
        report.engine_gone_s,
        LEASE_TTL_S as f64 / 3.0,
        report.healed_s,
        report.job_done_s
    );
    drop(controller);
    drop(agents);
    drop(net);
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

struct Report {
    victim: String,
    engine_gone_s: f64,
    healed_s: f64,
    job_done_s: f64,
}

/// The part that talks to the controller and the agents, from inside the controller's
/// namespace.
async fn scenario(
    prefix: String,
    certs: DevCerts,
    agent_addrs: BTreeMap<String, String>,
    db: PathBuf,
) -> Report {
    // The links without the Net guard, which the main thread owns and drops.
    let link = |member: &str, up: bool| set_link(&prefix, member, up);
    let mut client = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match ControllerClient::connect(format!("http://127.0.0.1:{API_PORT}")).await {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => panic!("controller: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    let resp = client
        .submit_job(SubmitJobRequest {
            spec_toml: spec(&AGENTS),
            file_name: "partition.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.errors.is_empty(), "{:?}", resp.errors);
    let job_id = resp.job_id;
    let mut events = client
        .watch_job(WatchJobRequest {
            job_id: job_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut engine_pid: BTreeMap<String, u32> = BTreeMap::new();
    let (victim, victim_trial) = loop {
        let ev = tokio::time::timeout(Duration::from_secs(120), events.message())
            .await
            .expect("job events keep coming")
            .unwrap()
            .expect("job still running");
        match ev.event {
            Some(job_event::Event::Engine(e)) => {
                if let Some(engine_event::Event::Spawned(s)) = e.event.and_then(|e| e.event) {
                    engine_pid.insert(e.host, s.pid);
                }
            }
            Some(job_event::Event::Level(l)) if l.result.as_ref().unwrap().level_index == 0 => {
                break (l.host, l.trial_id);
            }
            _ => {}
        }
    };
    // Cut the victim's link in the middle of its trial (three levels to go).
    link(&victim, false);
    let t_cut = Instant::now();
    let pid = engine_pid[&victim];
    assert!(pid_alive(pid), "the victim's engine {pid} runs at the cut");

    // The agent cannot hear the controller: its lease runs out and it stops the engine.
    while pid_alive(pid) {
        assert!(
            t_cut.elapsed() < Duration::from_secs(LEASE_TTL_S + 15),
            "the partitioned agent's engine (pid {pid}) still runs {:?} after the cut",
            t_cut.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let engine_gone_s = t_cut.elapsed().as_secs_f64();
    assert!(
        engine_gone_s >= 1.0,
        "the engine stopped {engine_gone_s:.2} s after the cut, before any lease could expire"
    );
    // The partition lasts a while longer: the agent's late level reports wait in its sockets.
    tokio::time::sleep(Duration::from_secs(2)).await;
    link(&victim, true);
    let healed_s = t_cut.elapsed().as_secs_f64();

    drop(events);
    let deadline = Instant::now() + Duration::from_secs(120);
    let job = loop {
        let job = client
            .get_job(GetJobRequest {
                job_id: job_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if JobState::is_final_value(job.state) {
            break job;
        }
        assert!(Instant::now() < deadline, "job still running: {job:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let job_done_s = t_cut.elapsed().as_secs_f64();
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");
    assert_eq!((job.levels_done, job.levels_total), (12, 12));

    // The store: every level once, each under the epoch of the run that measured it.
    let store = Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let levels = store.levels(&job_id).await.unwrap();
    let runs = store.runs(&job_id).await.unwrap();
    let mut keys = BTreeSet::new();
    for l in &levels {
        let r = l.result.as_ref().unwrap();
        assert!(
            keys.insert((l.trial_id.clone(), r.level_index)),
            "stored twice: {} level {}",
            l.trial_id,
            r.level_index
        );
        let run = runs.iter().find(|x| x.run_id == l.run_id).unwrap();
        assert!(l.lease_epoch > 0, "level without an epoch: {l:?}");
        assert_eq!(
            l.lease_epoch, run.lease_epoch,
            "level {} of {}",
            r.level_index, l.run_id
        );
        assert_eq!(r.lease_epoch, l.lease_epoch);
        assert_eq!(r.outcome, agentpb::LevelOutcome::Ok as i32, "{r:?}");
    }
    assert_eq!(levels.len(), 12);
    let victim_runs: Vec<_> = runs.iter().filter(|r| r.trial_id == victim_trial).collect();
    assert_eq!(victim_runs.len(), 2, "{victim_runs:#?}");
    let lost = victim_runs[0];
    assert_eq!(
        (lost.host.as_str(), lost.state),
        (victim.as_str(), RunState::HostLost as i32)
    );
    assert!(lost.reason.contains("not renewed"), "{}", lost.reason);
    assert_ne!(victim_runs[1].host, victim);
    assert_eq!(victim_runs[1].state, RunState::Done as i32);
    // Only the level stored before the cut came from the victim; the level its agent finished
    // during the partition (reported late, under the fenced epoch) was measured again.
    let from_victim: Vec<u32> = levels
        .iter()
        .filter(|l| l.trial_id == victim_trial && l.host == victim)
        .map(|l| l.result.as_ref().unwrap().level_index)
        .collect();
    assert_eq!(
        from_victim,
        vec![0],
        "levels kept from the partitioned host"
    );

    // The healed agent: idle, no lease, says why; the old epoch is refused.
    let mut agent = agent_client(&certs, &agent_addrs[&victim]).await;
    let st = agent
        .get_engine(GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        st.state != EngineState::Ready as i32
            || st
                .lease
                .as_ref()
                .is_some_and(|l| l.epoch > lost.lease_epoch),
        "{st:?}"
    );
    assert!(
        st.lease_note
            .contains(&format!("lease epoch {} ", lost.lease_epoch))
            || st.lease.is_some(),
        "{}",
        st.lease_note
    );
    let fenced = agent
        .renew_lease(RenewLeaseRequest {
            epoch: lost.lease_epoch,
            ttl_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(fenced.code(), tonic::Code::Aborted, "{}", fenced.message());
    let fenced = agent
        .stop_engine(agentpb::StopEngineRequest {
            lease_epoch: lost.lease_epoch,
        })
        .await
        .unwrap_err();
    assert_eq!(fenced.code(), tonic::Code::Aborted, "{}", fenced.message());
    Report {
        victim,
        engine_gone_s,
        healed_s,
        job_done_s,
    }
}
