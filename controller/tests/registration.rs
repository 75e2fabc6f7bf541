//! Agents that register themselves: listed with their facts, used by jobs, and still known to
//! a controller restarted on the same store before they call again.

mod common;

use std::time::{Duration, Instant};

use common::*;
use fleetbench_proto::controllerpb::{
    AgentHealth, JobState, ListAgentsRequest, SetAgentDrainingRequest, SubmitJobRequest,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_agent_runs_jobs_and_survives_a_controller_restart() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", fleetbench_testkit::free_port());
    let cfg = controller_config(dir.path(), &listen, &[]);
    let mut ctl = spawn_controller(&cfg, &dir.path().join("controller-1.log"));
    let agent_port = fleetbench_testkit::free_port();
    let _agent = spawn_agent_toml(
        dir.path(),
        "self",
        &format!(
            "name = \"self\"\nlisten = \"127.0.0.1:{agent_port}\"\ninsecure = true\n\
             data_dir = \"{}\"\nlabels = {{ pool = \"test\" }}\n\
             [controller]\naddress = \"http://{listen}\"\nadvertise = \"127.0.0.1:{agent_port}\"\n\
             [profiles.sim]\nkind = \"sim\"\nport = {}\n{}\n",
            dir.path().join("self").display(),
            fleetbench_testkit::free_port(),
            fleetbench_testkit::process::SIM_MODELS,
        ),
    );
    let mut c = client(ctl.addr).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let info = loop {
        let agents = c
            .list_agents(ListAgentsRequest {})
            .await
            .unwrap()
            .into_inner()
            .agents;
        if let Some(a) = agents
            .into_iter()
            .find(|a| a.name == "self" && a.health == AgentHealth::Ready as i32)
        {
            break a;
        }
        assert!(Instant::now() < deadline, "the agent never showed up ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(info.source, "registered");
    assert_eq!(info.address, format!("127.0.0.1:{agent_port}"));
    assert_eq!(info.labels.get("pool").map(String::as_str), Some("test"));
    assert!(info.facts.is_some_and(|f| !f.profiles.is_empty()));

    // A draining host gets no trial; undrained, the job runs on it.
    let drained = c
        .set_agent_draining(SetAgentDrainingRequest {
            name: "self".into(),
            draining: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(drained.health, AgentHealth::Draining as i32);
    let spec = sim_spec("reg", 1, &["self"]).replace("[1, 2, 4, 8]", "[1]");
    let job_id = c
        .submit_job(SubmitJobRequest {
            spec_toml: spec.clone(),
            file_name: "reg.toml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job_id;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let job = c
        .get_job(fleetbench_proto::controllerpb::GetJobRequest {
            job_id: job_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(job.levels_done, 0, "a draining host got work");
    c.set_agent_draining(SetAgentDrainingRequest {
        name: "self".into(),
        draining: false,
    })
    .await
    .unwrap();
    let job = wait_job(&mut c, &job_id, Duration::from_secs(120)).await;
    assert_eq!(job.state, JobState::Succeeded as i32, "{job:?}");

    // Restarted, the controller knows the agent from its store at once.
    ctl.terminate();
    let ctl2 = spawn_controller(&cfg, &dir.path().join("controller-2.log"));
    let mut c = client(ctl2.addr).await;
    let agents = c
        .list_agents(ListAgentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .agents;
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert_eq!(agents[0].name, "self");
    assert_eq!(agents[0].source, "registered");
}
