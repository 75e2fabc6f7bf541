//! A gang's rank partitioned, for real: network namespaces (as `partition.rs` builds them) for
//! the controller and two agents over mTLS, one rank of a `nodes = 2` simulated engine on each
//! (rank 0 listening for rank 1 on its own namespace's address). Rank 1's link is cut in the
//! middle of a level. It checks that:
//!
//! - rank 1's host is fenced: its agent ends the lease at the expiry (3 s TTL) and stops rank 1
//!   by itself, and the epoch it held is refused afterwards (ABORTED);
//! - the controller ends the attempt naming rank 1 and its host, stops rank 0 (nothing of the
//!   gang runs during the partition), and the level in progress is not stored;
//! - once the link heals, the trial runs again on both hosts under new epochs and completes.
//!
//! Needs root (namespaces and links), as CI runs; elsewhere it says so and passes only outside
//! CI, as the other root-only tests do.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::netns::{Fleet, Net, in_netns, set_link, start_fleet};
use fleetbench_controller::store::Store;
use fleetbench_proto::agentpb::{RenewLeaseRequest, agent_client::AgentClient, engine_event};
use fleetbench_proto::controllerpb::{
    GetJobRequest, JobState, RunState, SubmitJobRequest, WatchJobRequest,
    controller_client::ControllerClient, job_event,
};
use fleetbench_support::tls::{DevCerts, client_tls, generate_dev_certs};
use tonic::transport::{Channel, Endpoint};

const API_PORT: u16 = 7071;
const AGENT_PORT: u16 = 7443;
const RENDEZVOUS_PORT: u16 = 18090;
const LEASE_TTL_S: u64 = 3;

const SPEC: &str = r#"name = "gang-partition"

[[configs]]
name = "two-nodes"
engine = "sim"
model = "sim-model"
nodes = 2
flags = { "--ttft-ms" = 20, "--itl-ms" = 20 }

[[workloads]]
name = "w"
dataset = "random"
input_len = 16
output_len = 16

# Level 0 takes about 7 s (20 requests of ~340 ms, one at a time): the cut lands in it.
[load]
concurrency = [1, 2]
requests = 20
"#;

fn pid_alive(pid: u32) -> bool {
    pid > 1 && Path::new(&format!("/proc/{pid}")).exists()
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

#[test]
fn a_partitioned_rank_is_fenced_and_the_gang_stops() {
    if !common::netns::have_root("the gang partition test") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = generate_dev_certs(&dir.path().join("certs"), &[], false).unwrap();
    let net = Net::build(&["c", "g1", "g2"]);
    let Fleet { agents, controller } = start_fleet(
        &net,
        dir.path(),
        &certs,
        &["g1", "g2"],
        AGENT_PORT,
        API_PORT,
        LEASE_TTL_S,
        |name| {
            // Rank 0 listens for its peers on its agent's address (its namespace's), which
            // rank 1 reaches over the bridge.
            if name == "g1" {
                format!("rendezvous_port = {RENDEZVOUS_PORT}\n")
            } else {
                String::new()
            }
        },
    );
    let db = dir.path().join("controller.db");
    let run = {
        let prefix = net.prefix.clone();
        let certs = certs.clone();
        let g2 = agents["g2"].1.clone();
        in_netns(&net.ns("c"), move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(scenario(prefix, certs, g2, db))
        })
        .join()
    };
    if let Err(e) = run {
        for (name, (p, _)) in &agents {
            eprintln!("--- agent {name} log ---\n{}", p.log_text());
        }
        eprintln!("--- controller log ---\n{}", controller.log_text());
        std::panic::resume_unwind(e);
    }
    let g2_log = agents["g2"].0.log_text();
    assert!(
        g2_log.contains("lease expired: stopping the engine"),
        "rank 1's agent does not say it ended the lease:\n{g2_log}"
    );
    drop(controller);
    drop(agents);
    drop(net);
}

async fn scenario(prefix: String, certs: DevCerts, g2_addr: String, db: PathBuf) {
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
            spec_toml: SPEC.into(),
            file_name: "gang-partition.toml".into(),
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
    // Cut rank 1's link at the first progress of level 0, both ranks running.
    let mut pids: BTreeMap<String, u32> = BTreeMap::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(60), events.message())
            .await
            .expect("job events keep coming")
            .unwrap()
            .expect("job still running");
        match ev.event {
            Some(job_event::Event::Engine(e)) => {
                if let Some(engine_event::Event::Spawned(s)) = e.event.and_then(|e| e.event) {
                    pids.insert(e.host, s.pid);
                }
            }
            Some(job_event::Event::Progress(_)) if pids.len() == 2 => break,
            _ => {}
        }
    }
    drop(events);
    set_link(&prefix, "g2", false);
    let t_cut = Instant::now();
    let (rank0, rank1) = (pids["g1"], pids["g2"]);
    assert!(pid_alive(rank0) && pid_alive(rank1), "{pids:?}");

    // Rank 1's agent hears no renewal: it ends the lease and stops rank 1; the controller
    // ends the attempt and stops rank 0. Nothing of the gang runs during the partition.
    while pid_alive(rank0) || pid_alive(rank1) {
        assert!(
            t_cut.elapsed() < Duration::from_secs(LEASE_TTL_S + 15),
            "still running {:?} after the cut: rank 0 {}, rank 1 {}",
            t_cut.elapsed(),
            pid_alive(rank0),
            pid_alive(rank1)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gone_s = t_cut.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_link(&prefix, "g2", true);

    let deadline = Instant::now() + Duration::from_secs(60);
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
    eprintln!(
        "gang stopped {gone_s:.2} s after the cut (lease TTL {LEASE_TTL_S} s); job done {:.2} s \
         after the cut",
        t_cut.elapsed().as_secs_f64()
    );
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    let store = Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let runs = store.runs(&job_id).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let (lost, redone) = (&runs[0], &runs[1]);
    assert_eq!(lost.state, RunState::HostLost as i32, "{lost:?}");
    assert!(
        lost.reason.contains("rank 1 on host g2") && lost.reason.contains("not renewed"),
        "{}",
        lost.reason
    );
    assert_eq!(redone.state, RunState::Done as i32, "{redone:?}");
    let epoch = |r: &fleetbench_proto::controllerpb::Run| -> u64 {
        r.facts
            .iter()
            .find(|f| f.key == "gang.rank1.lease_epoch")
            .map(|f| f.value.parse().unwrap())
            .unwrap_or_else(|| panic!("no rank 1 epoch in {:?}", r.facts))
    };
    let (old, new) = (epoch(lost), epoch(redone));
    assert!(new > old, "rank 1's epoch went from {old} to {new}");
    // Every level once, measured by the second gang (the cut level was not stored).
    let levels = store.levels(&job_id).await.unwrap();
    assert_eq!(levels.len(), 2);
    assert!(
        levels.iter().all(|l| l.run_id == redone.run_id),
        "{levels:#?}"
    );
    // The fenced epoch is refused by rank 1's agent.
    let mut g2 = agent_client(&certs, &g2_addr).await;
    let refused = g2
        .renew_lease(RenewLeaseRequest {
            epoch: old,
            ttl_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::Aborted,
        "{}",
        refused.message()
    );
}
