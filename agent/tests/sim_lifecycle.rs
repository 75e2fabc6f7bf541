//! The agent driving the simulated engine over mTLS: apply, restart with another flag set,
//! benchmark, metrics, logs, stop; and a crash above a batch size reported as `crashed`.

mod common;

use std::time::Duration;

use common::*;
use fleetbench_proto::agentpb::{self, engine_event::Event};
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_restart_benchmark_metrics_stop() {
    let agent = Agent::start("").expect("agent starts");
    let mut c = agent.client().await.expect("mTLS client connects");
    let port = fleetbench_testkit::free_port();

    // First flag set.
    let ev = apply_sim(&mut c, port, &[("--max-running-requests", Some("8"))]).await;
    let first = spawned(&ev).expect("spawned event").clone();
    let r = ready(&ev).unwrap_or_else(|| panic!("not ready: {ev:?}\n{}", agent.log_text()));
    assert_eq!(r.base_url, format!("http://127.0.0.1:{port}"));
    assert!(
        first.argv.iter().any(|a| a == "--max-running-requests")
            && first.argv.iter().any(|a| a == "8"),
        "{:?}",
        first.argv
    );
    let status = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.state, agentpb::EngineState::Ready as i32);
    assert_eq!(status.pid, first.pid);
    assert_eq!(status.config_id, first.config_id);

    // A follower of the logs (no tail) sees the next run's lines as they come.
    let mut follow = c
        .stream_logs(agentpb::StreamLogsRequest {
            tail: 0,
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();

    // Second flag set: the first engine is stopped and its whole group is gone.
    let ev = apply_sim(
        &mut c,
        port,
        &[
            ("--max-running-requests", Some("16")),
            ("--disable-cuda-graph", None),
        ],
    )
    .await;
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Stopping(s) if s.pid == first.pid)),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Stopped(s) if s.pid == first.pid)),
        "{ev:?}"
    );
    let second = spawned(&ev).expect("spawned again").clone();
    assert_ne!(second.pid, first.pid);
    assert_ne!(second.config_id, first.config_id);
    assert!(ready(&ev).is_some(), "{ev:?}");
    assert!(
        group_members(first.pid as i32).is_empty(),
        "first engine's group still has processes"
    );
    assert!(!alive(first.pid as i32));
    let followed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(l) = follow.next().await {
            if l.unwrap().run_id == second.run_id {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        followed.ok(),
        Some(true),
        "the follower saw no line of the second run"
    );
    drop(follow);
    // The log parser saw the new limit in the sim's SGLang-style start-up lines.
    let status = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    let facts: Vec<(String, String)> = status
        .facts
        .iter()
        .map(|f| (f.key.clone(), f.value.clone()))
        .collect();
    assert!(
        facts
            .iter()
            .any(|(k, v)| k == "max_running_requests" && v == "16"),
        "{facts:?}"
    );

    // Benchmark: two levels stream back, one at a time, with progress.
    let req = agentpb::RunBenchmarkRequest {
        workload: Some(random_workload(32, 16)),
        levels: vec![closed(1), closed(4)],
        warmup_requests: 1,
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(8)),
        percentiles: vec![50.0, 99.0],
        slo: None,
        run_id: "bench-1".into(),
        skip_levels: vec![],
        ..Default::default()
    };
    let (_progress, levels) = bench(&mut c, req.clone(), Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(levels.len(), 2, "{levels:?}");
    for (i, l) in levels.iter().enumerate() {
        assert_eq!(l.level_index, i as u32);
        assert_eq!(l.outcome, agentpb::LevelOutcome::Ok as i32, "{l:?}");
        assert_eq!(l.completed, 8, "{l:?}");
        assert_eq!(l.failed, 0);
        assert!(l.output_tokens_per_s > 0.0);
        assert!(l.ttft_ms.as_ref().unwrap().percentiles.contains_key("p99"));
        assert!(l.finished_unix_ms >= l.started_unix_ms);
    }
    // skip_levels: only level 1 runs.
    let (_, levels) = bench(
        &mut c,
        agentpb::RunBenchmarkRequest {
            skip_levels: vec![0],
            ..req
        },
        Duration::from_secs(120),
    )
    .await
    .unwrap();
    assert_eq!(
        levels.iter().map(|l| l.level_index).collect::<Vec<_>>(),
        vec![1]
    );

    // Metrics: engine series (mapped and raw), the engine group's CPU and memory.
    let mut ms = engine_metrics(&mut c, 200, true).await;
    let mut samples = Vec::new();
    while samples.len() < 3 {
        samples.push(
            tokio::time::timeout(Duration::from_secs(10), ms.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        );
    }
    drop(ms);
    let last = samples.last().unwrap();
    assert_eq!(last.config_id, second.config_id);
    let engine = last.engine.as_ref().unwrap();
    assert!(engine.scraped, "{engine:?}");
    assert!(engine.running_requests.is_some(), "{engine:?}");
    assert!(
        engine.raw.iter().any(|s| s.name.starts_with("sglang:")),
        "{:?}",
        engine.raw.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let process = last.process.as_ref().unwrap();
    assert!(
        process.process_count >= 1 && process.rss_bytes > 0,
        "{process:?}"
    );
    // No NVML here: no GPU samples, and GetHost says why.
    assert!(last.gpus.is_empty());
    let host = c
        .get_host(agentpb::GetHostRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!host.gpu_unavailable_reason.is_empty());
    assert!(host.cpu_count > 0 && host.memory_total_bytes > 0);
    assert!(
        host.profiles
            .iter()
            .any(|p| p.name == "sim" && p.flags.iter().any(|f| f.name == "--max-running-requests"))
    );

    // A metrics interval below 100 ms is refused by name.
    let err = c
        .stream_metrics(agentpb::StreamMetricsRequest {
            interval_ms: 10,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("interval_ms"));

    // Logs: the ring's tail.
    let mut logs = c
        .stream_logs(agentpb::StreamLogsRequest {
            tail: 20,
            follow: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut lines = Vec::new();
    while let Some(l) = logs.next().await {
        lines.push(l.unwrap());
    }
    assert!(!lines.is_empty() && lines.len() <= 20);
    // The ring spans runs: the newest lines are the second run's.
    assert_eq!(lines.last().unwrap().run_id, second.run_id);
    assert!(std::path::Path::new(&second.log_path).is_file());

    // Stop: the group is gone and the state is idle.
    let st = c
        .stop_engine(agentpb::StopEngineRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
    assert!(group_members(second.pid as i32).is_empty());
    // Benchmarks need a ready engine.
    let err = c
        .run_benchmark(agentpb::RunBenchmarkRequest {
            workload: Some(random_workload(8, 8)),
            levels: vec![closed(1)],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_above_batch_size_ends_the_level_crashed_with_the_traceback() {
    let agent = Agent::start("").expect("agent starts");
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();
    let ev = apply_sim(&mut c, port, &[("--crash-above-batch", Some("4"))]).await;
    let pid = spawned(&ev).unwrap().pid;
    assert!(ready(&ev).is_some(), "{ev:?}");

    let req = agentpb::RunBenchmarkRequest {
        workload: Some(random_workload(16, 64)),
        levels: vec![closed(2), closed(16), closed(1)],
        warmup_requests: 0,
        bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(16)),
        percentiles: vec![],
        slo: None,
        run_id: "crash".into(),
        skip_levels: vec![],
        ..Default::default()
    };
    // The stream ends after the crashed level instead of hanging.
    let (_, levels) = bench(&mut c, req, Duration::from_secs(120)).await.unwrap();
    assert_eq!(levels.len(), 2, "{levels:?}");
    assert_eq!(
        levels[0].outcome,
        agentpb::LevelOutcome::Ok as i32,
        "{:?}",
        levels[0]
    );
    let crashed = &levels[1];
    assert_eq!(
        crashed.outcome,
        agentpb::LevelOutcome::Crashed as i32,
        "{crashed:?}"
    );
    let crash = crashed.crash.as_ref().expect("crash attached");
    assert_eq!(
        crash.class,
        agentpb::CrashClass::PythonException as i32,
        "{crash:?}"
    );
    assert_eq!(crash.exception_type, "AttributeError", "{crash:?}");
    assert!(!crash.frames.is_empty(), "{crash:?}");
    assert!(
        crash.log_tail.iter().any(|l| l.contains("Traceback")),
        "{:?}",
        crash.log_tail
    );
    assert_eq!(crash.exit_code, Some(1));

    let st = c
        .get_engine(agentpb::GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Failed as i32);
    assert_eq!(
        st.last_crash.as_ref().unwrap().exception_type,
        "AttributeError"
    );
    assert!(group_members(pid as i32).is_empty());
    // Stopping after a crash leaves the agent idle, the crash still readable.
    let st = c
        .stop_engine(agentpb::StopEngineRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, agentpb::EngineState::Idle as i32);
    assert_eq!(st.last_crash.unwrap().exception_type, "AttributeError");
}

/// The heartbeat stream (`WatchEngine`): the status at once, keep-alives at the interval asked
/// while nothing changes, and every change (the states of an apply, a lease taken and given
/// back) pushed as it happens: this test never polls `GetEngine`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_engine_pushes_changes_and_keepalives_at_the_interval_asked() {
    use agentpb::engine_watch_event::Event as Watch;
    let agent = Agent::start("").expect("agent starts");
    let mut c = agent.client().await.expect("mTLS client connects");

    let refused = c
        .watch_engine(agentpb::WatchEngineRequest { keepalive_ms: 50 })
        .await
        .expect_err("50 ms is below the minimum");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("keepalive_ms"), "{refused:?}");

    let mut w = c
        .watch_engine(agentpb::WatchEngineRequest { keepalive_ms: 300 })
        .await
        .unwrap()
        .into_inner();
    async fn next(
        w: &mut tonic::Streaming<agentpb::EngineWatchEvent>,
    ) -> agentpb::EngineWatchEvent {
        tokio::time::timeout(Duration::from_secs(10), w.message())
            .await
            .expect("a message within 10 s")
            .expect("stream healthy")
            .expect("stream open")
    }
    let first = next(&mut w).await;
    let Some(Watch::Status(s)) = &first.event else {
        panic!("the first message is the status: {first:?}")
    };
    assert_eq!(s.state, agentpb::EngineState::Idle as i32);
    // Nothing changes: keep-alives only, each 300 ms (the agent's clock) after the last message.
    let mut last_ms = first.unix_ms;
    for _ in 0..4 {
        let ev = next(&mut w).await;
        assert!(matches!(ev.event, Some(Watch::Keepalive(_))), "{ev:?}");
        let gap = ev.unix_ms - last_ms;
        assert!(
            (299..3_000).contains(&gap),
            "keep-alive {gap} ms after the last message"
        );
        last_ms = ev.unix_ms;
    }

    // An apply: its states arrive on the watch while it runs.
    let mut applier = c.clone();
    let port = fleetbench_testkit::free_port();
    let apply = tokio::spawn(async move { apply_sim(&mut applier, port, &[]).await });
    let mut states = Vec::new();
    let ready = loop {
        let ev = next(&mut w).await;
        if let Some(Watch::Status(s)) = ev.event {
            states.push(s.state());
            if s.state() == agentpb::EngineState::Ready {
                break s;
            }
        }
    };
    assert!(
        states.contains(&agentpb::EngineState::Starting),
        "{states:?}"
    );
    let events = apply.await.unwrap();
    assert_eq!(ready.pid, spawned(&events).expect("spawned").pid);

    // A lease taken and released (which stops the engine): both pushed.
    let lease = c
        .acquire_lease(agentpb::AcquireLeaseRequest {
            owner: "watcher-test".into(),
            job_id: "job-w".into(),
            trial_id: "t1".into(),
            ttl_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let leased = loop {
        if let Some(Watch::Status(s)) = next(&mut w).await.event
            && s.lease.is_some()
        {
            break s;
        }
    };
    assert_eq!(leased.lease.unwrap().epoch, lease.epoch);
    c.release_lease(agentpb::ReleaseLeaseRequest {
        epoch: lease.epoch,
        keep_engine: false,
    })
    .await
    .unwrap();
    loop {
        if let Some(Watch::Status(s)) = next(&mut w).await.event
            && s.lease.is_none()
            && s.state() == agentpb::EngineState::Idle
        {
            break;
        }
    }
}
