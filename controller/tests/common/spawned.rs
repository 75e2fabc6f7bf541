//! The engine processes a job spawned, from its events, and whether any still runs: for the
//! tests of trials that run engines on several hosts (`gang_sim`, `router_job`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleetbench_proto::agentpb::{
    EngineState, GetEngineRequest, agent_client::AgentClient, engine_event,
};
use fleetbench_proto::controllerpb::{JobState, job_event};

use super::{Client, Proc, watch};

/// Every engine process the job's events say was spawned, by host.
pub type Pids = BTreeMap<String, Vec<u32>>;

pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 1 && unsafe { libc::kill(pid as i32, 0) } == 0
}

/// Waits (up to 15 s) until none of `pids` runs, and every agent says its engine is idle.
pub async fn nothing_running(pids: &Pids, agents: &[&Proc]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let live: Vec<u32> = pids
            .values()
            .flatten()
            .copied()
            .filter(|p| alive(*p))
            .collect();
        let mut busy = Vec::new();
        for a in agents {
            let mut c = AgentClient::connect(format!("http://{}", a.addr))
                .await
                .unwrap();
            let s = c
                .get_engine(GetEngineRequest {})
                .await
                .unwrap()
                .into_inner();
            if s.state != EngineState::Idle as i32 && s.state != EngineState::Failed as i32 {
                busy.push(format!("{}: {:?}", a.name, EngineState::try_from(s.state)));
            }
        }
        if live.is_empty() && busy.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running: pids {live:?}, engines {busy:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads the job's events to its end, noting spawned engines; `on_progress` runs at each level
/// progress event with the pids so far.
pub async fn follow(client: &mut Client, job_id: &str, mut on_progress: impl FnMut(&Pids)) -> Pids {
    let mut events = watch(client, job_id).await;
    let mut pids = Pids::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(60), events.message())
        .await
        .expect("events keep coming")
    {
        match ev.event {
            Some(job_event::Event::Engine(e)) => {
                if let Some(engine_event::Event::Spawned(s)) = e.event.and_then(|e| e.event) {
                    pids.entry(e.host).or_default().push(s.pid);
                }
            }
            Some(job_event::Event::Progress(_)) => on_progress(&pids),
            Some(job_event::Event::Job(j)) if JobState::is_final_value(j.state) => break,
            _ => {}
        }
    }
    pids
}
