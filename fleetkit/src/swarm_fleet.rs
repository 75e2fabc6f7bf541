//! A controller process and a swarm of stand-ins, shared by the smoke test and the scale bench:
//! start both, wait (bounded) until every stand-in is ready in the controller's inventory,
//! submit a job whose trials spread one per host, wait (bounded, with progress) for its end.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use fleetbench_proto::controllerpb::{
    AgentHealth, GetJobRequest, GetResultsRequest, Job, JobState, ListAgentsRequest,
    SubmitJobRequest, controller_client::ControllerClient,
};
use fleetbench_testkit::process::{Launch, Listening};
use tonic::transport::Channel;

/// The label every stand-in of these runs carries and the job selects.
pub const POOL: &str = "scale";

/// Starts a controller on loopback (plaintext: loopback only, the config's default rules) with
/// a SQLite store in `dir`, heartbeats at `heartbeat`.
pub fn controller(dir: &Path, heartbeat: &str, extra: &str) -> Listening {
    let store = format!("sqlite://{}", dir.join("controller.db").display());
    controller_on(dir, &store, heartbeat, extra)
}

/// As [`controller`], on the store at `store_url` (`sqlite://...` or `postgres://...`).
pub fn controller_on(dir: &Path, store_url: &str, heartbeat: &str, extra: &str) -> Listening {
    let listen = format!("127.0.0.1:{}", fleetbench_testkit::free_port());
    let cfg = dir.join("controller.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"{listen}\"\nstore_url = \"{store_url}\"\nheartbeat_interval = \"{heartbeat}\"\n\
             host_wait = \"120s\"\n{extra}"
        ),
    )
    .unwrap();
    Launch::new("fleetbench-controller", dir.join("controller.log"))
        .name("controller")
        .env("RUST_LOG", "warn")
        .args([Path::new("--config"), &cfg])
        .spawn()
}

/// Starts `agents` stand-ins registering with the controller at `ctl`.
pub fn swarm(dir: &Path, ctl: SocketAddr, agents: usize, apply_time: &str) -> Listening {
    swarm_with(dir, ctl, agents, apply_time, &[])
}

/// As [`swarm`], with more of `fleetbench-swarm`'s flags.
pub fn swarm_with(
    dir: &Path,
    ctl: SocketAddr,
    agents: usize,
    apply_time: &str,
    extra: &[&str],
) -> Listening {
    Launch::new("fleetbench-swarm", dir.join("swarm.log"))
        .name("swarm")
        .env("RUST_LOG", "warn")
        .args([
            "--agents".to_string(),
            agents.to_string(),
            "--controller".into(),
            format!("http://{ctl}"),
            "--label".into(),
            format!("pool={POOL}"),
            "--apply-time".into(),
            apply_time.into(),
        ])
        .args(extra)
        .spawn()
}

pub async fn client(addr: SocketAddr) -> ControllerClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ControllerClient::connect(format!("http://{addr}")).await {
            Ok(c) => return c.max_decoding_message_size(256 << 20),
            Err(e) if Instant::now() > deadline => panic!("controller at {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Waits until `n` stand-ins are ready; returns how long it took. Panics after `timeout` with
/// the counts by health.
pub async fn wait_ready(
    c: &mut ControllerClient<Channel>,
    n: usize,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let agents = c
            .list_agents(ListAgentsRequest {})
            .await
            .expect("ListAgents")
            .into_inner()
            .agents;
        let ready = agents
            .iter()
            .filter(|a| a.health == AgentHealth::Ready as i32 && a.facts.is_some())
            .count();
        if ready >= n {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "after {timeout:?}: {} agents known, {ready} ready, of {n}",
            agents.len()
        );
        if last_print.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "  waiting: {} registered, {ready} ready of {n}",
                agents.len()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A sweep whose `hosts` trials (10 configs x hosts/10 repeats, or one config when `hosts` is
/// not a multiple of 10) each run two levels on a stand-in of the pool; `time_scale` is the
/// sim's `--time-scale` (levels take that fraction of their modelled time).
pub fn spread_spec(hosts: usize, time_scale: f64) -> String {
    let (configs, repeats) = if hosts.is_multiple_of(10) && hosts / 10 <= 100 {
        (10, hosts / 10)
    } else {
        assert!(
            hosts <= 100,
            "{hosts} hosts: use a multiple of 10 up to 1000"
        );
        (1, hosts)
    };
    // Interleaved: every trial on the first free host, so the job spreads over the whole
    // fleet (the default blocked order runs each repeat's configs one after another on a host).
    let mut s = format!(
        "name = \"spread-{hosts}\"\nrepeats = {repeats}\norder = \"interleaved\"\n\n[hosts]\nlabels = {{ pool = \"{POOL}\" }}\n\n"
    );
    for i in 0..configs {
        s.push_str(&format!(
            "[[configs]]\nname = \"mrr{}\"\nengine = \"sim\"\nmodel = \"sim-model\"\n\
             flags = {{ \"--max-running-requests\" = {}, \"--time-scale\" = {time_scale} }}\n\n",
            64 + 8 * i,
            64 + 8 * i
        ));
    }
    s.push_str(
        "[[workloads]]\nname = \"short\"\ndataset = \"random\"\ninput_len = 256\noutput_len = 128\n\n\
         [load]\nconcurrency = [4, 16]\nrequests = 64\n",
    );
    s
}

pub async fn submit(c: &mut ControllerClient<Channel>, spec: &str) -> String {
    let r = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec.to_string(),
            file_name: "spread.toml".into(),
            ..Default::default()
        })
        .await
        .expect("SubmitJob")
        .into_inner();
    assert!(r.errors.is_empty(), "spec refused: {:?}", r.errors);
    r.job_id
}

/// Polls until the job ends; prints progress every `every`; panics after `timeout`.
pub async fn wait_job(
    c: &mut ControllerClient<Channel>,
    id: &str,
    timeout: Duration,
    every: Duration,
) -> Job {
    let start = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let job = c
            .get_job(GetJobRequest { job_id: id.into() })
            .await
            .expect("GetJob")
            .into_inner();
        if JobState::is_final_value(job.state) {
            return job;
        }
        assert!(
            start.elapsed() < timeout,
            "job {id} still running after {timeout:?}: {} of {} trials, {} of {} levels",
            job.trials_done,
            job.trials_total,
            job.levels_done,
            job.levels_total
        );
        if last_print.elapsed() >= every {
            eprintln!(
                "  {:>5.0} s: {} of {} trials, {} of {} levels",
                start.elapsed().as_secs_f64(),
                job.trials_done,
                job.trials_total,
                job.levels_done,
                job.levels_total
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The stored levels of a job: how many, and on how many distinct hosts. Panics when a level
/// (trial, level index) is stored twice.
pub async fn levels_and_hosts(c: &mut ControllerClient<Channel>, id: &str) -> (usize, usize) {
    let r = c
        .get_results(GetResultsRequest {
            job_ids: vec![id.into()],
            include_telemetry: false,
        })
        .await
        .expect("GetResults")
        .into_inner();
    let hosts: BTreeSet<&str> = r.levels.iter().map(|l| l.host.as_str()).collect();
    let mut keys = BTreeSet::new();
    for l in &r.levels {
        let index = l.result.as_ref().map(|r| r.level_index);
        assert!(
            keys.insert((l.trial_id.as_str(), index)),
            "level {index:?} of trial {} stored twice",
            l.trial_id
        );
    }
    (r.levels.len(), hosts.len())
}
