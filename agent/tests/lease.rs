//! Leases with fencing on a real agent process (mTLS, the simulated engine): a lease that is not
//! renewed ends by itself and stops the engine; renewing keeps it; a call without the lease, or
//! under an older epoch, is refused with a status naming the holder; taking the lease cuts off
//! the holder's running benchmark without reporting its level.

mod common;

use std::time::{Duration, Instant};

use common::*;
use fleetbench_proto::agentpb::{
    self, AcquireLeaseRequest, EngineState, GetEngineRequest, GetHostRequest, RenewLeaseRequest,
    benchmark_event,
};
use tonic::Code;

fn acquire(owner: &str, job: &str, ttl_ms: u32, take: bool) -> AcquireLeaseRequest {
    AcquireLeaseRequest {
        owner: owner.into(),
        job_id: job.into(),
        trial_id: "trial-1".into(),
        ttl_ms,
        take,
        reason: if take {
            "maintenance".into()
        } else {
            String::new()
        },
    }
}

fn sim_apply(port: u16, epoch: u64) -> agentpb::ApplyEngineRequest {
    agentpb::ApplyEngineRequest {
        spec: Some(spec("sim", "sim-model", port, &[])),
        run_id: String::new(),
        lease_epoch: epoch,
    }
}

/// Applies under `epoch` and waits for ready.
async fn apply_ready(
    c: &mut agentpb::agent_client::AgentClient<tonic::transport::Channel>,
    port: u16,
    epoch: u64,
) -> u32 {
    let mut s = c
        .apply_engine(sim_apply(port, epoch))
        .await
        .unwrap()
        .into_inner();
    let mut pid = 0;
    while let Some(ev) = s.message().await.unwrap() {
        match ev.event {
            Some(agentpb::engine_event::Event::Spawned(sp)) => pid = sp.pid,
            Some(agentpb::engine_event::Event::Ready(_)) => return pid,
            Some(agentpb::engine_event::Event::Failed(f)) => panic!("engine failed: {f:?}"),
            _ => {}
        }
    }
    panic!("apply ended before ready");
}

fn bench(epoch: u64, duration_s: f64) -> agentpb::RunBenchmarkRequest {
    agentpb::RunBenchmarkRequest {
        workload: Some(agentpb::Workload {
            name: "w".into(),
            dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                input_len: 16,
                output_len: 16,
                range_ratio: 0.0,
            })),
            ..Default::default()
        }),
        levels: vec![agentpb::LoadLevel {
            concurrency: Some(1),
            ..Default::default()
        }],
        bound: Some(agentpb::run_benchmark_request::Bound::DurationS(duration_s)),
        lease_epoch: epoch,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_lease_stops_the_engine_and_its_epoch_stays_fenced() {
    let agent = Agent::start("").unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();
    let acquired = Instant::now();
    let lease = c
        .acquire_lease(acquire("ctl", "job-1", 1500, false))
        .await
        .unwrap()
        .into_inner();
    assert!(lease.epoch >= 1);
    let pid = apply_ready(&mut c, port, lease.epoch).await;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let host = c.get_host(GetHostRequest {}).await.unwrap().into_inner();
    assert_eq!(host.lease.as_ref().map(|l| l.epoch), Some(lease.epoch));

    // No renewal: the agent ends the lease at its expiry and stops the engine by itself.
    let began = Instant::now();
    let status = loop {
        let s = c
            .get_engine(GetEngineRequest {})
            .await
            .unwrap()
            .into_inner();
        if s.state == EngineState::Idle as i32 {
            break s;
        }
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "engine still {:?} long after the lease's 1.5 s TTL",
            s.state()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = began.elapsed();
    eprintln!(
        "engine idle {:.2} s after it was ready, {:.2} s after the acquire (TTL 1.5 s, never \
         renewed)",
        took.as_secs_f64(),
        acquired.elapsed().as_secs_f64()
    );
    assert!(
        acquired.elapsed() >= Duration::from_millis(1500),
        "stopped before the TTL ran out: {:?}",
        acquired.elapsed()
    );
    assert!(status.lease.is_none());
    assert!(
        status
            .lease_note
            .contains(&format!("lease epoch {} ", lease.epoch))
            && status.lease_note.contains("expired")
            && status.lease_note.contains("job-1"),
        "{}",
        status.lease_note
    );
    let host = c.get_host(GetHostRequest {}).await.unwrap().into_inner();
    assert!(host.lease.is_none() && host.lease_note.contains("expired"));
    // The engine's processes are gone (the sim is its own group's only member).
    let gone = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < gone, "engine pid {pid} outlived its lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        agent
            .log_text()
            .contains("lease expired: stopping the engine")
    );

    // The old holder's late calls are fenced off, however they come.
    for (what, code, msg) in [
        (
            "apply",
            c.apply_engine(sim_apply(port, lease.epoch))
                .await
                .err()
                .map(|s| s.code()),
            String::new(),
        ),
        (
            "bench",
            c.run_benchmark(bench(lease.epoch, 1.0))
                .await
                .err()
                .map(|s| s.code()),
            String::new(),
        ),
        (
            "renew",
            None,
            c.renew_lease(RenewLeaseRequest {
                epoch: lease.epoch,
                ttl_ms: 0,
            })
            .await
            .unwrap_err()
            .message()
            .to_string(),
        ),
    ] {
        if what == "renew" {
            assert!(msg.starts_with("fenced: lease epoch"), "{msg}");
        } else {
            assert_eq!(code, Some(Code::Aborted), "{what} under an expired epoch");
        }
    }
    // A new lease gets a larger epoch; unleased calls are fine again once it is released.
    let next = c
        .acquire_lease(acquire("ctl", "job-2", 5000, false))
        .await
        .unwrap()
        .into_inner();
    assert!(next.epoch > lease.epoch);
    c.release_lease(agentpb::ReleaseLeaseRequest {
        epoch: next.epoch,
        keep_engine: false,
    })
    .await
    .unwrap();
    c.stop_engine(agentpb::StopEngineRequest::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_engine_and_a_taken_lease_cuts_off_the_holder() {
    let agent = Agent::start("").unwrap();
    let mut c = agent.client().await.unwrap();
    let port = fleetbench_testkit::free_port();
    let lease = c
        .acquire_lease(acquire("ctl", "job-7", 1500, false))
        .await
        .unwrap()
        .into_inner();
    apply_ready(&mut c, port, lease.epoch).await;

    // Renewed every 500 ms for twice the TTL: still ready.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let r = c
            .renew_lease(RenewLeaseRequest {
                epoch: lease.epoch,
                ttl_ms: 0,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.epoch, lease.epoch);
    }
    let s = c
        .get_engine(GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.state(), EngineState::Ready);
    c.renew_lease(RenewLeaseRequest {
        epoch: lease.epoch,
        ttl_ms: 30_000,
    })
    .await
    .unwrap();

    // An operator without the lease is refused, with the job named.
    let refused = c
        .stop_engine(agentpb::StopEngineRequest { lease_epoch: 0 })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused.message().contains("job-7") && refused.message().contains("--take-lease"),
        "{}",
        refused.message()
    );
    // Another owner may not acquire it quietly.
    let busy = c
        .acquire_lease(acquire("operator", "", 60_000, false))
        .await
        .unwrap_err();
    assert_eq!(busy.code(), Code::Aborted, "{}", busy.message());

    // The holder runs a benchmark; the operator takes the lease during it.
    let mut stream = c
        .run_benchmark(bench(lease.epoch, 4.0))
        .await
        .unwrap()
        .into_inner();
    let mut oc = agent.client().await.unwrap();
    let taker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        oc.acquire_lease(acquire("operator", "", 60_000, true))
            .await
            .unwrap()
            .into_inner()
    });
    let mut levels = 0;
    let end = loop {
        match stream.message().await {
            Ok(Some(ev)) => {
                if let Some(benchmark_event::Event::Level(_)) = ev.event {
                    levels += 1;
                }
            }
            Ok(None) => break None,
            Err(s) => break Some(s),
        }
    };
    let taken = taker.await.unwrap();
    assert!(taken.epoch > lease.epoch);
    let end = end.expect("the benchmark stream ends with a status, not a clean end");
    assert_eq!(end.code(), Code::Aborted, "{}", end.message());
    assert!(end.message().contains("fenced"), "{}", end.message());
    assert_eq!(levels, 0, "the level cut off by the fencing was reported");

    // The holder's next calls are fenced, naming the new holder.
    let fenced = c
        .renew_lease(RenewLeaseRequest {
            epoch: lease.epoch,
            ttl_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(fenced.code(), Code::Aborted);
    assert!(
        fenced.message().contains("operator")
            && fenced.message().contains(&taken.epoch.to_string()),
        "{}",
        fenced.message()
    );
    let s = c
        .get_engine(GetEngineRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(s.lease_note.contains("taken by"), "{}", s.lease_note);
    // The operator stops the engine under its lease and releases it.
    c.stop_engine(agentpb::StopEngineRequest {
        lease_epoch: taken.epoch,
    })
    .await
    .unwrap();
    let r = c
        .release_lease(agentpb::ReleaseLeaseRequest {
            epoch: taken.epoch,
            keep_engine: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.engine.unwrap().state(), EngineState::Idle);
}
