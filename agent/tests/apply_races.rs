//! Timing behaviour of ApplyEngine against real processes: "still waiting" events and the start
//! deadline, and a second apply cancelling one in flight.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::{self, engine_event::Event};
use tokio_stream::StreamExt;

const SLOW_PROFILE: &str =
    "[profiles.slowsim]\nkind = \"sim\"\nstart_timeout_s = 7\ngrace_s = 2\nmodels = [\"m\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_start_reports_waiting_then_fails_as_startup_timeout() {
    let agent = Agent::start(SLOW_PROFILE).unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();
    let ev = apply(
        &mut c,
        spec("slowsim", "m", port, &[("--startup-delay-s", Some("60"))]),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let pid = spawned(&ev).expect("spawned").pid;
    let waiting: Vec<&agentpb::WaitingReady> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Waiting(w) => Some(w),
            _ => None,
        })
        .collect();
    assert!(!waiting.is_empty(), "{ev:?}");
    assert!(
        waiting[0].elapsed_s >= 4.5 && waiting[0].message.contains("/health"),
        "{waiting:?}"
    );
    let Some(Event::Failed(crash)) = ev.last() else {
        panic!("last event is not a failure: {ev:?}")
    };
    assert_eq!(
        crash.class,
        agentpb::CrashClass::StartupTimeout as i32,
        "{crash:?}"
    );
    assert!(ready(&ev).is_none());
    assert!(
        group_members(pid as i32).is_empty(),
        "timed-out engine left processes"
    );
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Failed as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_apply_cancels_the_first_cleanly() {
    let agent = Agent::start(SLOW_PROFILE).unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();

    let mut first = c
        .apply_engine(agentpb::ApplyEngineRequest {
            spec: Some(spec(
                "slowsim",
                "m",
                port,
                &[("--startup-delay-s", Some("60"))],
            )),
            run_id: "first".into(),
            lease_epoch: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let first_pid = match first.next().await.unwrap().unwrap().event {
        Some(Event::Spawned(s)) => s.pid,
        other => panic!("expected spawned, got {other:?}"),
    };

    let ev = apply(&mut c, spec("sim", "m", port, &[]), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(ready(&ev).is_some(), "{ev:?}");
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Stopped(s) if s.pid == first_pid)),
        "{ev:?}"
    );

    // The first stream ends, told why, without ever being ready.
    let mut rest = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), first.next())
        .await
        .expect("first stream ends")
    {
        rest.push(e.unwrap().event.unwrap());
    }
    assert!(
        rest.iter()
            .any(|e| matches!(e, Event::Stopping(s) if s.reason.contains("ApplyEngine"))),
        "{rest:?}"
    );
    assert!(ready(&rest).is_none());
    assert!(group_members(first_pid as i32).is_empty());
    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Ready as i32);
    assert_ne!(st.pid, first_pid);
}
