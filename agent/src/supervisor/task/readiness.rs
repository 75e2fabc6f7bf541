//! Readiness and health: the periodic HTTP probe of a starting engine (ready, still waiting,
//! start timeout) and of a ready one (unhealthy after consecutive failures).

use std::time::Duration;

use fleetbench_engines::crash::ExitInfo;
use fleetbench_proto::agentpb::{EngineState, Ready, WaitingReady, engine_event::Event};
use fleetbench_proto::now_unix_ms;
use tokio::time::Instant;

use super::{
    HEALTH_PROBE_EVERY, HEALTH_PROBE_TIMEOUT, Phase, ProbeFuture, START_PROBE_EVERY,
    START_PROBE_TIMEOUT, Task, UNHEALTHY_AFTER, WAITING_EVERY, send,
};
use crate::http::HttpClient;

impl Task {
    pub(super) async fn on_probe(&mut self, result: Result<u16, String>) {
        let Some(e) = &mut self.engine else { return };
        // Remember the group's members while its tree is intact: a worker that detaches and
        // is orphaned later is still recognised (and stopped) as the engine's.
        if matches!(e.phase, Phase::Ready { .. }) || matches!(result, Ok(200)) {
            let root = e.tracker.root;
            // `live` also reaps members that died after being reparented to the agent.
            let mut strays: Vec<(i32, u64)> = e
                .tracker
                .live()
                .iter()
                .filter(|p| p.pgrp != root)
                .map(|p| (p.pid, p.start_ticks))
                .collect();
            strays.sort_unstable();
            // Workers that left the group go into the note a later agent reads, should this
            // one die without stopping them.
            if strays != e.noted_strays {
                super::super::leftover::record_strays(&self.cfg.data_dir, e.pid, &strays);
                e.noted_strays = strays;
            }
        }
        let url = e.plan.health_url.clone();
        let ok = matches!(result, Ok(200));
        match &mut e.phase {
            Phase::Starting {
                next_waiting,
                last_error,
            } => {
                if ok {
                    let elapsed = e.spawned_at.elapsed().as_secs_f64();
                    e.phase = Phase::Ready { failures: 0 };
                    e.probe =
                        probe_after(&self.http, &url, HEALTH_PROBE_EVERY, HEALTH_PROBE_TIMEOUT);
                    e.span
                        .in_scope(|| tracing::info!(elapsed_s = elapsed, "ready"));
                    let ready = Ready {
                        elapsed_s: elapsed,
                        base_url: e.plan.base_url.clone(),
                        facts: e.facts.clone(),
                    };
                    self.publish(|s| {
                        s.state = EngineState::Ready;
                        s.since_unix_ms = now_unix_ms();
                    });
                    let events = self.apply_events.take();
                    send(&events, Event::Ready(ready));
                    return;
                }
                *last_error = match result {
                    Ok(code) => format!("HTTP {code}"),
                    Err(msg) => msg,
                };
                let elapsed = e.spawned_at.elapsed();
                if elapsed >= e.plan.start_timeout {
                    let msg = format!(
                        "not ready after {:.0} s (start_timeout); last probe of {url}: {last_error}",
                        e.plan.start_timeout.as_secs_f64()
                    );
                    self.fail_running(
                        ExitInfo {
                            startup_timed_out: true,
                            ..Default::default()
                        },
                        msg,
                    )
                    .await;
                    return;
                }
                if Instant::now() >= *next_waiting {
                    *next_waiting += WAITING_EVERY;
                    let w = WaitingReady {
                        elapsed_s: elapsed.as_secs_f64(),
                        message: format!("still waiting for {url}: {last_error}"),
                    };
                    e.probe = probe_after(&self.http, &url, START_PROBE_EVERY, START_PROBE_TIMEOUT);
                    send(&self.apply_events, Event::Waiting(w));
                    return;
                }
                e.probe = probe_after(&self.http, &url, START_PROBE_EVERY, START_PROBE_TIMEOUT);
            }
            Phase::Ready { failures } => {
                *failures = if ok { 0 } else { *failures + 1 };
                if *failures >= UNHEALTHY_AFTER {
                    let msg = format!(
                        "{UNHEALTHY_AFTER} health checks of {url} failed in a row: {result:?}"
                    );
                    self.fail_running(
                        ExitInfo {
                            unhealthy: true,
                            ..Default::default()
                        },
                        msg,
                    )
                    .await;
                    return;
                }
                e.probe = probe_after(&self.http, &url, HEALTH_PROBE_EVERY, HEALTH_PROBE_TIMEOUT);
            }
        }
    }
}

pub(super) fn probe_after(
    http: &HttpClient,
    url: &str,
    delay: Duration,
    timeout: Duration,
) -> ProbeFuture {
    let http = http.clone();
    let url = url.to_string();
    Box::pin(async move {
        tokio::time::sleep(delay).await;
        http.get(&url, timeout, 64 * 1024).await.map(|r| r.status)
    })
}
